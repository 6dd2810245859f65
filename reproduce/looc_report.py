"""The report of the LooC comparison (``--suite=looc``): ``table:looc_comparison`` at our scale, from the committed
ledger entries only.

Rows are the paper's methods (MoCo v2, LooC per left-out set and LooC++ on its second signature, MoCo v2 +
AugSelf, SimSiam ± AugSelf) with N (views per image) and the measured seconds per step; cells are mean ±
half-range over the seeds present, with Δ to the row's baseline (MoCo v2, or SimSiam) and the paper's figure
beside ours. The ω-probe gets its own table and a heat map. Rows without entries read "not yet run", so the
block is whole with zero, some or all arms done. Written between its own markers of docs/results.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Sequence

from reproduce import doc_blocks, ledger
from reproduce.arm_settings import NEVER_TRAINED, Arm, Budget, step_setting
from reproduce.looc_arms import PLUS_SUFFIX, SUITE, views_per_image
from reproduce.report_parts import (
    OMEGA_AUGS,
    block_tail,
    dataset_of,
    markdown_table,
    omega_line,
    ours,
    plot_heat_map,
    seconds_per_step,
    seeds_label,
)

BEGIN, END = "<!-- reproduce_small_looc:begin -->", "<!-- reproduce_small_looc:end -->"
COMMAND = ledger.COMMAND + " --suite=looc"


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: which entries (method, variant), which signature, its baseline, the paper's row."""

    label: str
    method: str
    variant: str  # Arm.variant: base, augself, or LooC's left-out set (color_rotation)
    plus: bool = False  # LooC++: the calls on the looc_plus_features signature
    baseline: str | None = None  # label of the row the Δ is taken to
    paper: str | None = None  # key of paper_results.LOOC
    paper_base: str | None = None  # the paper's own baseline of that row (its Δ in brackets)


ROWS = (
    Row("never trained", "simsiam", NEVER_TRAINED),
    Row("MoCo v2", "moco", "base", paper="MoCo"),
    Row("LooC (color)", "looc", "color", baseline="MoCo v2", paper="LooC (color)", paper_base="MoCo (LooC's figure)"),
    Row("LooC (rotation)", "looc", "rotation", baseline="MoCo v2", paper="LooC (rotation)",
        paper_base="MoCo (LooC's figure)"),
    Row("LooC (color, rotation)", "looc", "color_rotation", baseline="MoCo v2", paper="LooC (color, rotation)",
        paper_base="MoCo (LooC's figure)"),
    Row("LooC++ (color)", "looc", "color", plus=True, baseline="MoCo v2"),
    Row("LooC++ (rotation)", "looc", "rotation", plus=True, baseline="MoCo v2"),
    Row("LooC++ (color, rotation)", "looc", "color_rotation", plus=True, baseline="MoCo v2"),
    Row("MoCo v2 + AugSelf", "moco", "augself", baseline="MoCo v2", paper="MoCo+AugSelf", paper_base="MoCo"),
    Row("SimSiam", "simsiam", "base", paper="SimSiam"),
    Row("SimSiam + AugSelf", "simsiam", "augself", baseline="SimSiam", paper="SimSiam+AugSelf", paper_base="SimSiam"),
)
# (call, protocol, paper column of paper_results.LOOC_COLUMNS or None): the table's columns, then the main
# reproduction's.
PAPER_COLUMNS = (("in_domain", "linear", ("linear", "imagenet100")),
                 ("flowers", "lowshot_5shot", ("lowshot_5shot", "oxford_flowers102")),
                 ("flowers", "lowshot_10shot", ("lowshot_10shot", "oxford_flowers102")))
MORE_COLUMNS = (("flowers", "linear"), ("cifar10", "linear"), ("in_domain", "colorperm"), ("in_domain", "rotation"))


def variant_of(settings: dict) -> str:
    """The Arm.variant of an entry's settings (LooC's left-out set comes from its train flags)."""
    s = settings
    return Arm(s["data"], s["method"], s["augself"], s["condition"], s["seed"], Budget(**s["budget"]),
               (), tuple(s["train_flags"].items())).variant


