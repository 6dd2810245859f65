"""The ledger recipe's sweep (reproduce/recipe_arms.py, reproduce/recipe_report.py): its arms train at the screen with
the recipe's flags and no evaluation, are judged on the val split, and its report summarises the held-out curve."""

from __future__ import annotations

import os

import pytest
from absl import flags as absl_flags

from augself_tf.training.train_config import config_from_flags, define_train_flags
from reproduce import arm_settings, doc_blocks, ledger, recipe_arms, recipe_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_arms_carry_their_recipe_flags_no_evaluation_and_the_held_out_monitor():
    arms = recipe_arms.sweep_arms()
    assert len({a.id for a in arms}) == len(arms) == len({a.name for a in arms})
    assert arms[0].name == "tiny-simsiam-paper-s0" and {a.method for a in arms} == {"simsiam", "moco", "simclr", "dino"}
    for a in arms:
        assert a.evals == () and a.suite == "recipe" and a.budget == recipe_arms.SCREEN_BUDGET
        args = a.train_args("/d", "/r")
        r = recipe_arms.recipe_of(a.settings())
        assert r is not None and a.name == f"tiny-{a.method}-{r.label}-s0"
        assert ("--queue_size=2048" in args) is (a.method == "moco")
        assert f"--lr={r.lr:g}" in args and f"--warmup_epochs={r.warmup_epochs:g}" in args
        assert f"--weight_decay_exclude={r.weight_decay_exclude}" in args
        assert "--monitor_splits=train,val" in args and "--epochs=40" in args  # judged on val, never on test
    solo_small = next(a for a in arms if a.name == "tiny-simsiam-solo-small-s0").train_args("/d", "/r")
    assert "--projector_dim=512" in solo_small and "--predictor_hidden=128" in solo_small
    assert recipe_arms.recipe_of({"method": "simsiam", "train_flags": {"lr": "9"}}) is None
    # DINO's ResNet arms: its method and ResNet crops as the ViT suite's, SGD, and the recipe's rate.
    dino = {a.name: a for a in arms if a.method == "dino"}
    assert list(dino) == ["tiny-dino-own-s0", "tiny-dino-own-clip-s0", "tiny-dino-bn-head-s0",
                          "tiny-dino-bn-head-x10-s0", "tiny-dino-dino-x3-s0", "tiny-dino-dino-x10-s0",
                          "tiny-dino-adamw-s0", "tiny-dino-solo-s0", "tiny-dino-solo-bn-s0"]
    own = dict(dino["tiny-dino-own-s0"].train_flags)
    assert {k: own[k] for k in ("optimizer", "lr", "weight_decay", "warmup_epochs", "weight_decay_exclude")} == {
        "optimizer": "sgd", "lr": "0.03", "weight_decay": "0.0001", "warmup_epochs": "12", "weight_decay_exclude": "1d"}
    # The ViT suite's DINO on the ResNet, at the screen's budget.
    assert set(arm_settings.DINO_METHOD) | set(arm_settings.DINO_RESNET_CROPS) <= set(own.items())
    assert dict(dino["tiny-dino-dino-x10-s0"].train_flags)["lr"] == "0.3"
    # A recipe's other settings take the place of the method's own flags of the same name: each flag once.
    for name, wanted in (("tiny-dino-adamw-s0", {"optimizer": "adamw", "weight_decay_end": "0.4", "clip_grad": "3.0"}),
                         ("tiny-dino-solo-s0", {"optimizer": "sgd", "local_crops": "0", "global_crop_scale": "0.08,1",
                                                "teacher_temperature": "0.07", "teacher_temperature_epochs": "0"})):
        keys = [k for k, _ in dino[name].train_flags]
        assert len(keys) == len(set(keys)), name
        args = dino[name].train_args("/d", "/r")
        assert all(f"--{k}={v}" in args for k, v in wanted.items()), name
        assert recipe_arms.recipe_of(dino[name].settings()).label == name.split("-")[2]
    clipped = dict(dino["tiny-dino-own-clip-s0"].train_flags)
    assert clipped == {**own, "clip_grad": "3.0"}  # DINO's own recipe, and its clipping
    assert dict(dino["tiny-dino-bn-head-s0"].train_flags) == {**clipped, "use_bn_in_head": "true"}
    assert dict(dino["tiny-dino-bn-head-x10-s0"].train_flags) == {**clipped, "use_bn_in_head": "true", "lr": "0.3"}
    solo = dict(dino["tiny-dino-solo-s0"].train_flags)
    assert dict(dino["tiny-dino-solo-bn-s0"].train_flags) == {**solo, "use_bn_in_head": "true"}


