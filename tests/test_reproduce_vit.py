"""reproduce_small.py --suite=vit: the ViT and DINO arms (each architecture's floor, MoCo v3 on the ResNet at MoCo v2's
ledger recipe), their flags as augself-train reads them, and the report's three tables; the suite registry."""

from __future__ import annotations

import os

import numpy as np
import pytest
from absl import flags as absl_flags
from test_reproduce_aware import entry
from test_reproduce_comparison import full_sweep

from augself_tf.training.train_config import config_from_flags, define_train_flags
from reproduce import doc_blocks, ledger, looc_arms, recipe_arms, reproduce_small, vit_arms, vit_report
from reproduce.suites import SUITES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOCO = full_sweep("moco", "solo")
DINO_X10 = full_sweep("dino", "dino-x10")


def by_name(arms):
    return {a.name: a for a in arms}


def test_a_vits_arms_name_their_backbone_and_pass_no_width_and_each_architecture_has_its_floor():
    arms = by_name(vit_arms.suite_arms(MOCO))
    vit = arms["tiny-vit_pico-mocov3-augself-s0"]
    args = vit.train_args("/data", "/run")
    assert "--backbone=vit_pico" in args and not any(a.startswith("--width") for a in args)
    assert any(a.startswith("--width=") for a in arms["tiny-mocov3-base-s0"].train_args("/data", "/run"))
    sincos, learned = arms["tiny-vit_pico-never_trained+sincos-s0"], arms["tiny-vit_pico-never_trained+learned-s0"]
    assert sincos.budget.never_trained and sincos.id != learned.id
    assert ("pos_embed", "sincos") in sincos.train_flags and ("pos_embed", "learned") in learned.train_flags
    # Each floor is the architecture its methods train: MoCo v3's ViT and DINO's ViT.
    assert set(vit_arms.SINCOS_VIT) <= set(vit.train_flags)
    assert set(vit_arms.LEARNED_VIT) <= set(arms["tiny-vit_pico-dino-base-s0"].train_flags)
    # The ResNet's floor is the LooC comparison's, already in the ledger.
    assert {a.id for a in looc_arms.floor_arms()} <= {a.id for a in arms.values()}
    assert arms["tiny-dino-base-s0"].budget.describe().startswith("resnet18 width 0.25")


def test_dino_on_the_resnet_keeps_its_own_recipes_arm_and_adds_the_sweeps_choice_once_it_is_known():
    own = by_name(vit_arms.suite_arms(MOCO))
    assert "tiny-dino-base-s0" in own and not any(n.startswith("tiny-dino-") and n != "tiny-dino-base-s0"
                                                   for n in own)  # the sweep is not complete: nothing else yet
    arms = by_name(vit_arms.suite_arms(MOCO + DINO_X10))
    assert arms["tiny-dino-base-s0"].id == own["tiny-dino-base-s0"].id  # its ledger entry still counts
    for name in ("tiny-dino-ledger-s0", "tiny-dino-augself+ledger-s0"):
        flags = dict(arms[name].train_flags)
        assert (flags["lr"], flags["weight_decay"], flags["warmup_epochs"]) == ("0.3", "0.0001", "12")
        assert (flags["optimizer"], flags["global_crop_scale"], flags["local_crops"]) == ("sgd", "0.14,1", "4")
    assert "tiny-dino-augself-s0" not in arms  # AugSelf is compared on the base that learns
    # DINO's own recipe chosen: AugSelf beside that arm, and no second copy of it.
    mine = by_name(vit_arms.suite_arms(MOCO + full_sweep("dino", recipe_arms.DINO_OWN)))
    assert mine["tiny-dino-augself-s0"].id == "tiny-dino-augself-s0-6619172d"  # the id it was listed under first
    assert not any("ledger" in n for n in mine)