def row_entries(entries: Sequence[dict], row: Row) -> list[dict]:
    return sorted((e for e in entries if e["settings"]["method"] == row.method and variant_of(e["settings"])
                   == row.variant), key=lambda e: (e["settings"]["seed"], e["arm"]))


def values(entries: Sequence[dict], row: Row, call: str, protocol: str) -> tuple[list[float], str | None]:
    """The row's values of one (call, protocol) over its seeds, and their metric."""
    name = call + (PLUS_SUFFIX if row.plus else "")
    out, metric = [], None
    for e in entries:
        for r in e["records"]:
            if r["call"] == name and r["protocol"] == protocol and r["value"] is not None:
                out.append(float(r["value"]))
                metric = r["metric"]
    return out, metric


def chance_of(entries: Sequence[dict], row: Row, protocol: str) -> float | None:
    """The mean ``settings.chance_%`` of a classified ω-probe record (None for R² ones)."""
    name = "in_domain" + (PLUS_SUFFIX if row.plus else "")
    found = [r["settings"]["chance_%"] for e in entries for r in e["records"]
             if r["call"] == name and r["protocol"] == protocol and "chance_%" in r.get("settings", {})]
    return statistics.fmean(found) if found else None


def paper_cell(row: Row, column: tuple[str, str]) -> str:
    """The paper's figure of a row in a column (± its std over draws), with its own Δ in brackets."""
    if row.paper is None:
        return "—"
    from augself_tf.evaluation import paper_results

    index = paper_results.LOOC_COLUMNS.index(column)

    def split(cell: object) -> tuple[float, float | None]:
        return cell if isinstance(cell, tuple) else (cell, None)  # type: ignore[return-value]

    value, std = split(paper_results.LOOC[row.paper][index])
    text = f"{value:.1f}" + (f" ± {std:.1f}" if std is not None else "")
    if row.paper_base:
        text += f" ({value - split(paper_results.LOOC[row.paper_base][index])[0]:+.1f})"
    return text


def row_timing(row: Row, arms: Sequence[Arm], timings: dict | None) -> float | None:
    """The timed median seconds per step of the row's setting, if ``--time_steps`` timed it."""
    arm = next((a for a in arms if a.method == row.method and a.variant == row.variant), None)
    found = (timings or {}).get("settings", {}).get(step_setting(arm)) if arm else None
    return found["median"] if found else None


