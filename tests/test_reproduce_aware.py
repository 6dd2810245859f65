"""reproduce_small.py --suite=aware: the augmentation-aware family's arms, the CASSLE pilot's winner, and the report
from the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from reproduce import (
    arm_settings,
    aware_arms,
    aware_report,
    doc_blocks,
    ledger,
    looc_arms,
    looc_report,
    reproduce_small,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE = {"cpu": "Test CPU @ 1GHz", "cores": 2, "python": "3.11.7", "tensorflow": "2.21.0", "keras": "3.15.1",
           "system": "Linux"}
GIT = {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}
COLUMNS = aware_arms.TABLE_COLUMNS
# The suite's ids before the pilot's winner is known: a changed id would train an arm afresh, so they stay.
FLOOR_IDS = ["tiny-never_trained-s0-0a910b2d", "tiny-never_trained-s1-92dbe183", "tiny-never_trained-s2-53fa9254"]
IDS = FLOOR_IDS + [
    "tiny-simsiam-base-s0-e60d5680", "tiny-simsiam-augself-s0-b03c7350", "tiny-simsiam-equimod-s0-ea5f573e",
    "tiny-simsiam-essl-s0-5ab6e4ae", "tiny-simsiam-stl-s0-ab4a8d43", "tiny-simsiam-cond+concat-s0-f0142d44",
    "tiny-simsiam-cond+add-s0-9766bc2a", "tiny-simsiam-cond+mul-s0-0169a071",
    "tiny-simsiam-cond+hypernet-s0-b09102e7", "tiny-simclr-base-s0-1772c709", "tiny-simclr-augself-s0-ac890914",
    "tiny-simclr-equimod-s0-c79dac58", "tiny-simclr-essl-s0-ad958111", "tiny-simclr-stl-s0-ae16ac11",
    "tiny-simsiam-base-s1-4b1eedc6", "tiny-simsiam-augself-s1-6e741205", "tiny-simsiam-equimod-s1-38a4d0c6",
    "tiny-simsiam-essl-s1-2aa5b9bb", "tiny-simsiam-stl-s1-0d9b217c", "tiny-simsiam-base-s2-55613740",
    "tiny-simsiam-augself-s2-bef05ec7", "tiny-simsiam-equimod-s2-32d7e71f", "tiny-simsiam-essl-s2-98d31723",
    "tiny-simsiam-stl-s2-87dfec67",
]


def arm(name: str, winner: str | None = None) -> arm_settings.Arm:
    return next(a for a in aware_arms.aware_arms(winner=winner) if a.name == name)


def entry(a: arm_settings.Arm, values: dict[tuple[str, str], float], rate: float = 0.4,
          chance: dict[str, float] | None = None) -> dict:
    """A synthetic ledger entry of the schema in reproduce/ledger/README.md (the shape of a real looc entry)."""
    chance = chance or {}
    records = [{"model": a.id, "protocol": p, "dataset": "x",
                "metric": "R2" if p in ("omega_probe_crop", "omega_probe_color") else
                ("top1_%" if p in ("linear",) or p.startswith("lowshot") else "accuracy_%"),
                "value": v, "ci95": None, "n_train": 1, "n_test": 1,
                "settings": {"chance_%": chance[p]} if p in chance else {}, "seconds": 1.0, "call": c}
               for (c, p), v in values.items()]
    return {"schema": 1, "arm": a.id, "name": a.name, "settings": a.settings(), "git": GIT, "machine": MACHINE,
            "finished": "2026-01-01T00:00:00Z",
            "training": {"seconds": 3240 * rate, "steps": 3240, "steps_trained": 3240, "steps_per_epoch": 27,
                         "seconds_per_step": rate, "command": [], "sessions": [
                             {"machine": MACHINE, "git": GIT, "steps": [0, 3240], "seconds": 3240 * rate,
                              "interrupted": False}]},
            "evaluation": {"seconds": 60.0 * len(a.evals), "calls": {c.name: {"seconds": 60.0, "command": []}
                                                                      for c in a.evals}},
            "records": records, "monitors": {"step": [], "epoch": [], "values": {}}}


def full(values: list[float]) -> dict[tuple[str, str], float]:
    """An entry's seven table columns, in TABLE_COLUMNS order."""
    return dict(zip(COLUMNS, values, strict=True))


LIN, PERM = ("in_domain", "linear"), ("in_domain", "colorperm")
CROP, ROT = ("in_domain", "omega_probe_crop"), ("in_domain", "omega_probe_rotation")
PILOT = {"concat": 20.0, "add": 22.0, "mul": 25.0, "hypernet": 24.0}  # every column's value: mul wins


