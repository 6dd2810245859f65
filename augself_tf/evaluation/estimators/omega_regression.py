"""How much of each augmentation's ω_diff frozen features keep: a kernel ridge probe on feature pairs.

AugSelf's claim is that f keeps enough to predict ω_diff(1, 2) from [f(v1), f(v2)]. This module measures it
on frozen features, the same way for every model: a probe reads the pair [f1, f2] of two augmented views of
one image and predicts each augmentation's target — R² for the regressed ones (crop, colour, blur, solarize:
per component and pooled over the components), accuracy for the classified ones (flip: same flip or not;
rotation: (k1 − k2) mod 4).

The probe: **kernel ridge regression with a Gaussian (RBF) kernel** on the standardised pair [f1, f2], the
classes as one-hot columns (a kernel ridge classifier: argmax). Why this one:
* the targets are not linear in [f1, f2] even when each view's features hold its ω exactly: flip and
  rotation compare two views (an XOR, a difference mod 4) and crop's x-centre changes sign with view 1's
  flip. A linear probe would score such a model at chance; AugSelf's own heads are MLPs for that reason.
  A Gaussian kernel is nonlinear enough for all of them;
* it is small and deterministic: closed form, no initialisation, no iterations, no seed but the hold-out's;
  one eigendecomposition per kernel width serves every regulariser and every target at once.

Selection: the kernel width γ = m / median‖x_i − x_j‖² (m ∈ ``gammas``, the median over train pairs: a
scale-free width for any feature size) and the ridge α ∈ ``alphas`` are chosen per augmentation on a
held-out part of the train pairs (whole source images held out), by pooled R² or accuracy (ties: the
smoother — larger α, smaller γ); the probe is then refitted on all train pairs and scored on the test pairs.
Features are standardised with the train pairs' mean and standard deviation (a constant dimension is left
as is), targets centred on their train mean.

No I/O, no TensorFlow: a later pass moves estimators like this one into a package of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from augself_tf.evaluation.estimators.errors import EvalError

REGRESSION, CLASSES = "regression", "classes"
DEFAULT_ALPHAS: tuple[float, ...] = tuple(float(a) for a in np.logspace(-3, 3, 7))
DEFAULT_GAMMAS: tuple[float, ...] = (0.0625, 0.25, 1.0, 4.0)


@dataclasses.dataclass(frozen=True)
class Target:
    """One augmentation's target over pairs: ``kind`` REGRESSION (values [n, c]) or CLASSES (int labels [n])."""

    kind: str
    values: np.ndarray
    components: tuple[str, ...] = ()


@dataclasses.dataclass
class ProbeScore:
    """Test score of one augmentation's target.

    Attributes:
      kind: REGRESSION or CLASSES.
      value: pooled R² (1 − ΣSSE / ΣSST over the components) or accuracy (fraction).
      components: R² of each component (regression), in the target's order.
      chance: the accuracy of always guessing the train split's most frequent class (classes), or 0 (R² of
        the train mean is ≈ 0 by construction).
      alpha, gamma: the chosen ridge and kernel width (γ in units of 1 / median squared distance).
      held_out: the held-out score that chose them.
    """

    kind: str
    value: float
    components: list[float]
    chance: float
    alpha: float
    gamma: float
    held_out: float


def r2_components(y: np.ndarray, pred: np.ndarray) -> tuple[list[float], float]:
    """(R² per column, pooled R²) of predictions; R² = 1 − SSE / SST around y's own mean (NaN if SST = 0)."""
    y = np.asarray(y, np.float64).reshape(len(y), -1)
    pred = np.asarray(pred, np.float64).reshape(len(pred), -1)
    sse = np.sum((y - pred) ** 2, axis=0)
    sst = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(sst > 0, 1.0 - sse / np.where(sst > 0, sst, 1.0), np.nan)
    pooled = float(1.0 - sse.sum() / sst.sum()) if sst.sum() > 0 else float("nan")
    return [float(v) for v in per], pooled


def _score(target: Target, y_true: np.ndarray, pred: np.ndarray, classes: np.ndarray) -> float:
    if target.kind == REGRESSION:
        return r2_components(y_true, pred)[1]
    return float(np.mean(classes[np.argmax(pred, axis=1)] == y_true))