def tables(entries: Sequence[dict], arms: Sequence[Arm], timings: dict | None = None) -> list[str]:
    """The three tables: the paper's columns, the main reproduction's transfer and probe columns, the ω-probe."""
    groups = {r.label: row_entries(entries, r) for r in ROWS}
    timed = {r.label: row_timing(r, arms, timings) for r in ROWS}

    def base_values(row: Row, call: str, protocol: str) -> list[float] | None:
        if row.baseline is None:
            return None
        base = next(r for r in ROWS if r.label == row.baseline)
        return values(groups[base.label], base, call, protocol)[0]

    floor_row = ROWS[0]

    def row_cells(row: Row, columns: Sequence[tuple[str, str]], paper: Sequence[tuple[str, str]] | None) -> list[str]:
        cells = []
        for i, (call, protocol) in enumerate(columns):
            vals, metric = values(groups[row.label], row, call, protocol)
            floor = None if row is floor_row else values(groups[floor_row.label], floor_row, call, protocol)[0]
            cells.append(ours(vals, metric, base_values(row, call, protocol), floor))
            if paper:
                cells.append(paper_cell(row, paper[i]))
        return cells

    names = {"linear": "linear", "lowshot_5shot": "5-shot", "lowshot_10shot": "10-shot", "colorperm": "colorperm",
             "rotation": "rotation"}
    paper_labels = {"linear": "paper (ImageNet100)", "lowshot_5shot": "paper (Flowers 5-shot)",
                    "lowshot_10shot": "paper (Flowers 10-shot)"}
    head = ["method", "N", "s/step", "seeds"]
    for call, protocol, _ in PAPER_COLUMNS:
        head += [f"{dataset_of(arms, call)} {names[protocol]}", paper_labels[protocol]]
    first = []
    for row in ROWS:
        g = groups[row.label]
        base = timed.get(row.baseline) if row.baseline else None
        trained = row is not floor_row
        first.append([row.label, str(views_per_image(row.method, row.variant.replace("_", ","))) if trained else "—",
                      seconds_per_step(g, timed[row.label], base) if trained else "—", seeds_label(g)]
                     + row_cells(row, [c[:2] for c in PAPER_COLUMNS], [c[2] for c in PAPER_COLUMNS]))
    second = [[row.label, seeds_label(groups[row.label])] + row_cells(row, MORE_COLUMNS, None) for row in ROWS]
    omega = []
    for row in ROWS:
        cells = []
        for aug in OMEGA_AUGS:
            vals, metric = values(groups[row.label], row, "in_domain", f"omega_probe_{aug}")
            chance = chance_of(groups[row.label], row, f"omega_probe_{aug}")
            cells.append(ours(vals, metric, None) + (f" (chance {chance:.1f})" if chance is not None and vals else ""))
        omega.append([row.label, seeds_label(groups[row.label])] + cells)
    in_domain = dataset_of(arms, "in_domain")
    return [
        "**The paper's columns** (top-1 %; few-shot: k labelled images of every class, mean over 5 draws; ours "
        "± half-range over seeds, the paper's ± its std over draws)", "",
        *markdown_table(head, first), "",
        "**The main reproduction's transfer and probe columns** (top-1 % / accuracy %)", "",
        *markdown_table(["method", "seeds"] + [f"{dataset_of(arms, c)} {names[p]}" for c, p in MORE_COLUMNS],
                        second), "",
        f"**What frozen features keep of each augmentation** (`omega_probe` on {in_domain}: R² for crop, colour, "
        "blur, solarize; accuracy % (chance) for rotation and flip)", "",
        *markdown_table(["method", "seeds"] + list(OMEGA_AUGS), omega),
    ]


def omega_matrix(entries: Sequence[dict]) -> tuple[list[str], list[str], list[list[float | None]], list[list[str]]]:
    """(row labels, augmentations, values on a shared 0..1 scale, cell labels) of the rows with ω-probe records."""
    labels, matrix, texts = [], [], []
    augs = [a for a in OMEGA_AUGS if any(r["protocol"] == f"omega_probe_{a}" for e in entries for r in e["records"])]
    for row in ROWS:
        g = row_entries(entries, row)
        line, text = omega_line(lambda p, g=g, row=row: values(g, row, "in_domain", p),
                                lambda p, g=g, row=row: chance_of(g, row, p), augs)
        if any(v is not None for v in line):
            labels.append(row.label + (f" ({len(g)} seeds)" if len(g) > 1 else ""))
            matrix.append(line)
            texts.append(text)
    return labels, augs, matrix, texts


def plot_omega(entries: Sequence[dict], path: str) -> str | None:
    """The ω-probe heat map (rows × augmentations); None (nothing written) when no entry has ω-probe records."""
    labels, augs, matrix, texts = omega_matrix(entries)
    return plot_heat_map(labels, augs, matrix, texts, path) if labels else None


