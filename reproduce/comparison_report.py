"""The report of the comparison at the ledger recipe (``--suite=comparison``), from the committed ledger entries only.

Each base's recipe (the sweep's choice), then one table laid out as the family's (reproduce/aware_report.py): a row
per arm group of reproduce/comparison_arms.py, with the held-out kNN monitor (did the row learn, and does its curve
fall over the second half?) beside the seven evaluation columns, Δ to the row's base, "noise" within the seed spread
and "≈ floor" within the never-trained floor's. Then what recomputing the BN statistics moved (the seed-0 arms'
recomputed minus running-statistics evaluations), the ω-probe heat map and the wall time of every arm. Written
between its own markers of docs/results.md.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Sequence

from reproduce import aware_report, doc_blocks, ledger, seed_cells
from reproduce.arm_settings import NEVER_TRAINED, Arm
from reproduce.aware_arms import TABLE_COLUMNS
from reproduce.comparison_arms import PARTS, ROWS, RUNNING_BN, SUITE, ledger_recipes
from reproduce.recipe_arms import FALL, Recipe, chosen_text, curve_summary
from reproduce.report_parts import block_tail, markdown_table

BEGIN, END = "<!-- reproduce_small_comparison:begin -->", "<!-- reproduce_small_comparison:end -->"
COMMAND = ledger.COMMAND + " --suite=comparison"
REPORT_ROWS = (aware_report.Row("never trained", "simsiam", NEVER_TRAINED),
               *(aware_report.Row(r.label, r.method, r.variant, r.baseline) for r in ROWS))
BASES = {r.method: r.label for r in ROWS if r.baseline is None}  # each base's row label: "MoCo v2"


def knn_cell(entries: list[dict]) -> str:
    """The held-out kNN monitor of a row: start → mean of the last quarter (mean over seeds), and the second half's
    change, marked when any seed's curve falls by more than :data:`recipe_arms.FALL`."""
    found = [s for s in (curve_summary(e["monitors"]["values"].get("knn", [])) for e in entries) if s]
    if not found:
        return "—"
    start = statistics.fmean(s["start"] for s in found)
    last = statistics.fmean(s["last_quarter"] for s in found)
    change = statistics.fmean(s["second_half"] for s in found)
    falls = any(s["second_half"] < -FALL for s in found)
    return f"{100 * start:.1f} → {100 * last:.1f} ({100 * change:+.1f}{', falls' if falls else ''})"


def recipe_line(method: str, recipe: Recipe | None) -> str:
    """``SimSiam: solo (lr 0.5·B/256, weight decay 1e-05, 5 warm-up epochs, decay on all, other settings: the
    method's; …)``."""
    return f"{BASES[method]}: {chosen_text(recipe, 'its')}"


def bn_table(entries: Sequence[dict], arms: Sequence[Arm]) -> list[str]:
    """Recomputed minus running BN statistics, per row and column, on the arms evaluated both ways (seed 0)."""
    head = ["method (seed 0)"] + aware_report.column_heads(arms)
    body = []
    for row in REPORT_ROWS[1:]:
        got = [e for e in aware_report.row_entries(entries, arms, row)
               if any(r["call"].endswith(RUNNING_BN) for r in e["records"])]
        if not got:
            continue
        cells = []
        for call, protocol in TABLE_COLUMNS:
            precise, _ = aware_report.values(got, call, protocol)
            running, _ = aware_report.values(got, call + RUNNING_BN, protocol)
            cells.append(f"{precise[0] - running[0]:+.1f}" if precise and running else "—")
        body.append([row.label] + cells)
    return markdown_table(head, body) if body else []


def parts_table(entries: Sequence[dict], arms: Sequence[Arm]) -> list[str]:
    """What each control separates (:data:`comparison_arms.PARTS`): per column, the mean of one row minus the mean of
    the other over their seeds, "(noise)" within both spreads; a part is shown once both rows have an entry."""
    rows = {r.label: r for r in REPORT_ROWS}
    head = ["part", "seeds"] + aware_report.column_heads(arms)
    body = []
    for label, minuend, subtrahend in PARTS:
        a, b = (aware_report.row_entries(entries, arms, rows[name]) for name in (minuend, subtrahend))
        if not a or not b:
            continue
        cells = []
        for call, protocol in TABLE_COLUMNS:
            (va, metric), (vb, _) = aware_report.values(a, call, protocol), aware_report.values(b, call, protocol)
            cells.append(seed_cells.delta_cell(va, vb, metric))
        body.append([label, f"{len(a)} and {len(b)}"] + cells)
    return markdown_table(head, body) if body else []