def test_mocov3_on_the_resnet_waits_for_moco_v2s_sweep_then_trains_at_its_recipe():
    assert "tiny-mocov3-base-s0" not in by_name(vit_arms.suite_arms(MOCO[:-1]))
    flags = dict(by_name(vit_arms.suite_arms(MOCO))["tiny-mocov3-base-s0"].train_flags)
    assert (flags["lr"], flags["weight_decay"], flags["warmup_epochs"]) == ("0.3", "0.0001", "5")
    assert flags["temperature"] == "1.0" and "optimizer" not in flags  # the ledger's SGD, MoCo v3's ResNet T


@pytest.mark.parametrize("name", ["tiny-vit_pico-never_trained+sincos-s0", "tiny-vit_pico-mocov3-augself-s0",
                                  "tiny-mocov3-base-s0", "tiny-vit_pico-dino-augself-s0", "tiny-dino-base-s0",
                                  "tiny-dino-augself+ledger-s0"])
def test_every_arms_flags_resolve_to_a_run_augself_train_accepts(name):
    arm = by_name(vit_arms.suite_arms(MOCO + DINO_X10))[name]
    fv = absl_flags.FlagValues()
    define_train_flags(fv, "train")
    fv(["train_main", *arm.train_args("/data", "/run")])
    cfg = config_from_flags(fv)
    assert cfg.model.backbone == arm.budget.backbone and cfg.seed == arm.seed
    if arm.method == "dino":
        options = cfg.model.method_options
        assert (options["local_crops"], options["local_crop_size"]) == (4, 32)