def render(entries: Sequence[dict], arms: Sequence[Arm], picture_link: str | None,
           ledger_label: str = "reproduce/ledger/", command: str = COMMAND, timings: dict | None = None) -> str:
    """The generated block: a function of the suite's ledger entries (and the suite's arm list) only."""
    done = {e["arm"] for e in entries}
    pending = [a for a in arms if a.id not in done]
    total = sum(e["training"]["seconds"] + e["evaluation"]["seconds"] for e in entries)
    budget = next((a.budget.describe() for a in arms if not a.budget.never_trained), "")
    queue = next((dict(a.train_flags)["queue_size"] for a in arms if "queue_size" in dict(a.train_flags)), "?")
    out = ["## The LooC comparison at small scale (generated from the ledger)", "",
           f"Generated by `{command} --report_only` from the {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} "
           f"of the `{SUITE}` suite in `{ledger_label}` ({total / 3600:.1f} h of training and evaluation so far). "
           f"{budget}; MoCo v2 and LooC with a {queue}-key queue (LooC: {queue} keys in each space's queue).",
           "Cells: mean ± half-range over the seeds of the row (count and seeds in `seeds`); Δ to the row's "
           "baseline (MoCo v2 for LooC, LooC++ and MoCo v2 + AugSelf; SimSiam for SimSiam + AugSelf), \"noise\" "
           "when within both sides' seed spread (judged only with ≥ 2 seeds on each side). LooC++ rows are the "
           "LooC runs evaluated on `--signature=looc_plus_features`. \"never trained\": the initialised network "
           "(no step) with its BN statistics recomputed on the train split's images (`--precise_bn_images`), "
           "evaluated by the same calls; \"≈ floor\" marks a cell within its seed spread (judged where it has ≥ 2 "
           "seeds). N: views per image; s/step: "
           + timing_note(timings, ledger_label) + " The paper's figures are ImageNet-100 ResNet-50 runs "
           "(its brackets: Δ to its own baseline; the MoCo v2 row is the AugSelf authors' run, LooC's rows are "
           "LooC's figures with their Δ to LooC's own MoCo*: 81.0, 67.9 ± 0.5, 77.3 ± 0.1); compare directions "
           "and gaps, not levels. "
           "The paper's CUB200 column has no counterpart here.", ""]
    out += tables(entries, arms, timings) + [""]
    out += block_tail(entries, picture_link, pending, command)
    return "\n".join(out).rstrip("\n")


def timing_note(timings: dict | None, ledger_label: str) -> str:
    """How the s/step column was measured."""
    if not timings:
        return ("the mean training seconds per step of the row's arms, in italics: wall time over whole runs, "
                f"beside whatever else ran (`{COMMAND} --time_steps` times every row back to back).")
    m = timings["machine"]
    return (f"seconds per training step of the row's setting, every row timed back to back in one run "
            f"(`{COMMAND} --time_steps`: median of {timings['rounds']} rounds of {timings['steps']} steps, in "
            f"alternating order, on {m['cpu']} with {m['cores']} cores; figures and load averages in "
            f"`{ledger_label}timings/{SUITE}.json`), with its ratio to the baseline row's; rows not timed show "
            "their arms' mean training rate in italics (LooC++: the LooC runs).")


def picture_link(entries: Sequence[dict], results_md: str, picture: str) -> str | None:
    if not omega_matrix(entries)[0]:
        return None
    return doc_blocks.relative_link(picture, results_md)


def suite_of(ledger_dir: str, arms: Sequence[Arm]) -> list[dict]:
    """The ledger's entries of this suite at the budget of ``arms`` (another --epochs/--width is another table)."""
    budgets = {json.dumps(dataclasses.asdict(a.budget), sort_keys=True) for a in arms}
    return [e for e in ledger.suite_entries(ledger.load_entries(ledger_dir), SUITE)
            if not budgets or json.dumps(e["settings"]["budget"], sort_keys=True) in budgets]


def report_block(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """The block ``--suite=looc --report_only`` writes, from the ledger's entries of this suite alone."""
    entries = suite_of(ledger_dir, arms)
    label = os.path.relpath(os.path.abspath(ledger_dir), ledger.ROOT).replace(os.sep, "/") + "/"
    return render(entries, arms, picture_link(entries, results_md, picture), label, command,
                  ledger.load_timings(ledger_dir, SUITE))


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """Regenerates the heat map and the block between this suite's markers of ``results_md``; returns the block."""
    plot_omega(suite_of(ledger_dir, arms), picture)
    block = report_block(ledger_dir, arms, results_md, picture, command)
    doc_blocks.write_block(results_md, block, BEGIN, END)
    return block