@pytest.mark.parametrize("arm", recipe_arms.sweep_arms(), ids=lambda a: a.name)
def test_every_recipe_arm_is_a_run_augself_train_accepts(arm):
    fv = absl_flags.FlagValues()
    define_train_flags(fv, "train")
    fv(["train_main", *arm.train_args("/data", "/run")])
    cfg = config_from_flags(fv)
    assert cfg.model.method == arm.method and cfg.epochs == 40
    if arm.name == "tiny-dino-solo-s0":  # two global crops and nothing else, at solo-learn's area
        assert cfg.model.method_options["local_crops"] == 0
        assert cfg.model.method_options["global_crop_scale"] == "0.08,1"


def test_curve_summary_ranks_by_the_last_quarter_and_sees_a_fall():
    rising = [0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10]
    s = recipe_arms.curve_summary(rising)
    assert s["start"] == 0.03 and s["peak"] == 0.10
    assert s["last_quarter"] == pytest.approx(0.095)
    assert s["second_half"] == pytest.approx(0.09 - 0.07)  # last three (0.08-0.10) against points 3-5 (0.06-0.08)
    falling = recipe_arms.curve_summary([0.03, 0.06, 0.07, 0.06, 0.05, 0.04, 0.035, 0.03])
    assert falling["second_half"] < -recipe_arms.FALL
    assert recipe_arms.curve_summary([0.1, None, 0.2]) is None  # too short to judge
    # A fall of exactly FALL is not "more than" FALL, whatever the floats' rounding: (0.050 + 0.054 + 0.048) / 3
    # against (0.038 + 0.044 + 0.040) / 3 differs by 0.010000000000000002 in float arithmetic.
    edge = recipe_arms.curve_summary([0.05, 0.06, 0.07, 0.05, 0.054, 0.048, 0.038, 0.044, 0.04])
    assert edge["second_half"] == -recipe_arms.FALL


def _entry(arm, knn, diagnostic, name="z_std"):
    steps = list(range(0, 54 * len(knn), 54))
    return {"arm": arm.id, "name": arm.name, "settings": arm.settings(), "records": [],
            "training": {"seconds_per_step": 0.5},
            "monitors": {"step": steps, "epoch": [s / 27 for s in steps], "values": {"knn": knn}},
            "diagnostics": {"step": steps, "epoch": [s / 27 for s in steps], "values": {name: diagnostic}}}


def test_report_rows_show_the_curve_the_fall_and_the_collapse_diagnostic(tmp_path):
    arms = recipe_arms.sweep_arms()
    led = tmp_path / "ledger"
    e = _entry(arms[1], [0.03, 0.06, 0.07, 0.06, 0.05, 0.04, 0.035, 0.03], [0.02, 0.01, 0.001, 0.0004] * 2)
    ledger.write_json(str(led / f"{e['arm']}.json"), e)
    block = recipe_report.report_block(str(led), arms)
    solo = next(line for line in block.splitlines() if line.startswith("| simsiam solo |"))
    assert "| 3.0 → 7.0 → **3.2** | -1.5 (falls) | 0.0004 | 0.5 |" in solo
    paper = next(line for line in block.splitlines() if line.startswith("| simsiam paper |"))
    assert "not yet run" in paper


def test_a_dino_row_shows_its_teacher_entropy_at_the_end(tmp_path):
    arms = recipe_arms.sweep_arms()
    dino = next(a for a in arms if a.method == "dino")
    led = tmp_path / "ledger"
    e = _entry(dino, [0.05, 0.06, 0.07, 0.07], [8.3, 8.2, 7.91, 7.456], name="teacher_entropy")
    ledger.write_json(str(led / f"{e['arm']}.json"), e)
    row = next(line for line in recipe_report.report_block(str(led), arms).splitlines()
               if line.startswith(f"| dino {recipe_arms.recipe_of(dino.settings()).label} |"))
    assert "| H 7.46 | 0.5 |" in row


def test_committed_recipe_block_is_the_ledgers_report():
    led = os.path.join(REPO, "reproduce", "ledger")
    block = recipe_report.report_block(led, recipe_arms.sweep_arms())
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), recipe_report.BEGIN, recipe_report.END)
    assert committed == block, "regenerate it: augself-reproduce --suite=recipe --report_only"