def render(entries: Sequence[dict], arms: Sequence[Arm], recipes: dict[str, Recipe | None],
           picture_link: str | None, ledger_label: str = "reproduce/ledger/", command: str = COMMAND,
           timings: dict | None = None) -> str:
    """The generated block: a function of the suite's ledger entries, its arm list and the bases' recipes only."""
    done = {e["arm"] for e in entries}
    pending = [a for a in arms if a.id not in done]
    total = sum(e["training"]["seconds"] + e["evaluation"]["seconds"] for e in entries)
    budget = dataclasses.replace(arms[0].budget, max_steps=None).describe() if arms else ""  # the floor's, trained
    out = ["## The comparison at the ledger recipe (generated from the ledger)", "",
           f"Generated by `{command} --report_only` from `{ledger_label}`: **{len(arms) - len(pending)} of the "
           f"suite's {len(arms)} arms listed are done**; {total / 3600:.1f} h of training and evaluation so far. "
           f"{budget}. Each base trains at its ledger recipe, the recipe sweep's choice:", "",
           *(f"- {recipe_line(m, r)}" for m, r in recipes.items()), "",
           "Every trained arm's evaluations read its BN statistics recomputed on the train split's first 3,500 "
           "images under the evaluation transform (`--precise_bn_images`), so no objective's extra views reach them. "
           "Cells: mean ± half-range over the seeds of the row (`seeds`: entries done / arms listed, and which "
           "seeds); Δ to the row's base, \"noise\" when within both sides' seed spread (judged only with ≥ 2 seeds "
           "on each side); \"≈ floor\" within the never-trained floor's spread (the LooC comparison's floor entries). "
           "kNN val: the monitor's kNN accuracy % of tiny-imagenet-mini's val split against the train split (no "
           "column reads the val split), start → mean of the last quarter over the seeds, and the change over the "
           f"second half (\"falls\": some seed's curve fell by more than {100 * FALL:g} point). N: images per "
           "source image that a step's backbone sees. s/step: "
           + aware_report.timing_note(timings, ledger_label, command, SUITE),
           ""]
    out += aware_report.table(entries, arms, timings, REPORT_ROWS, ("kNN val %", knn_cell)) + [""]
    parts = parts_table(entries, arms)
    if parts:
        out += ["What the controls separate: one row's mean minus another's (points; seeds: the two rows' entries), "
                "so EquiMod's three parts add up to its Δ to SimSiam:", "", *parts, ""]
    bn = bn_table(entries, arms)
    if bn:
        out += ["What recomputing the BN statistics moved: the seed-0 arm of each row evaluated on its recomputed "
                "statistics minus on the running statistics training left (points):", "", *bn, ""]
    out += block_tail(list(entries), picture_link, pending, command)
    return "\n".join(out).rstrip("\n")


def report_block(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """The block ``--suite=comparison --report_only`` writes, from the ledger's entries of this suite alone."""
    every = ledger.load_entries(ledger_dir)  # the sweep's entries give the recipes; the suite's, the table
    ids = {a.id for a in arms}
    entries = [e for e in every if e["arm"] in ids]
    label = os.path.relpath(os.path.abspath(ledger_dir), ledger.ROOT).replace(os.sep, "/") + "/"
    link = (doc_blocks.relative_link(picture, results_md)
            if aware_report.omega_matrix(entries, arms, REPORT_ROWS)[0] else None)
    return render(entries, arms, ledger_recipes(every), link, label, command, ledger.load_timings(ledger_dir, SUITE))


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """Regenerates the heat map and the block between this suite's markers of ``results_md``; returns the block."""
    aware_report.plot_omega(aware_report.suite_of(ledger_dir, arms), arms, picture, REPORT_ROWS)
    block = report_block(ledger_dir, arms, results_md, picture, command)
    doc_blocks.write_block(results_md, block, BEGIN, END)
    return block