def synthetic_entries() -> list[dict]:
    """SimSiam and SimSiam + AugSelf at seeds 0-2, the four-kind pilot (mul wins), mul's seeds 1 and 2, SimCLR at
    seed 0; no EquiMod, E-SSL or STL."""
    out = []
    for seed, (lin, perm) in enumerate(((10.0, 50.0), (12.0, 52.0), (14.0, 54.0))):
        out.append(entry(arm(f"tiny-simsiam-base-s{seed}"), {LIN: lin, PERM: perm, CROP: 0.1, ROT: 30.0},
                         rate=0.6, chance={ROT[1]: 25.0}))
    for seed, (lin, perm) in enumerate(((20.0, 52.0), (21.0, 53.0), (22.0, 54.0))):
        out.append(entry(arm(f"tiny-simsiam-augself-s{seed}"), {LIN: lin, PERM: perm, CROP: 0.3, ROT: 40.0},
                         rate=0.62, chance={ROT[1]: 25.0}))
    out += [entry(arm(f"tiny-simsiam-cond+{k}-s0"), full([v] * 7)) for k, v in PILOT.items()]
    out += [entry(arm(f"tiny-simsiam-cond+mul-s{s}", "mul"), full([v] * 7)) for s, v in ((1, 23.0), (2, 27.0))]
    out.append(entry(arm("tiny-simclr-base-s0"), {LIN: 30.0}, rate=0.5))
    return out


def test_arm_list_names_unique_ids_stable_and_the_looc_pairs_reused():
    arms = aware_arms.aware_arms()
    assert [a.id for a in arms] == IDS
    assert len({a.name for a in arms}) == len(arms)
    assert all(a.suite == "aware" for a in arms
               if a.variant not in ("base", "augself", "never_trained") or a.method != "simsiam")
    looc_simsiam = {a.id for a in looc_arms.looc_table_arms() if a.method == "simsiam"}
    assert {a.id for a in arms if a.method == "simsiam" and a.variant in ("base", "augself", "never_trained")
            } == looc_simsiam  # the floor and SimSiam ± AugSelf: the LooC comparison's entries, reused
    with_winner = aware_arms.aware_arms(winner="mul")
    assert [a.id for a in with_winner if a.id not in IDS] == ["tiny-simsiam-cond+mul-s1-82648098",
                                                             "tiny-simsiam-cond+mul-s2-c03c8b29"]
    assert len({a.name for a in with_winner}) == len(with_winner)


def test_the_winners_seeds_are_listed_only_once_the_four_pilot_entries_exist():
    pilot = [e for e in synthetic_entries() if "cond" in e["name"] and e["settings"]["seed"] == 0]
    assert len(pilot) == 4
    for missing in range(4):
        some = pilot[:missing] + pilot[missing + 1:]
        assert [a.id for a in aware_arms.suite_arms(some)] == IDS
    names = [a.name for a in aware_arms.suite_arms(pilot)]
    assert [n for n in names if "cond" in n and not n.endswith("-s0")] == [
        "tiny-simsiam-cond+mul-s1", "tiny-simsiam-cond+mul-s2"]


def test_pilot_score_is_the_mean_of_the_table_columns_and_ties_go_to_the_first_kind():
    rng = np.random.default_rng(0)
    vals = rng.uniform(5, 60, size=7)
    e = entry(arm("tiny-simsiam-cond+add-s0"), {**full(list(vals)), CROP: 0.9, ("in_domain", "knn"): 99.0})
    assert aware_arms.pilot_score(e) == pytest.approx(float(np.mean(vals)))
    missing = entry(arm("tiny-simsiam-cond+add-s0"), full(list(vals)[:6] + [0.0]))
    del missing["records"][-1]  # no cifar10 record: counts as 0, not left out of the mean
    assert aware_arms.pilot_score(missing) == pytest.approx(float(np.mean(list(vals)[:6] + [0.0])))
    arms = aware_arms.aware_arms()
    scores = {"concat": 21.0, "add": 30.0, "mul": 30.0, "hypernet": 29.9}  # add and mul tie: add is listed first
    entries = [entry(arm(f"tiny-simsiam-cond+{k}-s0"), full([v] * 7)) for k, v in scores.items()]
    assert aware_arms.winner(entries, arms) == "add"
    assert aware_arms.winner(entries[::-1], arms) == "add"  # not the order of the entries
    assert aware_arms.winner(entries[:3], arms) is None
    scores["hypernet"] = 30.01
    entries = [entry(arm(f"tiny-simsiam-cond+{k}-s0"), full([v] * 7)) for k, v in scores.items()]
    assert aware_arms.winner(entries, arms) == "hypernet"


