"""reproduce/reproduce_small.py and its ledger: arms, entries, estimates, the report, and the committed block."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest
import tensorflow as tf

from reproduce import (
    arm_settings,
    doc_blocks,
    ledger,
    ledger_runner,
    main_arms,
    main_report,
    reproduce_small,
    run_directory,
    seed_cells,
    time_estimates,
    wall_table,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ----------------------------------------------------------------------------------------------------
# Synthetic ledger entries (the schema of reproduce/ledger/README.md)

MACHINE = {"cpu": "Test CPU @ 1GHz", "cores": 2, "python": "3.11.7", "tensorflow": "2.21.0", "keras": "3.15.1",
           "system": "Linux"}
GIT = {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}


def arm_of(method: str, augself: str, seed: int, condition: str = "none") -> arm_settings.Arm:
    """A tiny-imagenet arm of the default budget (seed 0's settings with this seed)."""
    first = next(a for a in main_arms.default_arms() if (a.data, a.method, a.augself, a.condition, a.seed)
                 == ("tiny", method, augself, condition, 0) and not a.budget.never_trained)
    return dataclasses.replace(first, seed=seed)


def entry(arm: arm_settings.Arm, values: dict[tuple[str, str, str], float], *, seconds: float = 1200.0,
          rate: float = 0.37, monitors: dict | None = None, machine: dict = MACHINE, git: dict = GIT) -> dict:
    records = [{"model": arm.id, "protocol": p, "dataset": f"folder:$DATA/{c}", "metric": m, "value": v,
                "ci95": None, "n_train": 10, "n_test": 10, "settings": {}, "seconds": 1.0, "call": c}
               for (c, p, m), v in values.items()]
    return {
        "schema": 1, "arm": arm.id, "name": arm.name, "settings": arm.settings(), "git": git, "machine": machine,
        "finished": "2025-01-01T00:00:00Z",
        "training": {"seconds": seconds, "steps": 3240, "steps_trained": 3240, "steps_per_epoch": 27,
                     "seconds_per_step": rate, "command": [], "sessions": [
                         {"machine": machine, "git": git, "steps": [0, 3240], "seconds": seconds,
                          "interrupted": False}]},
        "evaluation": {"seconds": 300.0, "calls": {c.name: {"seconds": 75.0, "command": []} for c in arm.evals}},
        "records": records,
        "monitors": monitors or {"step": [], "epoch": [], "values": {}},
    }


CP = ("tiny_probes", "colorperm", "accuracy_%")
FL = ("flowers17", "linear", "top1_%")
LOC = ("tiny_probes", "localization", "mse")


def seeded_simsiam_entries() -> list[dict]:
    base = {0: (60.0, 56.0, 0.0584), 1: (62.0, 57.0, 0.0580), 2: (61.0, 58.0, 0.0590)}
    aug = {0: (73.0, 61.0, 0.0579), 1: (72.0, 62.5, 0.0581), 2: (74.0, 61.6, 0.0583)}
    out = []
    for seed in (0, 1, 2):
        for augself, table in (("none", base), ("crop,color", aug)):
            cp, fl, loc = table[seed]
            curve = {"step": [0, 54, 108], "epoch": [0.0, 2.0, 4.0],
                     "values": {"knn": [0.05, 0.1 + seed / 100, 0.12], "colorperm": [0.3, 0.4, 0.5 + seed / 100]}}
            out.append(entry(arm_of("simsiam", augself, seed), {FL: fl, CP: cp, LOC: loc}, monitors=curve))
    return out


# ----------------------------------------------------------------------------------------------------
# Arms


def test_arm_ids_are_stable_names_of_their_settings():
    arms = main_arms.default_arms()
    assert len({a.id for a in arms}) == len(arms) and len({a.name for a in arms}) == len(arms)
    a = arms[8]
    assert a.id == main_arms.default_arms()[8].id  # the same settings, the same id, every time
    assert a.id == f"{a.name}-{arm_settings.settings_hash(a.settings())}"
    longer = main_arms.default_arms(epochs=200)[8]
    assert longer.name == a.name and longer.id != a.id  # another budget is another arm
    names = [x.name for x in arms]
    for seed in (0, 1, 2):
        assert f"tiny-simsiam-base-s{seed}" in names and f"tiny-simsiam-augself-s{seed}" in names
    assert {"tiny-moco-base-s0", "tiny-moco-augself-s0", "shapes-moco-base-s0", "shapes-moco-augself-s0",
            "tiny-simsiam-cond-s0", "tiny-moco-cond-s0"} <= set(names)
    floors = [x for x in arms if x.budget.never_trained]
    assert [x.name for x in floors] == [f"{d}-never_trained-s{s}" for d in ("tiny", "shapes") for s in (0, 1, 2)]
    assert all(x.evals == (main_arms.TINY_EVALS if x.data == "tiny" else main_arms.SHAPES_EVALS) for x in floors)
    tiny = next(x for x in arms if x.data == "tiny" and not x.budget.never_trained)
    assert dataclasses.asdict(tiny.budget) == {"epochs": 120, "width": 0.25, "image_size": 64, "batch_size": 128,
                                               "backbone": "resnet18", "max_steps": None}
    assert [c.dataset for c in tiny.evals] == ["flowers17", "cifar10-mini", "tiny-imagenet-mini", "tiny-imagenet-mini"]


def test_train_args_name_the_data_folder_and_condition_only_when_on():
    base, cond = arm_of("simsiam", "none", 0), arm_of("simsiam", "none", 0, condition="crop,color")
    args = base.train_args("/data", "/runs/x")
    assert "--dataset=folder:/data/tiny-imagenet-mini" in args and "--model_dir=/runs/x" in args
    assert not any(x.startswith("--condition") for x in args)
    assert "--condition=crop,color" in cond.train_args("/data", "/runs/x")
    moco = arm_of("moco", "crop,color", 0).train_args("/d", "/r")
    assert "--queue_size=2048" in moco and "--augself=crop,color" in moco
    assert arm_settings.dataset_spec("shapes", "/d") == "shapes"


def test_select_arms_by_glob_on_name_or_id():
    arms = main_arms.default_arms()
    picked = arm_settings.select_arms(arms, "tiny-simsiam-*-s1, shapes-moco-*")
    assert [a.name for a in picked] == ["shapes-moco-base-s0", "shapes-moco-augself-s0", "tiny-simsiam-base-s1",
                                        "tiny-simsiam-augself-s1"]
    assert arm_settings.select_arms(arms, arms[3].id) == [arms[3]]
    assert arm_settings.select_arms(arms, None) == arms
    with pytest.raises(ValueError, match="matches none"):
        arm_settings.select_arms(arms, "tiny-simsiam-s9")


# ----------------------------------------------------------------------------------------------------
# Seeds and the noise rule


def test_mean_half_range_and_noise_rule():
    base, strong, weak = [60.0, 62.0, 61.0], [73.0, 72.0, 74.0], [61.5, 63.0, 60.0]
    assert seed_cells.mean_half_range(base) == (pytest.approx(61.0), pytest.approx(1.0))
    delta, noise = seed_cells.difference(strong, base)
    assert delta == pytest.approx(12.0) and noise is False
    delta, noise = seed_cells.difference(weak, base)  # |0.5| <= 1.5 + 1.0
    assert delta == pytest.approx(0.5) and noise is True
    assert seed_cells.difference([70.0], base) == (pytest.approx(9.0), None)  # one seed: no spread to judge by
    assert seed_cells.delta_cell(weak, base, "accuracy_%") == "+0.5 (noise)"
    assert seed_cells.delta_cell(strong, base, "accuracy_%") == "+12.0"
    assert seed_cells.cell([0.0584], "mse") == "0.0584" and seed_cells.cell(base, "top1_%") == "61.0 ± 1.0"


def test_report_tables_seeds_paper_and_wall_time(tmp_path):
    entries = seeded_simsiam_entries()
    moco = [entry(arm_of("moco", a, 0), {FL: v, CP: w}, machine={**MACHINE, "cpu": "Other CPU"},
                  git={"commit": "fedcba9876" + "0" * 30, "dirty": True})
            for a, v, w in (("none", 50.0, 55.0), ("crop,color", 52.0, 58.0))]
    block = main_report.render_block(entries + moco, [], "img/curves.png")
    lines = block.splitlines()
    simsiam = lines.index("**SimSiam**")
    head = lines[simsiam + 2]
    assert "base (seeds 0, 1, 2)" in head and "+AugSelf{crop,color} (seeds 0, 1, 2)" in head
    assert "paper: base → AugSelf" in head and "| Δ AugSelf − base |" in head
    row = next(x for x in lines[simsiam:] if x.startswith("| tiny-imagenet-mini colorperm"))
    # base 60, 62, 61 -> 61.0 ± 1.0; AugSelf 73, 72, 74 -> 73.0 ± 1.0; the paper's pretext table 24.66 -> 60.49
    assert row == ("| tiny-imagenet-mini colorperm | accuracy % | 61.0 ± 1.0 | 73.0 ± 1.0 | +12.0 | "
                   "24.66 → 60.49 (pretext table) |")
    flowers = next(x for x in lines[simsiam:] if x.startswith("| flowers17 linear"))
    # base 56, 57, 58 (57.0 ± 1.0); AugSelf 61, 62.5, 61.6 (61.7 ± 0.8): +4.7, beyond 1.8 of spread
    assert "| 57.0 ± 1.0 | 61.7 ± 0.8 | +4.7 | 59.19 → 72.18 (Flowers102) |" in flowers
    loc = next(x for x in lines[simsiam:] if x.startswith("| tiny-imagenet-mini localization"))
    # base mean 0.05847, AugSelf 0.05810: Δ −0.00037 within half-ranges 0.0005 + 0.0002
    assert "-0.0004 (noise)" in loc and "0.00462 → 0.00335" in loc
    moco_at = lines.index("**MoCo v2**")
    row = next(x for x in lines[moco_at:] if x.startswith("| tiny-imagenet-mini colorperm"))
    # One seed: plain values, no noise judgement; the pretext table has no MoCo row.
    assert row == "| tiny-imagenet-mini colorperm | accuracy % | 55.0 | 58.0 | +3.0 |  |"
    assert "![online monitors" in block and "(img/curves.png)" in block
    wall = [x for x in lines if x.startswith("| tiny-")]
    assert any(x.startswith(f"| {entries[0]['arm']} | 20.0 | — | 0.37 | 5.0 | A | 0123456789 |") for x in wall)
    assert any(x.endswith("| B | fedcba9876-dirty |") for x in wall)
    assert "- A: 2 cores (Test CPU @ 1GHz), Python 3.11.7, TensorFlow 2.21.0" in lines
    assert "- B: 2 cores (Other CPU), Python 3.11.7, TensorFlow 2.21.0" in lines
    png = main_report.plot_curves(entries + moco, str(tmp_path / "c.png"))
    assert png and os.path.getsize(png) > 5000
    assert main_report.plot_curves(moco, str(tmp_path / "none.png")) is None  # no monitor points: no picture


def test_where_an_arms_time_goes_takes_medians_per_arm_group_and_machine():
    def timed(seed: int, steps: float, monitors: float, machine: dict = MACHINE, sessions: int = 1) -> dict:
        e = entry(arm_of("simsiam", "none", seed), {FL: 50.0}, seconds=steps + monitors + 60.0, machine=machine)
        e["training"].update(step_seconds=steps, monitor_seconds=monitors)
        e["training"]["sessions"] *= sessions
        e["evaluation"]["calls"] = {c: {"seconds": 6.0 * (seed + 1), "command": []} for c in ("in_domain", "flowers")}
        e["evaluation"]["seconds"] = 12.0 * (seed + 1)
        return e

    other = {**MACHINE, "cpu": "Other CPU"}
    # Machine A: steps 600, 1200, 900 s (median 15 min), monitors 60, 120, 180 (median 2 min), rest 1 min each;
    # evaluation calls 6, 12, 18 s (median 0.2 min each); totals 733, 1393, 1273 + ... -> median of 13.3, 23.2, 21.3.
    entries = [timed(0, 600, 60), timed(1, 1200, 120), timed(2, 900, 180),
               timed(0, 300, 30, machine=other),   # machine B: a group of its own
               timed(1, 5000, 10, sessions=2)]     # trained over two sessions: left out
    entries[2]["evaluation"]["calls"]["cifar10"] = {"seconds": 30.0, "command": []}  # one arm's extra call
    table, legend = wall_table.wall_table(entries)
    rows = [x for x in table.splitlines() if x.startswith("| tiny-simsiam-base |")]
    group = arm_of("simsiam", "none", 0).name.rsplit("-s", 1)[0]
    assert group == "tiny-simsiam-base"
    a_total = statistics.median([600 + 60 + 60 + 12, 1200 + 120 + 60 + 24, 900 + 180 + 60 + 36]) / 60
    assert rows[0] == (f"| tiny-simsiam-base | A | 3 | 15.0 | 2.0 | 1.0 | in_domain 0.2, flowers 0.2, cifar10 0.5 "
                       f"(1 of 3) | {a_total:.1f} |")
    assert rows[1] == "| tiny-simsiam-base | B | 1 | 5.0 | 0.5 | 1.0 | in_domain 0.1, flowers 0.1 | 6.7 |"
    assert len(rows) == 2 and len(legend) == 2
    # Entries without the split give no such table.
    assert "Where an arm's time goes" not in wall_table.wall_table([entry(arm_of("moco", "none", 0), {FL: 1.0})])[0]


def test_the_floor_is_a_column_of_its_sections_tables():
    entries = seeded_simsiam_entries()
    floor_arms = [a for a in main_arms.default_arms() if a.budget.never_trained and a.data == "tiny"]
    floors = [entry(a, {CP: v}) for a, v in zip(floor_arms, (60.0, 61.0, 62.0), strict=True)]
    block = main_report.render_block(entries + floors, [], None)
    lines = block.splitlines()
    assert sum(x.startswith("### tiny-imagenet-mini") for x in lines) == 1  # the floor joins its section
    head = lines[lines.index("**SimSiam**") + 2]
    assert "| never trained (seeds 0, 1, 2) | base (seeds 0, 1, 2) |" in head
    row = next(x for x in lines if x.startswith("| tiny-imagenet-mini colorperm"))
    # floor 61.0 ± 1.0; base 61.0 ± 1.0 within it; AugSelf 73.0 ± 1.0 beyond it
    assert row.startswith("| tiny-imagenet-mini colorperm | accuracy % | 61.0 ± 1.0 | 61.0 ± 1.0 ≈ floor | "
                          "73.0 ± 1.0 | +12.0 |")


def test_report_from_a_ledger_dir_and_block_replacement(tmp_path):
    entries = seeded_simsiam_entries()
    led = tmp_path / "ledger"
    for e in entries:
        ledger.write_json(str(led / f"{e['arm']}.json"), e)
    doc = tmp_path / "results.md"
    doc.write_text(f"# Results\nintro\n\n{main_report.BEGIN}\nold\n{main_report.END}\n\nhand-written reading\n")
    arms = main_arms.default_arms()
    block = main_report.write_report(str(led), arms, str(doc), str(tmp_path / "img" / "curves.png"))
    text = doc.read_text()
    assert text.startswith("# Results\nintro\n") and text.endswith("\n\nhand-written reading\n")
    assert doc_blocks.current_block(text, main_report.BEGIN, main_report.END) == block and "old" not in block
    assert "(img/curves.png)" in block and (tmp_path / "img" / "curves.png").stat().st_size > 5000
    pending = block.split("Arms not yet in the ledger: ")[1]
    assert "`tiny-moco-base-s0`" in pending and "`tiny-simsiam-base-s1`" not in pending
    assert main_report.report_block(str(led), arms, str(doc), str(tmp_path / "img" / "curves.png")) == block


def test_empty_ledger_block_says_how_to_fill_it(tmp_path):
    block = main_report.render_block([], [a for a in main_arms.default_arms() if not a.budget.never_trained][:2], None)
    assert "is empty" in block and "augself-reproduce --report_only" in block
    assert "--time_budget=MINUTES" in block and "`shapes-moco-base-s0`" in block


# ----------------------------------------------------------------------------------------------------
# Ledger files and monitor curves


def test_dumps_round_trips_and_keeps_value_lists_on_one_line():
    obj = {"a": [1, 2.5, "x, y", None], "b": {"c": [[1, 2], [3, 4]], "d": {}}, "e": []}
    text = ledger.dumps(obj)
    assert json.loads(text) == obj
    assert '"a": [1, 2.5, "x, y", null]' in text and "   [1, 2]" in text


def test_clean_record_makes_paths_portable_and_drops_pictures():
    rec = {"model": "m", "protocol": "linear", "dataset": "folder:/data/dir/flowers17", "metric": "top1_%",
           "value": 1.0, "settings": {"figure": "/runs/a/eval/x.png", "note": "read /runs/a/eval"}}
    out = ledger.clean_record(rec, "flowers17", {"/data/dir": "$DATA", "/runs/a": "$RUN"})
    assert out["dataset"] == "folder:$DATA/flowers17" and out["call"] == "flowers17"
    assert out["settings"] == {"note": "read $RUN/eval"}


def test_read_monitor_events_columns_per_epoch_resume_rewrites(tmp_path):
    tb = str(tmp_path / "tensorboard")
    with tf.summary.create_file_writer(tb).as_default():
        for step, knn, perm in ((0, 0.1, 0.3), (54, 0.2, 0.35), (108, 0.25, 0.4)):
            tf.summary.scalar("monitor/knn", knn, step=step)
            tf.summary.scalar("monitor/colorperm", perm, step=step)
            tf.summary.scalar("monitor/seconds", 1.5, step=step)
            tf.summary.scalar("loss/total", 7.0, step=step)
    time.sleep(1.1)  # a second file, as a resumed run writes: it redoes step 108 and goes on
    with tf.summary.create_file_writer(tb).as_default():
        for step, knn, perm in ((108, 0.26, 0.41), (162, 0.3, 0.5)):
            tf.summary.scalar("monitor/knn", knn, step=step)
            tf.summary.scalar("monitor/colorperm", perm, step=step)
    m = ledger.read_monitor_events(tb, steps_per_epoch=27)
    assert m["step"] == [0, 54, 108, 162] and m["epoch"] == [0.0, 2.0, 4.0, 6.0]
    assert set(m["values"]) == {"knn", "colorperm"}  # monitor/seconds and the losses are not curves
    np.testing.assert_allclose(m["values"]["knn"], [0.1, 0.2, 0.26, 0.3], rtol=1e-6)
    np.testing.assert_allclose(m["values"]["colorperm"], [0.3, 0.35, 0.41, 0.5], rtol=1e-6)


def test_time_split_adds_each_windows_steps_over_its_rate_and_the_monitor_seconds(tmp_path):
    tb = str(tmp_path / "tensorboard")
    with tf.summary.create_file_writer(tb).as_default():
        for step, rate in ((10, 50.0), (20, 100.0), (25, 128.0)):  # pairs per second over the window ending there
            tf.summary.scalar("pairs_per_sec", rate, step=step)
        for step in (0, 27):
            tf.summary.scalar("monitor/seconds", 2.5, step=step)
        tf.summary.scalar("collapse/z_std", 0.02, step=10)
    split = ledger.read_time_split(tb, batch_size=128)
    # 10·128/50 + 10·128/100 + 5·128/128 = 25.6 + 12.8 + 5.0
    assert split == {"step_seconds": 43.4, "monitor_seconds": 5.0}
    diagnostics = ledger.read_monitor_events(tb, 27, "collapse/")
    assert diagnostics["step"] == [10] and diagnostics["values"] == {"z_std": [0.02]}


# ----------------------------------------------------------------------------------------------------
# Run directories, estimates and the time budget


def _ctx(tmp_path, logs: list[str]) -> run_directory.Context:
    return run_directory.Context(root=REPO, data_dir=str(tmp_path / "data"), out_dir=str(tmp_path / "runs"),
                                 ledger_dir=str(tmp_path / "ledger"), log=logs.append)


def _checkpoint(run: str, step: int) -> None:
    os.makedirs(os.path.join(run, "checkpoints"), exist_ok=True)
    with open(os.path.join(run, "checkpoints", "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')


def test_checkpoint_step_steps_from_log_and_recovered_sessions(tmp_path):
    run = str(tmp_path / "run")
    assert run_directory.checkpoint_step(run) == 0
    _checkpoint(run, 540)
    assert run_directory.checkpoint_step(run) == 540
    log = "Pretraining ...\n  global batch 128 on 1 replica(s), 27 steps/epoch, 3240 steps, lr 0.03\n"
    assert run_directory.steps_from_log(log) == (27, 3240) and run_directory.steps_from_log("nothing") is None
    # A driver killed without recording its session: its time is the last write minus its start.
    state = {"sessions": [{"started": time.time() - 100, "steps": [0, None], "seconds": None}], "evals": {},
             "trained": False}
    os.utime(os.path.join(run, "checkpoints", "checkpoint"))
    run_directory.recover_sessions(run, state)
    s = state["sessions"][0]
    assert s["interrupted"] and s["steps"] == [0, 540] and 99 <= s["seconds"] <= 130


def test_lock_keeps_a_second_process_out_and_ignores_a_dead_one(tmp_path):
    run = str(tmp_path / "run")
    first, second = run_directory.Lock(run), run_directory.Lock(run)
    assert first.acquire()
    with open(first.path, "w") as f:  # as if another live process (the test's parent) held it
        f.write(f"{__import__('socket').gethostname()} {os.getppid()}\n")
    assert not second.acquire() and "pid" in second.holder()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(first.path, "w") as f:
        f.write(f"{__import__('socket').gethostname()} {dead.pid}\n")
    assert second.acquire()  # a stale lock of a finished process
    second.release()
    assert not os.path.exists(second.path)


def test_estimate_uses_ledger_rates_then_the_arms_own_sessions(tmp_path):
    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    done = entry(arm_of("simsiam", "none", 0), {CP: 60.0}, rate=0.5)
    arm = arm_of("simsiam", "crop,color", 1)
    est = time_estimates.estimate(arm, ctx, [done], allow_probe=False)
    # 27 steps/epoch × 120 epochs × 0.5 s, plus a start-up, plus the 4 evaluation calls measured at 75 s each
    assert est.seconds == pytest.approx(3240 * 0.5 + time_estimates.STARTUP_SECONDS + 4 * 75.0)
    assert "ledger" in est.why
    # Entries of the same objective (AugSelf on SimSiam, another seed) are preferred over the method's others, and
    # of those the newest three (an older one ran older code):
    siblings = [entry(arm_of("simsiam", "crop,color", 0), {CP: 60.0}, rate=rate) | {"finished": f"2025-0{month}"}
                for rate, month in ((0.6, 2), (5.0, 1), (0.8, 4), (0.7, 3))]
    est = time_estimates.estimate(arm, ctx, [done, *siblings, done], allow_probe=False)
    assert est.seconds == pytest.approx(3240 * 0.7 + time_estimates.STARTUP_SECONDS + 4 * 75.0)
    assert "(same objective and monitors" in est.why
    # Monitored otherwise, the same objective still beats the method's other entries:
    other = siblings[0] | {"settings": siblings[0]["settings"] | {"train_flags": {"monitor": "none"}}}
    est = time_estimates.estimate(arm, ctx, [done, other], allow_probe=False)
    assert est.seconds == pytest.approx(3240 * 0.6 + time_estimates.STARTUP_SECONDS + 4 * 75.0)
    assert "(same objective" in est.why and "monitors" not in est.why
    # Half trained here at 0.4 s/step, one evaluation call guessed (none like it measured):
    run = ctx.run_dir(arm)
    _checkpoint(run, 1620)
    run_directory.save_state(run, {"sessions": [{"started": 0, "steps": [0, 1620], "seconds": 648.0,
                                                 "interrupted": True}], "evals": {}, "trained": False,
                                   "steps_per_epoch": 27})
    est = time_estimates.estimate(arm, ctx, [], allow_probe=False)
    guess = time_estimates.EVAL_GUESS_SECONDS
    assert est.seconds == pytest.approx(1620 * 0.4 + time_estimates.STARTUP_SECONDS + 4 * guess)
    assert "this arm's earlier sessions" in est.why and "guessed" in est.why
    assert time_estimates.estimate(arm_of("moco", "none", 0), ctx, [], allow_probe=False) is None


def test_time_budget_skips_arms_that_would_not_finish(tmp_path):
    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    os.makedirs(ctx.ledger_dir)
    done = entry(arm_of("simsiam", "none", 0), {CP: 60.0}, rate=0.5)
    ledger.write_json(os.path.join(ctx.ledger_dir, done["arm"] + ".json"), done)
    arms = [arm_of("simsiam", "none", 0), arm_of("simsiam", "crop,color", 0)]
    result = ledger_runner.run_arms(arms, ctx, time_budget_minutes=10)
    assert result == {"done": [], "skipped": ["tiny-simsiam-augself-s0"], "failed": []}
    assert any("in the ledger" in x and "tiny-simsiam-base-s0" in x for x in logs)
    skip = next(x for x in logs if "skipped" in x)
    assert "needs ~33 min" in skip and "10 min of the budget left" in skip
    assert not os.path.exists(ctx.run_dir(arms[1]))  # nothing was started


@pytest.mark.parametrize("ending", ["exit 3", "kill -9 $$", "kill -TERM $$"])
def test_a_killed_command_stops_the_run_a_failed_one_does_not(tmp_path, ending):
    # A stand-in interpreter for train_main: fails with an exit status, or dies of a signal as under kill -9.
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{ending}\n")
    fake.chmod(0o755)
    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    ctx.python, ctx.poll_seconds = str(fake), 0.1
    arms = [arm_of("simsiam", "none", 0), arm_of("simsiam", "crop,color", 0)]
    result = ledger_runner.run_arms(arms, ctx)
    killed = ending.startswith("kill")
    assert result["failed"] == ([arms[0].name] if killed else [a.name for a in arms]) and not result["done"]
    assert os.path.exists(ctx.run_dir(arms[1])) is not killed
    if killed:
        signame = "SIGKILL" if "-9" in ending else "SIGTERM"
        assert f"train_main was killed by {signame}" in logs[-1] and "stopping here" in logs[-1]
        state = run_directory.load_state(ctx.run_dir(arms[0]))
        assert state["sessions"][-1]["exit_status"] < 0 and not state["trained"]


FAKE_MAIN = """#!{python}
# A stand-in for train_main.py / eval_main.py: notes each call, writes what the runner reads back.
import json, os, sys
script, args = sys.argv[1], dict(a[2:].split("=", 1) for a in sys.argv[2:] if "=" in a)
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(os.path.basename(script) + " " + args.get("protocol", "") + "\\n")
if script == "train_main.py":
    ckpt = os.path.join(args["model_dir"], "checkpoints")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-10"\\n')
    print("  global batch 128 on 1 replica(s), 5 steps/epoch, 10 steps, lr 0.03")
else:
    model = os.path.basename(os.path.dirname(args["saved_model"]))  # eval_main's name: the run directory's
    record = {{"model": model, "protocol": args["protocol"], "dataset": "d", "metric": "top1_%", "value": 1.0,
              "ci95": None, "n_train": 1, "n_test": 1, "settings": {{}}, "seconds": 1.0}}
    with open(args["output"], "w") as f:
        json.dump([record], f)
"""


def test_a_changed_evaluation_reevaluates_without_training_again(tmp_path, monkeypatch):
    """The run directory is keyed by the training settings and each call's output by the call's own flags: an
    arm whose evaluation list changes (new id, new entry) keeps its training and redoes only the changed call;
    a run directory named by an older full id is taken over."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_MAIN.format(python=sys.executable))
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    ctx.python, ctx.poll_seconds = str(fake), 0.05
    first = dataclasses.replace(arm_of("simsiam", "none", 0), evals=(
        arm_settings.EvalCall("a", "linear", "flowers17", 64),
        arm_settings.EvalCall("b", "colorperm", "flowers17", 64)))
    os.makedirs(os.path.join(ctx.out_dir, first.id))  # where runs lived before: the full id
    assert ledger_runner.run_arms([first], ctx)["done"] == [first.name]
    assert os.path.isdir(ctx.run_dir(first)) and not os.path.exists(os.path.join(ctx.out_dir, first.id))
    assert calls.read_text().split("\n")[:-1] == ["train_main.py ", "eval_main.py linear", "eval_main.py colorperm"]
    changed = dataclasses.replace(first, evals=(first.evals[0], dataclasses.replace(first.evals[1], flags=("--x=1",))))
    assert changed.id != first.id and changed.train_id == first.train_id
    assert dataclasses.replace(first, suite="other").train_id == first.train_id  # suites share a training
    assert ledger_runner.run_arms([changed], ctx)["done"] == [changed.name]
    assert calls.read_text().split("\n")[3:-1] == ["eval_main.py colorperm"]
    entry_ = json.load(open(ledger.entry_path(ctx.ledger_dir, changed)))
    assert entry_["settings"] == changed.settings() and set(entry_["evaluation"]["calls"]) == {"a", "b"}
    assert "--x=1" in entry_["evaluation"]["calls"]["b"]["command"]
    assert {r["call"] for r in entry_["records"]} == {"a", "b"}
    assert {r["model"] for r in entry_["records"]} == {changed.id}  # the arm's id, not its run directory's


# ----------------------------------------------------------------------------------------------------
# The command


@pytest.mark.slow
def test_quick_end_to_end(tmp_path):
    """--quick as CI runs it: 2 shapes arms trained, evaluated and entered in a ledger under --out; the rerun
    finds them in the ledger; docs/ is never touched."""
    docs = {p: os.path.getmtime(os.path.join(REPO, p)) for p in ("docs/results.md",)}
    out = tmp_path / "quick"
    cmd = [sys.executable, "-m", "reproduce.reproduce_small", "--quick", f"--out={out}"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"--quick took {seconds:.0f} s")
    entries = ledger.load_entries(str(out / "ledger"))
    arms = main_arms.quick_arms()
    assert sorted(e["arm"] for e in entries) == sorted(a.id for a in arms)
    for e, arm in zip(sorted(entries, key=lambda e: e["arm"]), sorted(arms, key=lambda a: a.id), strict=True):
        assert e["settings"] == arm.settings() and e["schema"] == ledger.SCHEMA
        assert e["training"]["steps"] == 2 and e["training"]["seconds"] > 0 and e["training"]["seconds_per_step"] > 0
        assert e["training"]["steps_per_epoch"] == 5000 // 32 and len(e["training"]["sessions"]) == 1
        assert e["git"]["commit"] is None or len(e["git"]["commit"]) == 40
        assert e["machine"]["cores"] == os.cpu_count()
        assert {(r["protocol"], r["metric"], r["call"]) for r in e["records"]} == {
            ("linear", "top1_%", "shapes"), ("colorperm", "accuracy_%", "shapes")}
        assert all(r["model"] == arm.id for r in e["records"])
        assert next(r for r in e["records"] if r["protocol"] == "linear")["n_test"] == 200  # --max_examples
        assert e["monitors"]["step"] == [0, 2] and set(e["monitors"]["values"]) == {"knn", "knn_color"}
        command = e["training"]["command"]
        assert command[:2] == ["python", "train_main.py"] and "--model_dir=$RUN" in command
        assert not any(str(tmp_path) in json.dumps(x) for x in (e["records"], e["training"]["command"]))
    block = doc_blocks.current_block((out / "results.md").read_text(), main_report.BEGIN, main_report.END)
    assert "shapes-moco-augself-s0" in block and "| shapes linear | top1 % |" in block
    assert (out / "reproduce_small_curves.png").stat().st_size > 5000
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert again.returncode == 0 and again.stdout.count("not rerun") == 2, again.stdout + again.stderr
    assert {p: os.path.getmtime(os.path.join(REPO, p)) for p in docs} == docs


def test_the_console_command_is_the_modules_cli():
    """pyproject.toml's augself-reproduce runs what ``python -m reproduce.reproduce_small`` runs."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        target = tomllib.load(f)["project"]["scripts"]["augself-reproduce"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is reproduce_small.cli


def test_outside_a_checkout_the_command_stops_with_one_line(tmp_path, monkeypatch, capsys):
    """A non-editable install has the package but not the checkout's ledger, docs and programs: one line naming
    what is missing and how to run the reproduction, exit status 2, nothing written."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text("")
    monkeypatch.setattr(ledger, "ROOT", str(tmp_path))
    assert reproduce_small.main(["--list", f"--out={tmp_path / 'out'}"]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert line.endswith(f"error: {tmp_path} is not an augself-tf checkout (no train_main.py, eval_main.py, "
                         "reproduce/ledger/): in a checkout, run `python -m reproduce.reproduce_small` from its root, "
                         "or `pip install -e .` there and then `augself-reproduce`"), line
    assert out == "" and os.listdir(tmp_path) == ["docs"]


def test_committed_results_block_is_the_ledgers_report():
    """docs/results.md's generated block is what --report_only makes of the committed ledger."""
    block = main_report.report_block(os.path.join(REPO, "reproduce", "ledger"), main_arms.default_arms(),
                                os.path.join(REPO, "docs", "results.md"),
                                os.path.join(REPO, "docs", "img", "reproduce_small_curves.png"))
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), main_report.BEGIN, main_report.END)
    assert committed == block, "regenerate it: augself-reproduce --report_only"
