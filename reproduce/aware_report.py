"""The report of the augmentation-aware family's comparison (``--suite=aware``), from the committed ledger entries
only.

One table: a row per arm group (SimSiam; + AugSelf; + CASSLE, each condition kind of the seed-0 pilot, its
winner over three seeds; + EquiMod; + E-SSL; + STL; then SimCLR and the same on it), with N (views per image),
the timed seconds per step and the LooC table's seven evaluations; cells are mean ± half-range over the seeds
present with Δ to the row's base (SimSiam, or SimCLR) and "noise" within the seed spread. Then the ω-probe heat
map and the wall time of every arm. An entry belongs to the suite when its id is one of the suite's arms (the
SimSiam ± AugSelf rows are the LooC comparison's own entries), so the block is whole with zero, some or all arms
done. Written between its own markers of docs/results.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

from reproduce import doc_blocks, ledger
from reproduce.arm_settings import NEVER_TRAINED, Arm, step_setting
from reproduce.aware_arms import CONDITION_KINDS, SUITE, TABLE_COLUMNS, pilot, views_per_image, winner
from reproduce.report_parts import (
    OMEGA_AUGS,
    block_tail,
    dataset_of,
    markdown_table,
    omega_line,
    ours,
    plot_heat_map,
    seconds_per_step,
)

BEGIN, END = "<!-- reproduce_small_aware:begin -->", "<!-- reproduce_small_aware:end -->"
COMMAND = ledger.COMMAND + " --suite=aware"
COLUMN_NAMES = {"linear": "linear", "colorperm": "colour permutation", "rotation": "rotation",
                "lowshot_5shot": "5-shot", "lowshot_10shot": "10-shot"}


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: the arms of one (method, Arm.variant) and the label of the row its Δ is taken to."""

    label: str
    method: str
    variant: str
    baseline: str | None = None


def rows() -> tuple[Row, ...]:
    """The table's rows, in order: each base, then its AugSelf, CASSLE kinds and family members."""
    family = (("equimod", "EquiMod"), ("essl", "E-SSL"), ("stl", "STL"))
    out = [Row("never trained", "simsiam", NEVER_TRAINED), Row("SimSiam", "simsiam", "base"),
           Row("SimSiam + AugSelf", "simsiam", "augself", "SimSiam")]
    out += [Row(f"SimSiam + CASSLE ({k})", "simsiam", f"cond+{k}", "SimSiam") for k in CONDITION_KINDS]
    out += [Row(f"SimSiam + {name}", "simsiam", key, "SimSiam") for key, name in family]
    out += [Row("SimCLR", "simclr", "base"), Row("SimCLR + AugSelf", "simclr", "augself", "SimCLR")]
    out += [Row(f"SimCLR + {name}", "simclr", key, "SimCLR") for key, name in family]
    return tuple(out)


ROWS = rows()


def row_arms(arms: Sequence[Arm], row: Row) -> list[Arm]:
    return [a for a in arms if a.method == row.method and a.variant == row.variant]


def row_entries(entries: Sequence[dict], arms: Sequence[Arm], row: Row) -> list[dict]:
    """The row's entries, by seed: those whose id is one of the row's arms."""
    ids = {a.id for a in row_arms(arms, row)}
    return sorted((e for e in entries if e["arm"] in ids), key=lambda e: (e["settings"]["seed"], e["arm"]))


def values(entries: Sequence[dict], call: str, protocol: str) -> tuple[list[float], str | None]:
    """The values of one (call, protocol) over the entries' seeds, and their metric."""
    found = [(float(r["value"]), r["metric"]) for e in entries for r in e["records"]
             if r["call"] == call and r["protocol"] == protocol and r["value"] is not None]
    return [v for v, _ in found], (found[-1][1] if found else None)


def chance_of(entries: Sequence[dict], protocol: str) -> float | None:
    """The mean ``settings.chance_%`` of an in-domain ω-probe record (None for R² ones)."""
    found = [r["settings"]["chance_%"] for e in entries for r in e["records"]
             if r["call"] == "in_domain" and r["protocol"] == protocol and "chance_%" in r.get("settings", {})]
    return sum(found) / len(found) if found else None