def _row(block: str, label: str) -> list[str]:
    line = next(ln for ln in block.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def _cell(vals: list[float], base: list[float] | None = None, noise: bool = False) -> str:
    """An independent reading of a cell: mean ± half-range over seeds, Δ of the means."""
    a = np.asarray(vals)
    text = f"{a.mean():.1f}" if len(a) == 1 else f"{a.mean():.1f} ± {np.ptp(a) / 2:.1f}"
    if base is not None:
        text += f" (Δ {a.mean() - np.mean(base):+.1f}{', noise' if noise else ''})"
    return text


def test_report_fills_the_cells_marks_noise_and_reads_the_timings():
    entries = synthetic_entries()
    arms = aware_arms.suite_arms(entries)
    timings = {"machine": MACHINE, "steps": 40, "rounds": 2,
               "settings": {"tiny-simsiam-base": {"median": 0.3}, "tiny-simsiam-cond+mul": {"median": 0.36}}}
    block = aware_report.render(entries, arms, "img/aware.png", timings=timings)
    head = _row(block, "method")
    assert head[:4] == ["method", "N", "s/step", "seeds"]
    assert head[4:] == ["tiny-imagenet-mini linear", "tiny-imagenet-mini colour permutation",
                        "tiny-imagenet-mini rotation", "flowers17 linear", "flowers17 5-shot", "flowers17 10-shot",
                        "cifar10-mini linear"]
    base = _row(block, "SimSiam")
    assert base[1:4] == ["2", "0.3", "3/3 (0, 1, 2)"]
    assert base[4:6] == [_cell([10, 12, 14]), _cell([50, 52, 54])] and base[6:] == ["—"] * 5
    aug = _row(block, "SimSiam + AugSelf")
    assert aug[2] == "*0.62*, not timed"
    # |Δ| 9 > 2 + 1 (both half-ranges): a difference; |Δ| 1 <= 2 + 1: noise.
    assert aug[4:6] == [_cell([20, 21, 22], [10, 12, 14]), _cell([52, 53, 54], [50, 52, 54], noise=True)]
    won = _row(block, "SimSiam + CASSLE (mul) — pilot's winner")
    assert won[1:4] == ["2", "0.36 (1.20×)", "3/3 (0, 1, 2)"]
    assert won[4:] == [_cell([25, 23, 27], [10, 12, 14], noise=False), _cell([25, 23, 27], [50, 52, 54]),
                       *[_cell([25, 23, 27]) for _ in range(5)]]
    concat = _row(block, "SimSiam + CASSLE (concat)")  # one seed: no spread to judge noise by
    assert concat[3] == "1/1 (0)" and concat[4] == _cell([20], [10, 12, 14])
    for label, n in (("SimSiam + EquiMod", "3"), ("SimSiam + E-SSL", "2 + 4 small"), ("SimSiam + STL", "2"),
                     ("SimCLR + EquiMod", "3")):
        row = _row(block, label)
        assert row[1] == n and row[2] == "not timed" and row[4:] == ["—"] * 7
    assert _row(block, "SimSiam + EquiMod")[3] == "0/3" and _row(block, "SimCLR + STL")[3] == "0/1"
    simclr = _row(block, "SimCLR")
    assert simclr[3:5] == ["1/1 (0)", "30.0"] and _row(block, "SimCLR + AugSelf")[4] == "—"
    assert f"**{len(entries)} of the suite's 29 arms are done**" in block and "**mul**" in block
    assert "Not yet run (16 arms)" in block and "![omega_probe" in block and "timings/aware.json" in block
    assert "Wall time, machines and commits:" in block


def test_empty_ledger_report_is_whole():
    block = aware_report.render([], aware_arms.suite_arms([]), None)
    assert "**0 of the suite's 27 arms are done** (2 more" in block and "Not yet run (27 arms)" in block
    assert "no row is timed yet" in block and "![" not in block
    assert block.count("| — | — | — | — | — | — | — |") == len(aware_report.ROWS)


def test_omega_heat_map_rows_and_scale():
    labels, augs, matrix, texts = aware_report.omega_matrix(synthetic_entries(), aware_arms.suite_arms(
        synthetic_entries()))
    assert labels == ["SimSiam (3 seeds)", "SimSiam + AugSelf (3 seeds)"] and augs == ["crop", "rotation"]
    assert matrix[0] == pytest.approx([0.1, (30 - 25) / 75]) and texts[1] == ["0.30", "40%"]


def test_report_only_twice_is_byte_identical_and_keeps_to_its_block(tmp_path):
    led = tmp_path / "ledger"
    for e in synthetic_entries():
        ledger.write_json(str(led / f"{e['arm']}.json"), e)
    other = entry(next(a for a in looc_arms.looc_table_arms() if a.method == "moco"), {LIN: 1.0})
    ledger.write_json(str(led / f"{other['arm']}.json"), other)  # the looc suite's MoCo: not this suite's
    doc, png = tmp_path / "results.md", tmp_path / "img" / "omega.png"
    doc.write_text(f"# R\n{looc_report.BEGIN}\nlooc\n{looc_report.END}\n\n{aware_report.BEGIN}\nold\n"
                   f"{aware_report.END}\n\n### Reading\n\nhand\n")
    argv = ["--suite=aware", "--report_only", f"--ledger={led}", f"--results_md={doc}", f"--curves={png}"]
    assert reproduce_small.main(argv) == 0
    first, picture = doc.read_text(), png.read_bytes()
    assert reproduce_small.main(argv) == 0
    assert doc.read_text() == first and png.read_bytes() == picture and len(picture) > 5000
    assert first.startswith(f"# R\n{looc_report.BEGIN}\nlooc\n{looc_report.END}\n")
    assert first.endswith("\n\n### Reading\n\nhand\n")
    block = doc_blocks.current_block(first, aware_report.BEGIN, aware_report.END)
    arms = aware_arms.suite_arms(ledger.load_entries(str(led)))
    assert block == aware_report.report_block(str(led), arms, str(doc), str(png))
    assert "(img/omega.png)" in block and other["arm"] not in block and "tiny-simsiam-cond+mul-s2" in block


def test_quick_aware_arms_are_small():
    quick = aware_arms.quick_aware_arms()
    assert [a.name for a in quick] == ["shapes-simsiam-cond+hypernet-s0", "shapes-simsiam-equimod-s0",
                                       "shapes-simsiam-essl-s0", "shapes-simsiam-stl-s0"]
    assert all(a.budget.max_steps == 2 and a.budget.width == 0.0625 for a in quick)
    assert {c.dataset for a in quick for c in a.evals} == {"shapes"}


def test_committed_aware_block_is_the_ledgers_report():
    """docs/results.md's aware block is what --suite=aware --report_only makes of the committed ledger."""
    led = os.path.join(REPO, "reproduce", "ledger")
    block = aware_report.report_block(led, aware_arms.suite_arms(ledger.load_entries(led)),
                                      os.path.join(REPO, "docs", "results.md"),
                                      os.path.join(REPO, "docs", "img", "aware_omega_probe.png"))
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), aware_report.BEGIN, aware_report.END)
    assert committed == block, "regenerate it: augself-reproduce --suite=aware --report_only"


