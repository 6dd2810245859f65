"""reproduce_small.py --suite=looc: the LooC comparison's arms, their estimates, and the LooC-table report from the
ledger."""

from __future__ import annotations

import dataclasses
import os

import pytest

from reproduce import (
    arm_settings,
    doc_blocks,
    ledger,
    looc_arms,
    looc_report,
    main_arms,
    main_report,
    reproduce_small,
    run_directory,
    time_estimates,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE = {"cpu": "Test CPU @ 1GHz", "cores": 2, "python": "3.11.7", "tensorflow": "2.21.0", "keras": "3.15.1",
           "system": "Linux"}
GIT = {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}


def arm(name: str) -> arm_settings.Arm:
    return next(a for a in looc_arms.looc_table_arms() if a.name == name)


def entry(a: arm_settings.Arm, values: dict[tuple[str, str, str], float], rate: float = 0.4,
          chance: dict[str, float] | None = None) -> dict:
    """A synthetic ledger entry of the schema in reproduce/ledger/README.md."""
    chance = chance or {}
    records = [{"model": a.id, "protocol": p, "dataset": "x", "metric": m, "value": v, "ci95": None, "n_train": 1,
                "n_test": 1, "settings": {"chance_%": chance[p]} if p in chance else {}, "seconds": 1.0, "call": c}
               for (c, p, m), v in values.items()]
    return {"schema": 1, "arm": a.id, "name": a.name, "settings": a.settings(), "git": GIT, "machine": MACHINE,
            "finished": "2026-01-01T00:00:00Z",
            "training": {"seconds": 3240 * rate, "steps": 3240, "steps_trained": 3240, "steps_per_epoch": 27,
                         "seconds_per_step": rate, "command": [], "sessions": [
                             {"machine": MACHINE, "git": GIT, "steps": [0, 3240], "seconds": 3240 * rate,
                              "interrupted": False}]},
            "evaluation": {"seconds": 60.0 * len(a.evals), "calls": {c.name: {"seconds": 60.0, "command": []}
                                                                      for c in a.evals}},
            "records": records, "monitors": {"step": [], "epoch": [], "values": {}}}


LIN = ("in_domain", "linear", "top1_%")
K5 = ("flowers", "lowshot_5shot", "top1_%")
ROT = ("in_domain", "omega_probe_rotation", "accuracy_%")
CROP = ("in_domain", "omega_probe_crop", "R2")


def plus(key: tuple[str, str, str]) -> tuple[str, str, str]:
    return (key[0] + looc_arms.PLUS_SUFFIX, *key[1:])


def synthetic_entries() -> list[dict]:
    """MoCo at seeds 0 and 1, MoCo + AugSelf and LooC (color, rotation) on both signatures at seed 0,
    SimSiam ± AugSelf at seed 0; no LooC (color) or (rotation)."""
    return [
        entry(arm("tiny-moco-base-s0"), {LIN: 20.0, K5: 30.0, ROT: 40.0, CROP: 0.2}, rate=0.30, chance={ROT[1]: 25.0}),
        entry(arm("tiny-moco-base-s1"), {LIN: 22.0, K5: 31.0, ROT: 42.0, CROP: 0.3}, rate=0.40, chance={ROT[1]: 25.0}),
        entry(arm("tiny-moco-augself-s0"), {LIN: 24.0, K5: 33.5}, rate=0.31),
        entry(arm("tiny-looc-color_rotation-s0"), {LIN: 19.0, K5: 32.0, ROT: 70.0, CROP: 0.1, plus(LIN): 15.0,
                                                   plus(K5): 29.0, plus(ROT): 85.0, plus(CROP): 0.05},
              rate=0.5, chance={ROT[1]: 25.0}),
        entry(arm("tiny-simsiam-base-s0"), {LIN: 18.0}, rate=0.6),
        entry(arm("tiny-simsiam-augself-s0"), {LIN: 21.5}, rate=0.62),
    ]


def test_looc_arms_in_order_with_their_settings():
    floors, arms = looc_arms.looc_table_arms()[:3], looc_arms.looc_table_arms()[3:]
    assert [a.name for a in floors] == ["tiny-never_trained-s0", "tiny-never_trained-s1", "tiny-never_trained-s2"]
    for seed, floor in enumerate(floors):
        # The initialised network, evaluated by the table's calls on its export with recomputed BN statistics.
        assert floor.seed == seed and floor.budget == dataclasses.replace(arm_settings.TINY_BUDGET, max_steps=0)
        assert floor.evals == looc_arms.TABLE_EVALS and floor.saved_model == "saved_model_precise_bn"
        args = floor.train_args("/d", "/r")
        assert "--max_steps=0" in args and "--precise_bn_images=3500" in args
        assert not any(x.startswith("--monitor") for x in args)
    assert [a.name for a in arms] == [
        "tiny-moco-base-s0", "tiny-moco-augself-s0", "tiny-looc-color-s0", "tiny-looc-rotation-s0",
        "tiny-looc-color_rotation-s0", "tiny-simsiam-base-s0", "tiny-simsiam-augself-s0",
        "tiny-moco-base-s1", "tiny-moco-augself-s1", "tiny-moco-base-s2", "tiny-moco-augself-s2",
        "tiny-simsiam-base-s1", "tiny-simsiam-augself-s1", "tiny-simsiam-base-s2", "tiny-simsiam-augself-s2",
        "tiny-looc-color_rotation-s1", "tiny-looc-color_rotation-s2"]
    assert len({a.id for a in arms}) == len(arms)
    for a in arms:
        assert a.budget == arm_settings.TINY_BUDGET and a.suite == "looc" and a.settings()["suite"] == "looc"
        assert a.saved_model == "saved_model"
        flags = dict(a.train_flags)
        assert flags["monitor"] == "auto" and flags["monitor_every"] == "2"
        assert (flags.get("queue_size") == "2048") is (a.method in ("moco", "looc"))
        args = a.train_args("/d", "/r")
        assert "--split=train" in args and "--dataset=folder:/d/tiny-imagenet-mini" in args
    looc = arm("tiny-looc-color_rotation-s0").train_args("/d", "/r")
    assert "--augself=none" in looc and "--looc_augmentations=color,rotation" in looc and "--method=looc" in looc
    # LooC: every call twice, the second on LooC++'s signature; the others once, on serving_default.
    calls = arm("tiny-looc-color-s0").evals
    assert [c.name for c in calls] == ["in_domain", "flowers", "cifar10", "in_domain@plus", "flowers@plus",
                                       "cifar10@plus"]
    assert all(("--signature=looc_plus_features" in c.flags) is c.name.endswith("@plus") for c in calls)
    assert [c.name for c in arm("tiny-moco-base-s0").evals] == ["in_domain", "flowers", "cifar10"]
    assert "lowshot" in calls[1].protocols and calls[1].dataset == "flowers17"
    assert {"linear", "omega_probe", "colorperm", "rotation"} <= set(calls[0].protocols.split(","))
    assert [looc_arms.views_per_image(m, s) for m, s in (("moco", None), ("looc", "color"), ("looc", "color,rotation"))
            ] == [2, 3, 4]


def test_main_reproduction_arms_keep_their_ids_and_the_new_arms_differ():
    """The committed entries are the main reproduction's arms, unchanged by the suite field (absent from its
    settings)."""
    ids = {a.id for a in main_arms.default_arms()}
    committed = {e["arm"] for e in ledger.load_entries(os.path.join(REPO, "reproduce", "ledger"))
                 if "suite" not in e["settings"]}
    assert committed and committed <= ids
    assert "suite" not in main_arms.default_arms()[0].settings()
    old, new = next(a for a in main_arms.default_arms() if a.name == "tiny-moco-base-s0"), arm("tiny-moco-base-s0")
    assert old.name == new.name and old.id != new.id  # another evaluation list: another arm, run afresh


def test_looc_estimate_is_mocos_step_times_the_benchmarked_ratio(tmp_path):
    ctx = run_directory.Context(root=REPO, data_dir=str(tmp_path), out_dir=str(tmp_path / "runs"),
                                ledger_dir=str(tmp_path / "ledger"), log=lambda m: None)
    moco = entry(arm("tiny-moco-base-s0"), {LIN: 20.0}, rate=0.4)
    for name, ratio in (("tiny-looc-color-s0", 1.24), ("tiny-looc-color_rotation-s0", 1.47)):
        est = time_estimates.estimate(arm(name), ctx, [moco], allow_probe=False)
        # The three backbone calls are MoCo's (measured: 60 s each); the three LooC++ calls are guessed.
        calls = 3 * 60.0 + 3 * time_estimates.EVAL_GUESS_SECONDS
        assert est.seconds == pytest.approx(3240 * 0.4 * ratio + time_estimates.STARTUP_SECONDS + calls)
        assert f"× {ratio} for LooC's N" in est.why
    # Once a LooC arm is in the ledger, its own rate is used.
    looc = entry(arm("tiny-looc-color-s0"), {LIN: 20.0}, rate=0.7)
    est = time_estimates.estimate(arm("tiny-looc-rotation-s0"), ctx, [moco, looc], allow_probe=False)
    assert est.seconds == pytest.approx(3240 * 0.7 + time_estimates.STARTUP_SECONDS + 6 * 60.0)


def _row(block: str, label: str, nth: int = 0) -> list[str]:
    rows = [line for line in block.splitlines() if line.startswith(f"| {label} |")]
    return [c.strip() for c in rows[nth].strip("|").split("|")]


def test_the_floor_row_and_cells_within_its_spread():
    """The never-trained row shows its seeds' cells with no N, s/step or Δ; a row whose cell lies within the floor's
    spread (|Δ| to the floor's mean ≤ both half-ranges) is marked, one beyond it is not."""
    floors = [entry(arm(f"tiny-never_trained-s{s}"), {LIN: v, K5: 29.0 + s}) for s, v in ((0, 17.0), (1, 19.0))]
    block = looc_report.render(synthetic_entries() + floors, looc_arms.looc_table_arms(), None)
    assert _row(block, "never trained")[:6] == ["never trained", "—", "—", "2 (0, 1)", "18.0 ± 1.0", "—"]
    # SimSiam 18.0 is within 18.0 ± 1.0; MoCo v2's 21.0 ± 1.0 is not (|3.0| > 1 + 1) on linear, and its 5-shot
    # 30.5 ± 0.5 is within the floor's 29.5 ± 0.5.
    assert _row(block, "SimSiam")[4] == "18.0 ≈ floor"
    moco = _row(block, "MoCo v2")
    assert moco[4] == "21.0 ± 1.0" and moco[6] == "30.5 ± 0.5 ≈ floor"
    assert _row(block, "SimSiam + AugSelf")[4] == "21.5 (Δ +3.5)"  # beyond the floor's spread


def test_report_cells_n_delta_paper_and_not_yet_run():
    arms = looc_arms.looc_table_arms()
    block = looc_report.render(synthetic_entries(), arms, "img/omega.png")
    # MoCo v2: seeds 0, 1 -> 21.0 ± 1.0 linear, 30.5 ± 0.5 5-shot; s/step the arms' mean 0.35 (in italics: not
    # timed back to back); the paper's MoCo row.
    assert _row(block, "MoCo v2") == ["MoCo v2", "2", "*0.35*", "2 (0, 1)", "21.0 ± 1.0", "81.0", "30.5 ± 0.5",
                                      "78.5 ± 0.3", "—", "81.2 ± 0.3"]
    # LooC (color, rotation), backbone: Δ to MoCo's mean; the paper's figure with its Δ to LooC's MoCo*.
    assert _row(block, "LooC (color, rotation)") == [
        "LooC (color, rotation)", "4", "*0.5*", "1 (0)", "19.0 (Δ -2.0)", "79.2 (-1.8)", "32.0 (Δ +1.5)",
        "70.9 ± 0.3 (+3.0)", "—", "80.8 ± 0.2 (+3.5)"]
    # LooC++: the same run, its looc_plus_features records; no paper figure in this table.
    assert _row(block, "LooC++ (color, rotation)") == [
        "LooC++ (color, rotation)", "4", "*0.5*", "1 (0)", "15.0 (Δ -6.0)", "—", "29.0 (Δ -1.5)", "—", "—", "—"]
    assert _row(block, "LooC (color)")[:5] == ["LooC (color)", "3", "—", "not yet run", "—"]
    assert _row(block, "LooC (color)")[5] == "81.1 (+0.1)"  # the paper's figure shows even before our run
    assert _row(block, "MoCo v2 + AugSelf")[4] == "24.0 (Δ +3.0)"
    assert _row(block, "SimSiam + AugSelf")[2:5] == ["*0.62*", "1 (0)", "21.5 (Δ +3.5)"]
    assert _row(block, "SimSiam + AugSelf")[5] == "82.6 (+1.0)"
    # The ω-probe table: R² plainly, accuracy with its chance; LooC++ reads its own records.
    omega = _row(block, "LooC (color, rotation)", 2)
    assert omega[2] == "0.1000" and omega[6] == "70.0 (chance 25.0)"
    assert _row(block, "LooC++ (color, rotation)", 2)[6] == "85.0 (chance 25.0)"
    assert _row(block, "MoCo v2", 2)[2] == "0.2500 ± 0.0500"
    assert "![omega_probe: rows × augmentations](img/omega.png)" in block
    pending = block.split("Not yet run (")[1]
    assert pending.startswith("14 arms)") and "`tiny-looc-color-s0`" in pending and "`tiny-moco-base-s0`" not in pending
    # Two seeds against one: no noise judgement; two against two within the spread: noise.
    two = synthetic_entries() + [entry(arm("tiny-moco-augself-s1"), {LIN: 20.0})]
    assert _row(looc_report.render(two, arms, None), "MoCo v2 + AugSelf")[4] == "22.0 ± 2.0 (Δ +1.0, noise)"
    # Heat map values: rotation as (acc − chance)/(1 − chance), R² as is.
    labels, augs, matrix, _ = looc_report.omega_matrix(synthetic_entries())
    assert augs == ["crop", "rotation"] and labels[0] == "MoCo v2 (2 seeds)"
    assert matrix[labels.index("LooC++ (color, rotation)")] == [pytest.approx(0.05), pytest.approx(0.8)]


def test_time_steps_times_every_setting_back_to_back_and_the_table_reads_it(tmp_path, monkeypatch):
    """--time_steps: one arm per setting (seeds share it), rounds in alternating order, medians written under
    LEDGER/timings/ (not read as an entry); the s/step column then shows them with the ratio to the baseline."""
    from reproduce import step_times

    rates = {"tiny-moco-base": [0.20, 0.22], "tiny-looc-color_rotation": [0.30, 0.28],
             "tiny-moco-augself": [0.21, 0.21]}
    calls: list[str] = []

    def fake_timed_steps(a, ctx, steps, run):
        name = arm_settings.step_setting(a)
        calls.append(name)
        return rates[name][sum(c == name for c in calls) - 1], 27

    monkeypatch.setattr(time_estimates, "timed_steps", fake_timed_steps)
    ctx = run_directory.Context(root=REPO, data_dir=str(tmp_path), out_dir=str(tmp_path / "runs"),
                                ledger_dir=str(tmp_path / "ledger"), log=lambda m: None)
    arms = [arm(n) for n in ("tiny-moco-base-s0", "tiny-moco-base-s1", "tiny-looc-color_rotation-s0",
                             "tiny-moco-augself-s0")]
    record = step_times.measure(arms, ctx, "looc", steps=10, rounds=2)
    assert calls == ["tiny-moco-base", "tiny-looc-color_rotation", "tiny-moco-augself",
                     "tiny-moco-augself", "tiny-looc-color_rotation", "tiny-moco-base"]
    assert {k: v["median"] for k, v in record["settings"].items()} == {
        "tiny-moco-base": 0.21, "tiny-looc-color_rotation": 0.29, "tiny-moco-augself": 0.21}
    assert ledger.load_timings(ctx.ledger_dir, "looc") == record and ledger.load_entries(ctx.ledger_dir) == []
    block = looc_report.render(synthetic_entries(), looc_arms.looc_table_arms(), None, timings=record)
    assert _row(block, "MoCo v2")[2] == "0.21"
    assert _row(block, "LooC (color, rotation)")[2] == "0.29 (1.38×)"
    assert _row(block, "LooC++ (color, rotation)")[2] == "0.29 (1.38×)"
    assert _row(block, "MoCo v2 + AugSelf")[2] == "0.21 (1.00×)"
    assert _row(block, "SimSiam")[2] == "*0.6*"  # not timed: its arms' training rate
    assert "timed back to back" in block and "timings/looc.json" in block


def test_empty_ledger_report_is_whole():
    block = looc_report.render([], looc_arms.looc_table_arms(), None)
    assert block.count("not yet run") >= 3 * len(looc_report.ROWS) and "0 entries" in block
    assert "Not yet run (20 arms)" in block and "![" not in block


def test_report_only_is_deterministic_and_keeps_to_its_block(tmp_path):
    led = tmp_path / "ledger"
    main_suite = main_arms.default_arms()
    main_entry = entry(main_suite[2], {("flowers17", "linear", "top1_%"): 30.0})
    for e in [*synthetic_entries(), main_entry]:
        ledger.write_json(str(led / f"{e['arm']}.json"), e)
    doc, png = tmp_path / "results.md", tmp_path / "img" / "omega.png"
    doc.write_text(f"# R\n{main_report.BEGIN}\nmain\n{main_report.END}\n\n"
                   f"{looc_report.BEGIN}\nold\n{looc_report.END}\n\nhand\n")
    argv = ["--suite=looc", "--report_only", f"--ledger={led}", f"--results_md={doc}", f"--curves={png}"]
    assert reproduce_small.main(argv) == 0
    first, picture = doc.read_text(), png.read_bytes()
    assert reproduce_small.main(argv) == 0
    assert doc.read_text() == first and png.read_bytes() == picture and len(picture) > 5000
    assert first.startswith(f"# R\n{main_report.BEGIN}\nmain\n{main_report.END}\n") and first.endswith("\n\nhand\n")
    block = doc_blocks.current_block(first, looc_report.BEGIN, looc_report.END)
    assert block == looc_report.report_block(str(led), looc_arms.looc_table_arms(), str(doc), str(png))
    assert "(img/omega.png)" in block and main_entry["arm"] not in block  # the main suite's entry is not read
    # ... and the main suite's report does not read this suite's entries.
    main_block = main_report.render_block([main_entry], [a for a in main_suite if a.id != main_entry["arm"]], None,
                                          ledger_label=os.path.relpath(led, ledger.ROOT) + "/")
    assert main_report.report_block(str(led), main_suite, str(doc), str(tmp_path / "c.png")) == main_block


def test_quick_suite_arms_are_small():
    quick = looc_arms.quick_looc_arms()
    assert [a.name for a in quick] == ["shapes-moco-base-s0", "shapes-looc-color-s0"]
    assert all(a.budget.max_steps == 2 and a.budget.width == 0.0625 for a in quick)
    assert {c.dataset for a in quick for c in a.evals} == {"shapes"}
    assert dataclasses.asdict(quick[1].evals[-1])["name"] == "flowers@plus"


def test_committed_looc_block_is_the_ledgers_report():
    """docs/results.md's LooC block is what --suite=looc --report_only makes of the committed ledger."""
    block = looc_report.report_block(os.path.join(REPO, "reproduce", "ledger"), looc_arms.looc_table_arms(),
                                     os.path.join(REPO, "docs", "results.md"),
                                     os.path.join(REPO, "docs", "img", "looc_omega_probe.png"))
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), looc_report.BEGIN, looc_report.END)
    assert committed == block, "regenerate it: augself-reproduce --suite=looc --report_only"