def row_label(row: Row, won: str | None) -> str:
    """The row's label; the CASSLE pilot's winning kind says so."""
    return row.label + (" — pilot's winner" if won and row.variant == f"cond+{won}" else "")


def row_timing(row: Row, arms: Sequence[Arm], timings: dict | None) -> float | None:
    """The timed median seconds per step of the row's setting, if ``--time_steps`` timed it."""
    found = next(((timings or {}).get("settings", {}).get(step_setting(a)) for a in row_arms(arms, row)), None)
    return found["median"] if found else None


def column_heads(arms: Sequence[Arm]) -> list[str]:
    """The seven evaluation columns' headers, ``<dataset> <protocol>``, in :data:`TABLE_COLUMNS` order."""
    return [f"{dataset_of(arms, c)} {COLUMN_NAMES[p]}" for c, p in TABLE_COLUMNS]


def table(entries: Sequence[dict], arms: Sequence[Arm], timings: dict | None = None, rows: Sequence[Row] = ROWS,
          extra: tuple[str, Callable[[list[dict]], str]] | None = None) -> list[str]:
    """The table: N, s/step, seeds and the seven evaluation columns of every row of ``rows`` (the first: the floor);
    ``extra``, a (header, cell of the row's entries) column after the seeds."""
    groups = {r.label: row_entries(entries, arms, r) for r in rows}
    timed = {r.label: row_timing(r, arms, timings) for r in rows}
    won = winner(entries, arms)
    head = ["method", "N", "s/step", "seeds", *([extra[0]] if extra else [])]
    head += column_heads(arms)
    body = []
    for row in rows:
        listed, got = row_arms(arms, row), groups[row.label]
        if not listed:
            continue
        base = groups[row.baseline] if row.baseline else None
        floor = None if row.variant == NEVER_TRAINED else groups[rows[0].label]
        cells = []
        for call, protocol in TABLE_COLUMNS:
            vals, metric = values(got, call, protocol)
            cells.append(ours(vals, metric, values(base, call, protocol)[0] if base is not None else None,
                              values(floor, call, protocol)[0] if floor is not None else None))
        step = seconds_per_step(got, timed[row.label], timed.get(row.baseline) if row.baseline else None)
        if timed[row.label] is None:
            step = "not timed" if step == "—" else f"{step}, not timed"
        trained = floor is not None
        seeds = ", ".join(str(e["settings"]["seed"]) for e in got)
        body.append([row_label(row, won), views_per_image(listed[0]) if trained else "—", step if trained else "—",
                     f"{len(got)}/{len(listed)}" + (f" ({seeds})" if seeds else ""),
                     *([extra[1](got) if trained else "—"] if extra else [])] + cells)
    return markdown_table(head, body)


def omega_matrix(entries: Sequence[dict], arms: Sequence[Arm], rows: Sequence[Row] = ROWS
                 ) -> tuple[list[str], list[str], list[list[float | None]], list[list[str]]]:
    """(row labels, augmentations, values on a shared 0..1 scale, cell labels) of the rows with ω-probe records."""
    labels, matrix, texts = [], [], []
    augs = [a for a in OMEGA_AUGS if any(r["protocol"] == f"omega_probe_{a}" for e in entries for r in e["records"])]
    for row in rows:
        g = row_entries(entries, arms, row)
        line, text = omega_line(lambda p, g=g: values(g, "in_domain", p), lambda p, g=g: chance_of(g, p), augs)
        if any(v is not None for v in line):
            labels.append(row.label + (f" ({len(g)} seeds)" if len(g) > 1 else ""))
            matrix.append(line)
            texts.append(text)
    return labels, augs, matrix, texts


def plot_omega(entries: Sequence[dict], arms: Sequence[Arm], path: str, rows: Sequence[Row] = ROWS) -> str | None:
    """The ω-probe heat map; None (nothing written) when no entry has ω-probe records."""
    labels, augs, matrix, texts = omega_matrix(entries, arms, rows)
    return plot_heat_map(labels, augs, matrix, texts, path) if labels else None