@pytest.mark.slow
def test_quick_cassle_arm_end_to_end(tmp_path):
    """--suite=aware --quick, its CASSLE arm only (one arm keeps the slow tier short; EquiMod's, E-SSL's and STL's
    own slow tests train them end to end); the family's quick arms stay "not yet run" in the block."""
    out = tmp_path / "quick"
    cmd = [sys.executable, "-m", "reproduce.reproduce_small", "--suite=aware", "--quick", f"--out={out}",
           "--arms=shapes-simsiam-cond+hypernet-s0"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    print(f"--suite=aware --quick (CASSLE arm) took {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [e] = ledger.load_entries(str(out / "ledger"))
    quick = aware_arms.quick_aware_arms()
    assert e["arm"] == quick[0].id and e["settings"] == quick[0].settings() and e["training"]["steps"] == 2
    assert {(r["call"], r["protocol"]) for r in e["records"]} >= {("in_domain", "linear"), ("flowers", "lowshot_5shot")}
    block = doc_blocks.current_block((out / "results.md").read_text(), aware_report.BEGIN, aware_report.END)
    row = _row(block, "SimSiam + CASSLE (hypernet) — pilot's winner")
    assert row[3] == "1/1 (0)" and row[4] != "—"
    assert "**1 of the suite's 4 arms are done**" in block and "Not yet run (3 arms)" in block