def _cells(block: str, title: str, label: str) -> list[str]:
    """The row ``label`` of the table under ``title``."""
    part = block[block.index(title):]
    part = part[:part.index("\n\n", part.index("| method"))]
    line = next(ln for ln in part.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_keeps_each_architecture_in_its_table_against_its_own_floor():
    arms = vit_arms.suite_arms(MOCO)
    named = by_name(arms)
    values = {"tiny-vit_pico-never_trained+sincos-s0": 5.0, "tiny-vit_pico-mocov3-base-s0": 9.0,
              "tiny-vit_pico-mocov3-augself-s0": 11.0, "tiny-mocov3-base-s0": 20.0}
    entries = [entry(named[n], {("in_domain", "linear"): v}) for n, v in values.items()]
    moco_v2: list = []  # no comparison arm listed: MoCo v2's row is then left out
    block = vit_report.render(entries, arms, moco_v2, "solo")
    vit_title, resnet_title = vit_report.TABLES[0].title, vit_report.TABLES[2].title
    assert _cells(block, vit_title, "never trained")[5] == "5.0"
    assert _cells(block, vit_title, "MoCo v3")[5].startswith("9.0")
    assert _cells(block, vit_title, "MoCo v3 + AugSelf")[5].startswith("11.0 (Δ +2.0")
    assert _cells(block, resnet_title, "MoCo v3")[5].startswith("20.0")  # the ResNet's, not the ViT's
    assert _cells(block, vit_report.TABLES[1].title, "DINO")[1] == "6"  # 2 global + 4 local crops
    assert "**4 of the suite's" in block and "`tiny-dino-base-s0`" in block


def _with_curves(e, knn, entropy=None):
    epochs = [2.0 * i for i in range(len(knn))]
    e["monitors"] = {"step": [54 * i for i in range(len(knn))], "epoch": epochs, "values": {"knn": knn}}
    if entropy:
        e["diagnostics"] = {"step": e["monitors"]["step"], "epoch": epochs, "values": {"teacher_entropy": entropy}}
    return e


def test_the_picture_draws_each_architectures_curves_in_its_panel_and_dinos_entropy_where_logged(tmp_path):
    arms = vit_arms.suite_arms(MOCO + DINO_X10)
    named = by_name(arms)
    entries = [_with_curves(entry(named["tiny-vit_pico-dino-base-s0"], {}), [0.05, 0.07, 0.08]),
               _with_curves(entry(named["tiny-dino-ledger-s0"], {}), [0.05, 0.08, 0.04], [8.0, 8.2, 8.31]),
               _with_curves(entry(named["tiny-dino-augself+ledger-s0"], {}), [0.05, 0.07, 0.073], [8.0, 8.3, 8.31]),
               entry(named["tiny-vit_pico-never_trained+learned-s0"], {})]  # no curve: not drawn
    lines = vit_report.curve_lines(entries, arms, [])
    assert [(panel, line["label"], line["augself"]) for panel, line in lines] == [
        (0, "DINO (s0)", False), (1, "DINO (ledger recipe) (s0)", False),
        (1, "DINO + AugSelf (ledger recipe) (s0)", True)]
    assert lines[2][1]["base"] == "DINO (ledger recipe)"  # AugSelf's line takes its base row's colour
    assert lines[1][1]["knn"] == [(0.0, 5.0), (2.0, 8.0), (4.0, 4.0)]  # in %
    assert lines[0][1]["entropy"] == [] and lines[2][1]["entropy"][-1] == (4.0, 8.31)
    assert lines[1][1]["ln_k"] == pytest.approx(np.log(4096))
    picture = tmp_path / "img" / "vit_curves.png"
    assert vit_report.plot_curves(lines, str(picture)) == str(picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert vit_report.plot_curves([], str(tmp_path / "none.png")) is None and not (tmp_path / "none.png").exists()
    # The block links the picture when some row has a curve, and not otherwise.
    led = tmp_path / "ledger"
    for e in entries:
        ledger.write_json(str(led / f"{e['arm']}.json"), e)
    block = vit_report.report_block(str(led), arms, str(tmp_path / "results.md"), str(picture))
    assert f"![{vit_report.PICTURE_ALT}](img/vit_curves.png)" in block
    bare = tmp_path / "bare"
    ledger.write_json(str(bare / "floor.json"), entries[-1])
    assert "![" not in vit_report.report_block(str(bare), arms, str(tmp_path / "results.md"), str(picture))


def test_committed_vit_block_is_the_ledgers_report():
    led = os.path.join(REPO, "reproduce", "ledger")
    block = vit_report.report_block(led, vit_arms.suite_arms(ledger.load_entries(led)),
                                    os.path.join(REPO, "docs", "results.md"),
                                    os.path.join(REPO, "docs", "img", SUITES["vit"].picture()))
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), vit_report.BEGIN, vit_report.END)
    assert committed == block, "regenerate it: augself-reproduce --suite=vit --report_only"


def test_every_registered_suite_is_a_choice_and_one_without_a_smoke_version_refuses_quick(capsys):
    assert set(SUITES) == {"main", "looc", "aware", "recipe", "comparison", "vit"}
    for name, suite in SUITES.items():
        assert suite.command.endswith("" if name == "main" else f"--suite={name}")
        if suite.quick_arms is None:
            assert reproduce_small.main([f"--suite={name}", "--quick", "--list"]) == 2
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and f"--quick has no {name} suite" in err


def test_every_suite_writes_its_picture_under_docs_and_its_quick_run_under_its_own_directory():
    for name, suite in SUITES.items():
        args = reproduce_small.parse_args([f"--suite={name}"])
        assert args.curves == os.path.join(REPO, "docs", "img", suite.picture())
        quick = reproduce_small.parse_args([f"--suite={name}", "--quick"])
        assert quick.out == os.path.join(REPO, "runs", f"reproduce_small_{name}_quick")
        assert quick.curves == os.path.join(quick.out, suite.picture()) and quick.ledger.startswith(quick.out)
    pictures = [s.picture() for s in SUITES.values()]
    assert len(set(pictures)) == len(pictures)  # no suite draws over another's picture
    assert SUITES["main"].picture() == "reproduce_small_curves.png"
    assert SUITES["looc"].picture() == "looc_omega_probe.png" and SUITES["vit"].picture() == "vit_curves.png"