def timing_note(timings: dict | None, ledger_label: str, command: str = COMMAND, suite: str = SUITE) -> str:
    """How the s/step column was measured."""
    how = (f"`{command} --time_steps` times one arm of every row back to back (median of its rounds of steps, in "
           "alternating order), with the ratio to the base row's")
    if not timings:  # the timings file is cited only once it exists: the docs' path check reads code spans
        return (f"no row is timed yet ({how}, into {ledger_label}timings/{suite}.json); \"not timed\" rows show "
                "their arms' mean training rate in italics.")
    m = timings["machine"]
    return (f"{how}: {timings['rounds']} rounds of {timings['steps']} steps on {m['cpu']} with {m['cores']} cores "
            f"(`{ledger_label}timings/{suite}.json`); "
            "rows marked \"not timed\" show their arms' mean training rate in italics instead (wall time over whole "
            "runs, beside whatever else ran).")


def render(entries: Sequence[dict], arms: Sequence[Arm], picture_link: str | None,
           ledger_label: str = "reproduce/ledger/", command: str = COMMAND, timings: dict | None = None) -> str:
    """The generated block: a function of the suite's ledger entries (and the suite's arm list) only."""
    done = {e["arm"] for e in entries}
    pending = [a for a in arms if a.id not in done]
    total = sum(e["training"]["seconds"] + e["evaluation"]["seconds"] for e in entries)
    budget = next((a.budget.describe() for a in arms if not a.budget.never_trained), "")
    kinds = len(pilot(arms))
    won = winner(entries, arms)
    out = ["## The augmentation-aware family at small scale (generated from the ledger)", "",
           f"Generated by `{command} --report_only` from `{ledger_label}`: **{len(arms) - len(pending)} of the "
           f"suite's {len(arms)} arms are done**"
           + (" (2 more, the pilot's winner at seeds 1 and 2, are listed once it is known)"
              if kinds == len(CONDITION_KINDS) and not won else "")
           + f"; {total / 3600:.1f} h of training and evaluation so far. {budget}.",
           "Cells: mean ± half-range over the seeds of the row (`seeds`: entries done / arms listed, and which "
           "seeds); Δ to the row's base (SimSiam for the SimSiam rows, SimCLR for the SimCLR rows), \"noise\" when "
           "within both sides' seed spread (judged only with ≥ 2 seeds on each side); \"—\" where no entry is in "
           "the ledger yet. The never-trained and SimSiam ± AugSelf rows are the LooC comparison's own entries "
           "(\"never trained\": the initialised network, no step, its BN statistics recomputed on the train split's "
           "images; \"≈ floor\" marks a cell within its seed spread). CASSLE conditions "
           "SimSiam's projector on AugSelf's ω (crop, color); the winner of its seed-0 pilot of "
           f"{kinds} condition kind{'s' if kinds != 1 else ''} is the kind with the highest mean of the seven "
           "evaluation columns (ties: the first of concat, add, mul, hypernet), and gets seeds 1 and 2: "
           + (f"**{won}**." if won else "not known until every pilot arm is in the ledger.")
           + " N: images per source image that a step's backbone sees, by each objective's design. s/step: "
           + timing_note(timings, ledger_label), ""]
    out += table(entries, arms, timings) + [""]
    out += block_tail(entries, picture_link, pending, command)
    return "\n".join(out).rstrip("\n")


def suite_of(ledger_dir: str, arms: Sequence[Arm]) -> list[dict]:
    """The ledger's entries of this suite: those whose id is one of ``arms`` (so the LooC comparison's SimSiam ±
    AugSelf entries are read, and another --epochs/--width is another table)."""
    ids = {a.id for a in arms}
    return [e for e in ledger.load_entries(ledger_dir) if e["arm"] in ids]


def report_block(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """The block ``--suite=aware --report_only`` writes, from the ledger's entries of this suite alone."""
    entries = suite_of(ledger_dir, arms)
    label = os.path.relpath(os.path.abspath(ledger_dir), ledger.ROOT).replace(os.sep, "/") + "/"
    link = doc_blocks.relative_link(picture, results_md) if omega_matrix(entries, arms)[0] else None
    return render(entries, arms, link, label, command, ledger.load_timings(ledger_dir, SUITE))


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str,
                 command: str = COMMAND) -> str:
    """Regenerates the heat map and the block between this suite's markers of ``results_md``; returns the block."""
    plot_omega(suite_of(ledger_dir, arms), arms, picture)
    block = report_block(ledger_dir, arms, results_md, picture, command)
    doc_blocks.write_block(results_md, block, BEGIN, END)
    return block
