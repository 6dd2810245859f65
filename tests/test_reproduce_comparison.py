"""reproduce_small.py --suite=comparison: each base's ledger recipe read from the sweep, the arms at it (BN statistics
recomputed, the controls, the running-statistics calls), and the report from the ledger."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_reproduce_aware import entry, full

from reproduce import (
    comparison_arms,
    comparison_report,
    doc_blocks,
    ledger,
    looc_arms,
    recipe_arms,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RISING = [0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10]
FALLING = [0.03, 0.08, 0.12, 0.11, 0.09, 0.07, 0.06, 0.05]


def sweep_entry(method: str, label: str, knn: list[float]) -> dict:
    recipe = next(r for r in recipe_arms.RECIPES[method] if r.label == label)
    a = recipe_arms.recipe_arm(method, recipe)
    e = entry(a, {})
    e["monitors"] = {"step": list(range(len(knn))), "epoch": list(range(len(knn))), "values": {"knn": knn}}
    return e


def full_sweep(method: str, best: str, best_curve: list[float] = RISING) -> list[dict]:
    """Every recipe of ``method`` in the sweep: ``best`` with ``best_curve``, the others flat at 0.04."""
    return [sweep_entry(method, r.label, best_curve if r.label == best else [0.04] * 8)
            for r in recipe_arms.RECIPES[method]]


def test_the_ledger_recipe_waits_for_the_whole_sweep_then_takes_the_best_curve_that_does_not_fall():
    entries = full_sweep("moco", "solo")
    assert recipe_arms.ledger_recipe(entries[:-1], "moco") is None  # one recipe not run yet
    assert recipe_arms.ledger_recipe(entries, "moco").label == "solo"
    # A curve that peaks high and falls loses to one that keeps rising, even with a higher last quarter.
    peaked = [0.03, 0.20, 0.30, 0.29, 0.27, 0.25, 0.22, 0.19]
    assert recipe_arms.curve_summary(peaked)["last_quarter"] > recipe_arms.curve_summary(RISING)["last_quarter"]
    entries = [sweep_entry("moco", "paper", peaked), sweep_entry("moco", "solo", RISING)]
    assert recipe_arms.ledger_recipe(entries, "moco").label == "solo"
    # When every curve falls, the highest last quarter wins.
    entries = [sweep_entry("moco", "paper", peaked), sweep_entry("moco", "solo", FALLING)]
    assert recipe_arms.ledger_recipe(entries, "moco").label == "paper"
    assert recipe_arms.ledger_recipe([], "byol") is None  # no sweep for it


def recipes() -> dict[str, recipe_arms.Recipe]:
    return {m: recipe_arms.RECIPES[m][1] for m in ("simsiam", "moco", "simclr")}


def test_arms_train_at_their_bases_recipe_with_precise_bn_the_held_out_monitor_and_the_controls():
    arms = comparison_arms.comparison_arms(recipes())
    floors, trained = arms[:3], arms[3:]
    assert floors == looc_arms.floor_arms()
    assert len(trained) == 3 * len(comparison_arms.ROWS) and len({a.id for a in arms}) == len(arms)
    assert len({a.name for a in arms}) == len(arms)
    for a in trained:
        flags = dict(a.train_flags)
        r = recipes()[a.method]
        assert a.suite == "comparison" and a.saved_model == "saved_model_precise_bn"
        assert flags["precise_bn_images"] == "3500" and flags["monitor_splits"] == "train,val"
        assert (flags["lr"], flags["warmup_epochs"]) == (f"{r.lr:g}", f"{r.warmup_epochs:g}")
        assert ("queue_size" in flags) is (a.method == "moco")
    names = [a.name for a in trained]
    # The evidence's order: the README's rows at every seed first, the SimCLR rows last.
    assert names[:4] == ["tiny-simsiam-base-s0", "tiny-simsiam-augself-s0", "tiny-moco-base-s0",
                         "tiny-moco-augself-s0"]
    assert names[-1] == "tiny-simclr-stl-s2"
    controls = {a.name: dict(a.train_flags) for a in trained if a.seed == 0}
    assert controls["tiny-simsiam-equimod+negatives-s0"]["equimod_control"] == "negatives"
    assert controls["tiny-simsiam-equimod+shuffled_omega-s0"]["equimod_control"] == "shuffled_omega"
    assert controls["tiny-simsiam-essl+w0.08-s0"]["essl_weight"] == "0.08"
    assert controls["tiny-simsiam-essl+w0.4-s0"]["essl_weight"] == "0.4"
    # Seed 0 evaluates both exports; the running-statistics calls read saved_model.
    for a in trained:
        running = [c for c in a.evals if c.name.endswith(comparison_arms.RUNNING_BN)]
        assert len(running) == (len(looc_arms.TABLE_EVALS) if a.seed == 0 else 0)
        assert {a.export_of(c) for c in running} <= {"saved_model"}
        assert {a.export_of(c) for c in a.evals if c not in running} == {"saved_model_precise_bn"}


def test_a_base_is_listed_only_once_its_recipe_is_chosen():
    only_moco = comparison_arms.comparison_arms({"simsiam": None, "moco": recipes()["moco"], "simclr": None})
    assert {a.method for a in only_moco[3:]} == {"moco"} and len(only_moco) == 3 + 2 * 3
    listed = comparison_arms.suite_arms(full_sweep("moco", "solo"))
    assert {a.method for a in listed if not a.budget.never_trained} == {"moco"}


def test_an_eval_call_without_an_export_hashes_as_before_the_field_existed():
    call = looc_arms.TABLE_EVALS[0]
    assert "export" not in call.settings() and call.settings()["flags"] == list(call.flags)
    # The floor's id is a committed ledger file name, hashed before EvalCall had an export.
    assert looc_arms.floor_arms()[0].id == "tiny-never_trained-s0-0a910b2d"
    other = comparison_arms.running_bn_calls((call,))[1]
    assert other.settings()["export"] == "saved_model" and other.key != call.key


def _row(block: str, label: str) -> list[str]:
    line = next(ln for ln in block.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_says_each_recipe_the_knn_check_and_what_recomputing_bn_moved():
    arms = comparison_arms.comparison_arms(recipes())
    by_name = {a.name: a for a in arms}
    base = entry(by_name["tiny-simsiam-base-s0"], {("in_domain", "linear"): 10.0, ("in_domain@running_bn",
                                                                                  "linear"): 12.5})
    base["monitors"] = {"step": [], "epoch": [], "values": {"knn": RISING}}
    aug = entry(by_name["tiny-simsiam-augself-s0"], {("in_domain", "linear"): 14.0})
    aug["monitors"] = {"step": [], "epoch": [], "values": {"knn": FALLING}}
    block = comparison_report.render([base, aug], arms, recipes(), None)
    assert "- SimSiam: solo (lr 0.5·B/256, weight decay 1e-05, 5 warm-up epochs" in block
    row = _row(block, "SimSiam")
    summary = recipe_arms.curve_summary(RISING)
    assert row[4] == f"{100 * summary['start']:.1f} → {100 * summary['last_quarter']:.1f} " \
                     f"({100 * summary['second_half']:+.1f})"
    assert _row(block, "SimSiam + AugSelf")[4].endswith(", falls)")
    assert _row(block, "SimSiam + AugSelf")[5] == "14.0 (Δ +4.0)"
    bn = [ln for ln in block.splitlines() if ln.startswith("| SimSiam |")]
    assert len(bn) == 2 and bn[1].split("|")[2].strip() == f"{10.0 - 12.5:+.1f}"
    assert "Not yet run" in block and "**2 of the suite's" in block
    waiting = comparison_report.render([], comparison_arms.comparison_arms({"simsiam": None}),
                                       {"simsiam": None}, None)
    assert "- SimSiam: not chosen yet" in waiting


def test_the_controls_split_equimods_gain_into_parts_that_add_up_to_its_delta():
    arms = comparison_arms.comparison_arms(recipes())
    by_name = {a.name: a for a in arms}
    rng = np.random.default_rng(0)
    rows = {"base": ("tiny-simsiam-base-s0", "tiny-simsiam-base-s1"),
            "negatives": ("tiny-simsiam-equimod+negatives-s0",),
            "shuffled": ("tiny-simsiam-equimod+shuffled_omega-s0", "tiny-simsiam-equimod+shuffled_omega-s1"),
            "equimod": ("tiny-simsiam-equimod-s0",)}
    values = {k: rng.uniform(5, 70, size=(len(names), 7)).round(2) for k, names in rows.items()}
    entries = [entry(by_name[name], full(list(v))) for k, names in rows.items()
               for name, v in zip(names, values[k], strict=True)]
    block = comparison_report.render(entries, arms, recipes(), None)
    mean = {k: v.mean(axis=0) for k, v in values.items()}
    parts = [_row(block, label) for label, _, _ in comparison_arms.PARTS[:3]]
    assert [p[1] for p in parts] == ["1 and 2", "2 and 1", "1 and 2"]
    for got, (hi, lo) in zip(parts, (("negatives", "base"), ("shuffled", "negatives"), ("equimod", "shuffled")),
                             strict=True):
        assert got[2:] == [f"{d:+.1f}" for d in mean[hi] - mean[lo]]  # one seed on a side: no noise judged
    total = sum(np.array([float(c) for c in p[2:]]) for p in parts)
    assert np.allclose(total, mean["equimod"] - mean["base"], atol=0.15)  # the three parts are EquiMod's Δ
    assert not any(ln.startswith("| E-SSL at λ 0.4") for ln in block.splitlines())  # no E-SSL entry yet
    two = [entry(by_name[n], full([10.0] * 7)) for n in ("tiny-simsiam-essl+w0.4-s0", "tiny-simsiam-essl+w0.4-s1")]
    two += [entry(by_name[n], full([v] * 7)) for n, v in (("tiny-simsiam-essl+w0.08-s0", 8.0),
                                                          ("tiny-simsiam-essl+w0.08-s1", 13.0))]
    essl = _row(comparison_report.render(two, arms, recipes(), None), comparison_arms.PARTS[3][0])
    assert essl[1:] == ["2 and 2"] + ["-0.5 (noise)"] * 7
    assert "What the controls separate" not in comparison_report.render(entries[:2], arms, recipes(), None)


def test_every_part_names_two_rows_of_the_table():
    labels = {r.label for r in comparison_arms.ROWS}
    assert all({hi, lo} <= labels and hi != lo for _, hi, lo in comparison_arms.PARTS)


@pytest.mark.parametrize("seeds", [(10.0, 12.0, 14.0)])
def test_the_floor_row_reads_the_looc_floor_entries(seeds):
    arms = comparison_arms.comparison_arms(recipes())
    floors = [entry(a, {("in_domain", "linear"): v}) for a, v in zip(arms[:3], seeds, strict=True)]
    block = comparison_report.render(floors, arms, recipes(), None)
    a = np.asarray(seeds)
    assert _row(block, "never trained")[5] == f"{a.mean():.1f} ± {np.ptp(a) / 2:.1f}"


def test_committed_comparison_block_is_the_ledgers_report():
    led = os.path.join(REPO, "reproduce", "ledger")
    arms = comparison_arms.suite_arms(ledger.load_entries(led))
    block = comparison_report.report_block(led, arms, os.path.join(REPO, "docs", "results.md"),
                                           os.path.join(REPO, "docs", "img", "comparison_omega_probe.png"))
    with open(os.path.join(REPO, "docs", "results.md")) as f:
        committed = doc_blocks.current_block(f.read(), comparison_report.BEGIN, comparison_report.END)
    assert committed == block, "regenerate it: augself-reproduce --suite=comparison --report_only"
