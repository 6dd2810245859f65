"""The 95% intervals of the reported means (half-widths), in one place.

* :func:`normal_ci95` — 1.96 · sd / √n: few-shot episodes and invariance samples (sd with ddof = 0, as
  the paper's reference code), InfoNCE estimates (ddof = 1).
* :func:`t_ci95` — Student-t over a handful of fine-tuning trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def normal_ci95(values: Sequence[float] | np.ndarray, ddof: int = 0) -> float:
    """Half-width 1.96 · std(values, ddof) / √n of the normal 95% interval of the mean.

    NaN for no values; 0 when there are too few values for ``ddof``. The arithmetic runs in the values'
    own dtype (float32 cosines stay float32), so recorded figures do not move with this refactor.
    """
    v = np.asarray(values)
    if len(v) == 0:
        return float("nan")
    if len(v) <= ddof:
        return 0.0
    return float(1.96 * v.std(ddof=ddof) / np.sqrt(len(v)))


def t_ci95(values: Sequence[float] | np.ndarray) -> float:
    """Half-width of the 95% Student-t interval of the mean (0 for fewer than 2 values)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