class _Columns:
    """All targets as one matrix of columns (regression values, one-hot classes), and back."""

    def __init__(self, targets: Mapping[str, Target]):
        self.slices: dict[str, slice] = {}
        self.classes: dict[str, np.ndarray] = {}
        start = 0
        for name, t in targets.items():
            if t.kind == REGRESSION:
                width = np.asarray(t.values).reshape(len(t.values), -1).shape[1]
            elif t.kind == CLASSES:
                self.classes[name] = np.unique(np.asarray(t.values).astype(np.int64))
                width = len(self.classes[name])
            else:
                raise ValueError(f"unknown target kind {t.kind!r}")
            self.slices[name] = slice(start, start + width)
            start += width
        self.width = start

    def matrix(self, targets: Mapping[str, Target]) -> np.ndarray:
        cols = []
        for name, t in targets.items():
            v = np.asarray(t.values)
            if t.kind == REGRESSION:
                cols.append(v.reshape(len(v), -1).astype(np.float64))
            else:
                cols.append((v.astype(np.int64)[:, None] == self.classes[name][None, :]).astype(np.float64))
        return np.concatenate(cols, axis=1)


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.sum(a * a, 1)[:, None] + np.sum(b * b, 1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


class _KernelRidge:
    """Kernel ridge fits of many columns for many α at one kernel: one eigendecomposition."""

    def __init__(self, x: np.ndarray, y: np.ndarray, gamma: float):
        self.x, self.gamma = x, gamma
        self.y_mean = y.mean(axis=0)
        lam, self.vecs = np.linalg.eigh(np.exp(-gamma * _sq_dists(x, x)))
        self.lam = np.maximum(lam, 0.0)
        self.proj = self.vecs.T @ (y - self.y_mean)

    def predict(self, x_new: np.ndarray, alpha: float) -> np.ndarray:
        coef = self.vecs @ (self.proj / (self.lam + alpha)[:, None])
        return np.exp(-self.gamma * _sq_dists(x_new, self.x)) @ coef + self.y_mean


def _standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mu = train.mean(axis=0)
    sd = train.std(axis=0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    return [(a - mu) / sd for a in (train, *others)]


def held_out_groups(groups: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Mask of the rows whose group (source image) is among round(fraction · groups) groups drawn with ``seed``
    (at least one held out, at least one kept)."""
    groups = np.asarray(groups)
    ids = np.unique(groups)
    if len(ids) < 2:
        raise EvalError(f"omega probe: need at least 2 train images to hold some out, got {len(ids)}")
    n_held = int(min(len(ids) - 1, max(1, round(fraction * len(ids)))))
    held_ids = np.random.default_rng(seed).permutation(len(ids))[:n_held]
    return np.isin(groups, ids[held_ids])


def median_sq_distance(x: np.ndarray, max_rows: int = 500) -> float:
    """Median squared distance between distinct rows of (at most the first ``max_rows`` of) ``x``."""
    sub = x[:max_rows]
    d = _sq_dists(sub, sub)[np.triu_indices(len(sub), k=1)]
    med = float(np.median(d)) if d.size else 0.0
    return med if med > 0 else 1.0


def probe_omega(*args, **kwargs) -> dict[str, ProbeScore]:
    """:func:`_probe_omega` (arguments and result) with one BLAS thread: the n×n eigendecompositions are ~30×
    slower when a busy 2-core machine's threads fight over them."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _probe_omega(*args, **kwargs)


def _probe_omega(
    train_pairs: np.ndarray,
    train_targets: Mapping[str, Target],
    train_groups: np.ndarray,
    test_pairs: np.ndarray,
    test_targets: Mapping[str, Target],
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    gammas: Sequence[float] = DEFAULT_GAMMAS,
) -> dict[str, ProbeScore]:
    """Probe every target (see the module docstring); ``*_pairs`` are [n, 2d] rows [f1, f2].

    Args:
      train_groups: the source image of each train pair: a held-out image takes all its pairs along.
    """
    x_tr = np.asarray(train_pairs, np.float64)
    x_te = np.asarray(test_pairs, np.float64)
    if x_tr.ndim != 2 or x_te.ndim != 2 or x_tr.shape[1] != x_te.shape[1]:
        raise EvalError(f"omega probe: train pairs {x_tr.shape} and test pairs {x_te.shape} do not match")
    if set(train_targets) != set(test_targets):
        raise EvalError("omega probe: train and test pairs carry different targets")
    if not train_targets:
        raise EvalError("omega probe: no augmentation target to probe")
    held = held_out_groups(train_groups, val_fraction, seed)
    x_tr, x_te = _standardise(x_tr, x_te)
    cols = _Columns(train_targets)
    y_tr = cols.matrix(train_targets)
    med = median_sq_distance(x_tr[~held])
    alpha_order = sorted((float(a) for a in alphas), reverse=True)  # smoother first: ties keep it
    best: dict[str, tuple[float, float, float]] = {name: (-np.inf, 0.0, 0.0) for name in train_targets}
    for m in sorted(float(g) for g in gammas):
        fit = _KernelRidge(x_tr[~held], y_tr[~held], m / med)
        for alpha in alpha_order:
            pred = fit.predict(x_tr[held], alpha)
            for name, t in train_targets.items():
                truth = np.asarray(t.values)[held]
                s = _score(t, truth, pred[:, cols.slices[name]], cols.classes.get(name, np.empty(0)))
                if np.isfinite(s) and s > best[name][0]:
                    best[name] = (s, alpha, m)
    out: dict[str, ProbeScore] = {}
    fits: dict[float, _KernelRidge] = {}
    for name, t in test_targets.items():
        held_score, alpha, m = best[name]
        if not np.isfinite(held_score):  # no usable held-out score (a constant target): smoothest probe
            alpha, m = alpha_order[0], min(gammas)
        fit = fits.get(m) or fits.setdefault(m, _KernelRidge(x_tr, y_tr, m / med))
        pred = fit.predict(x_te, alpha)[:, cols.slices[name]]
        truth = np.asarray(t.values)
        if t.kind == REGRESSION:
            components, value = r2_components(truth, pred)
            chance = 0.0
        else:
            classes = cols.classes[name]
            value = _score(t, truth, pred, classes)
            train_labels = np.asarray(train_targets[name].values).astype(np.int64)
            majority = np.bincount(np.searchsorted(classes, train_labels)).argmax()
            components, chance = [], float(np.mean(truth == classes[majority]))
        out[name] = ProbeScore(t.kind, float(value), components, chance, float(alpha), float(m), float(held_score))
    return out
