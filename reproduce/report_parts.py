"""What the comparison reports share: a cell with its Δ, the seeds and s/step columns, markdown tables, and the
ω-probe heat map.

The LooC comparison's report (reproduce/looc_report.py) and the augmentation-aware family's
(reproduce/aware_report.py) lay out their tables from these, so a cell, a step time or the picture reads the
same in both blocks. The numbers themselves (mean ± half-range, the noise rule) are reproduce/seed_cells.py's.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence

from reproduce import seed_cells
from reproduce.arm_settings import Arm
from reproduce.wall_table import wall_table

NOT_RUN = "not yet run"
OMEGA_AUGS = ("crop", "color", "blur", "solarize", "rotation", "flip")


def ours(vals: list[float], metric: str | None, base: list[float] | None, floor: list[float] | None = None) -> str:
    """``mean ± half-range (Δ +x)``; ``(Δ +x, noise)`` when within the seed spread of both sides; `` ≈ floor`` when
    within the never-trained floor's spread (``floor``: its values; see :func:`seed_cells.at_floor`)."""
    if not vals:
        return "—"
    text = seed_cells.cell(vals, metric or "")
    if base:
        delta, noise = seed_cells.difference(vals, base)
        text += f" (Δ {delta:+.{seed_cells.decimals(metric or '')}f}{', noise' if noise else ''})"
    return text + (seed_cells.FLOOR_MARK if seed_cells.at_floor(vals, floor) else "")


def seconds_per_step(entries: Sequence[dict], timed: float | None, base: float | None) -> str:
    """The row's step: its back-to-back timing (``--time_steps``) with its ratio to the baseline's, else the mean
    training rate of its arms in italics (wall time over whole runs, beside whatever else the machine ran)."""
    if timed is not None:
        return f"{timed:.3g}" + (f" ({timed / base:.2f}×)" if base else "")
    rates = [e["training"]["seconds_per_step"] for e in entries if e["training"].get("seconds_per_step")]
    return f"*{statistics.fmean(rates):.3g}*" if rates else "—"


def seeds_label(entries: Sequence[dict]) -> str:
    """``3 (0, 1, 2)``: how many seeds a row has and which; :data:`NOT_RUN` for none."""
    seeds = [e["settings"]["seed"] for e in entries]
    return f"{len(seeds)} ({', '.join(map(str, seeds))})" if seeds else NOT_RUN


def markdown_table(head: list[str], body: list[list[str]]) -> list[str]:
    """The lines of a markdown table."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]


def dataset_of(arms: Sequence[Arm], call: str) -> str:
    """The dataset a call reads, from the suite's arms (the report's headers say what was measured)."""
    return next((c.dataset for a in arms for c in a.evals if c.name == call), call)


def omega_line(values: Callable[[str], tuple[list[float], str | None]], chance: Callable[[str], float | None],
               augs: Sequence[str]) -> tuple[list[float | None], list[str]]:
    """One row of the heat map: per augmentation, the seeds' mean ω-probe value on a shared 0..1 scale (R² as it
    is; an accuracy as (acc − chance) / (100 − chance)) and its label; ``values(protocol)`` gives a row's values
    and metric of a protocol, ``chance(protocol)`` its chance level."""
    line: list[float | None] = []
    text: list[str] = []
    for aug in augs:
        vals, metric = values(f"omega_probe_{aug}")
        if not vals:
            line.append(None)
            text.append("")
            continue
        mean = statistics.fmean(vals)
        level = chance(f"omega_probe_{aug}")
        if metric and metric.endswith("%") and level is not None:
            line.append((mean - level) / (100.0 - level) if level < 100 else None)
            text.append(f"{mean:.0f}%")
        else:
            line.append(mean)
            text.append(f"{mean:.2f}")
    return line, text


def plot_heat_map(labels: Sequence[str], augs: Sequence[str], matrix: Sequence[Sequence[float | None]],
                  texts: Sequence[Sequence[str]], path: str) -> str:
    """The ω-probe heat map (rows × augmentations, from :func:`omega_line`), written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in line] for line in matrix], dtype=float)
    fig, ax = plt.subplots(figsize=(1.3 * len(augs) + 3.2, 0.45 * len(labels) + 1.6))
    im = ax.imshow(data, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for i, line in enumerate(texts):
        for j, text in enumerate(line):
            if text:
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if data[i, j] < 0.5 else "black")
    ax.set_xticks(range(len(augs)), augs)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_title("ω_diff from frozen view pairs (omega_probe, mean over seeds)\n"
                 "R², or accuracy coloured as (acc − chance) / (1 − chance)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})  # no version stamp: the same ledger, the same bytes
    plt.close(fig)
    return path


def block_tail(entries: list[dict], picture_link: str | None, pending: Sequence[Arm], command: str,
               picture_alt: str = "omega_probe: rows × augmentations") -> list[str]:
    """The lines every suite's block ends with: its picture, the wall-time table, and the arms not yet run."""
    out: list[str] = []
    if picture_link:
        out += [f"![{picture_alt}]({picture_link})", ""]
    if entries:
        wall, legend = wall_table(entries)
        out += ["Wall time, machines and commits:", "", wall, "", "Machines:", *legend, ""]
    if pending:
        out += [f"{NOT_RUN.capitalize()} ({len(pending)} arm{'s' if len(pending) > 1 else ''}): "
                + ", ".join(f"`{a.name}`" for a in pending) + f". `{command}` runs them in this order.", ""]
    return out
