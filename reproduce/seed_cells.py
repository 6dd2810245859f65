"""A report cell: an evaluation's values over the seeds of one setting, as mean ± half-range, and Δ to a baseline.

Both suites' reports (reproduce/main_report.py, reproduce/looc_report.py) show their numbers this way, with the
same noise rule: a Δ within the seed spread is marked, judged only where both sides have at least two seeds; and a
cell within the never-trained floor's spread is marked ``≈ floor`` (judged where the floor has two seeds or more).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence


@dataclasses.dataclass
class Group:
    """The seeds of one (data, budget, method, AugSelf, conditioning) setting."""

    entries: list[dict]

    @property
    def seeds(self) -> list[int]:
        return sorted(e["settings"]["seed"] for e in self.entries)

    def values(self, row: tuple[str, str, str]) -> list[float]:
        out = []
        for e in self.entries:
            for r in e["records"]:
                if (r["call"], r["protocol"], r["metric"]) == row and r["value"] is not None:
                    out.append(float(r["value"]))
        return out


def mean_half_range(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half of max − min): the seed spread the report shows."""
    return statistics.fmean(values), (max(values) - min(values)) / 2


def difference(variant: Sequence[float], base: Sequence[float]) -> tuple[float, bool | None]:
    """(mean(variant) − mean(base), noise): noise is whether |Δ| is within the sum of the two half-ranges,
    judged only when both sides have at least two seeds (else None: one seed has no spread to judge by)."""
    (mv, hv), (mb, hb) = mean_half_range(variant), mean_half_range(base)
    delta = mv - mb
    if len(variant) < 2 or len(base) < 2:
        return delta, None
    return delta, abs(delta) <= hv + hb


def at_floor(values: Sequence[float], floor: Sequence[float] | None) -> bool:
    """Whether ``values`` are within the never-trained floor's spread: |mean − the floor's mean| ≤ the sum of the two
    half-ranges (a one-seed cell has none of its own). Judged only when the floor has at least two seeds."""
    if not values or not floor or len(floor) < 2:
        return False
    (mv, hv), (mf, hf) = mean_half_range(values), mean_half_range(floor)
    return abs(mv - mf) <= hv + hf


FLOOR_MARK = " ≈ floor"  # a cell within the never-trained floor's spread: those features learned nothing measurable


def decimals(metric: str) -> int:
    """Accuracies (%) with one decimal; errors and cosines with four."""
    return 1 if metric.endswith("%") else 4


def cell(values: Sequence[float], metric: str) -> str:
    """``mean ± half-range`` of the seeds' values (one seed: its value; none: a dash)."""
    if not values:
        return "—"
    d = decimals(metric)
    if len(values) == 1:
        return f"{values[0]:.{d}f}"
    mean, half = mean_half_range(values)
    return f"{mean:.{d}f} ± {half:.{d}f}"


def delta_cell(variant: Sequence[float], base: Sequence[float], metric: str) -> str:
    """The signed difference of the means, `` (noise)`` when within the seed spread (see :func:`difference`)."""
    if not variant or not base:
        return "—"
    delta, noise = difference(variant, base)
    return f"{delta:+.{decimals(metric)}f}" + (" (noise)" if noise else "")

