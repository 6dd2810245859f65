"""Low-shot linear evaluation on frozen features: k labelled images of EVERY class, logistic regression.

LooC's Flowers-102 5-shot / 10-shot protocol (Xiao et al., ICLR 2021; the AugSelf paper's
``table:looc_comparison``): a linear classifier trained on k images per class of all classes, scored on the
whole test split, mean ± standard deviation over several random draws of the k images. This is not the
N-way episode protocol of :mod:`~augself_tf.evaluation.estimators.fewshot_episodes`.

The classifier is the linear protocol's: ℓ2-regularised multinomial logistic regression by L-BFGS
(:mod:`~augself_tf.evaluation.estimators.logreg`), the regulariser swept over the same grid, strong to weak with warm
starts. With k images per class there is no validation split to pick it on, and borrowing labels beyond
the k would make it a larger-shot protocol. So it is chosen by **cross-validation inside the k-shot set**:
the k images of each class are put in a random order, shot position j goes to fold ``j mod F``
(F = ``min(folds, k)``), and every fold holds out its positions of *every* class while the rest train
(stratified: each class keeps ≥ k − ⌈k/F⌉ ≥ 1 training images). The regulariser with the best mean
held-out score over the F folds wins (ties: the stronger), then the classifier is refitted on all k·C images
at that value and scored on the test split. Everything is a function of (seed, k, draw): reruns are equal.

No I/O, no TensorFlow: a later pass moves estimators like this one into a package of their own.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from augself_tf.evaluation.estimators import logreg
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.intervals import t_ci95


def check_class_sizes(labels: np.ndarray, shots: int) -> np.ndarray:
    """The classes of ``labels`` (negative labels ignored); :class:`EvalError` unless each has ≥ shots + 1 images.

    k + 1 and not k: a class with exactly k images would give the same k images in every draw, so the spread
    over draws would not measure what it claims to.
    """
    y = np.asarray(labels).astype(np.int64)
    classes, counts = np.unique(y[y >= 0], return_counts=True)
    if classes.size < 2:
        raise EvalError(f"lowshot needs at least 2 classes in the train split, got {classes.size}")
    short = [(int(c), int(n)) for c, n in zip(classes, counts, strict=True) if n < shots + 1]
    if short:
        listed = ", ".join(f"{c} ({n})" for c, n in short[:8]) + (" ..." if len(short) > 8 else "")
        raise EvalError(
            f"lowshot {shots}-shot needs at least {shots + 1} train images per class; {len(short)} of "
            f"{classes.size} classes have fewer (class (images): {listed}): use smaller --lowshot_shots"
        )
    return classes


def draw_shots(labels: np.ndarray, shots: int, seed: int, draw: int) -> tuple[np.ndarray, np.ndarray]:
    """One draw of ``shots`` train images of every class: (row indices, shot position of each row).

    Rows of class c are in a random order; ``position`` j ∈ [0, shots) is the row's place in it (the folds of
    :func:`select_reg_by_cv` are built from it). A function of (seed, shots, draw) only.
    """
    y = np.asarray(labels).astype(np.int64)
    classes = check_class_sizes(y, shots)
    rng = np.random.default_rng([int(seed), int(shots), int(draw)])
    rows, positions = [], []
    for c in classes:
        pick = rng.choice(np.flatnonzero(y == c), size=shots, replace=False)
        rows.append(pick)
        positions.append(np.arange(shots))
    return np.concatenate(rows), np.concatenate(positions)


def fold_of(positions: np.ndarray, shots: int, folds: int) -> tuple[np.ndarray, int]:
    """The cross-validation fold of each row (``position mod F``) and F = min(folds, shots)."""
    if shots < 2:
        raise EvalError(f"lowshot needs at least 2 shots to choose its regulariser by cross-validation, got {shots}")
    if folds < 2:
        raise EvalError(f"--lowshot_folds must be at least 2, got {folds}")
    f = min(int(folds), int(shots))
    return np.asarray(positions) % f, f


@dataclasses.dataclass
class CVChoice:
    """The regulariser chosen by cross-validation: value, mean held-out score per swept value (sweep order)."""

    best_reg: float
    regs: list[float]
    cv_scores: list[float]
    folds: int


def select_reg_by_cv(
    x: np.ndarray,
    y: np.ndarray,
    fold: np.ndarray,
    regs: Sequence[float],
    *,
    metric: str = "top1",
    **fitter_options,
) -> CVChoice:
    """Mean held-out ``metric`` of each regulariser over the folds; the best (ties: stronger) wins.

    Each fold's sweep runs strong to weak with warm starts (the linear protocol's path). ``fitter_options``
    are :class:`~augself_tf.evaluation.estimators.logreg.LogRegFitter`'s (backend, max_iter, gtol).
    """
    score = logreg.METRICS[metric]
    order = sorted((float(r) for r in regs), reverse=True)
    classes = np.unique(y)
    folds = np.unique(fold)
    totals = np.zeros(len(order))
    for f in folds:
        train, held = fold != f, fold == f
        fitter = logreg.LogRegFitter(x[train], y[train], classes=classes, **fitter_options)
        for i, reg in enumerate(order):
            totals[i] += score(y[held], fitter.fit(reg).predict(x[held]))
    means = totals / len(folds)
    best = int(np.argmax(means))  # first maximum = the strongest of equals
    return CVChoice(order[best], order, means.tolist(), len(folds))


@dataclasses.dataclass
class LowshotResult:
    """Test scores of one k over the draws.

    Attributes:
      shots: k.
      scores: test score of each draw (fractions).
      best_regs: the regulariser each draw chose.
      mean, std: over draws (std with ddof = 1, LooC's "±"); ``ci95`` the Student-t half-width.
      classes: number of classes; ``n_train`` = k · classes.
      folds: F of the cross-validation.
      seconds: wall time.
    """

    shots: int
    scores: list[float]
    best_regs: list[float]
    mean: float
    std: float
    ci95: float
    classes: int
    n_train: int
    folds: int
    seconds: float


def lowshot_eval(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    shots: int,
    draws: int,
    seed: int,
    regs: Sequence[float] = tuple(logreg.REG_GRID),
    folds: int = 5,
    metric: str = "top1",
    backend: str = logreg.DEFAULT_BACKEND,
    max_iter: int = logreg.MAX_ITER,
    gtol: float = logreg.DEFAULT_GTOL,
    log: Callable[[str], None] | None = None,
) -> LowshotResult:
    """k-shot linear evaluation over ``draws`` draws (see the module docstring)."""
    if draws < 1:
        raise EvalError(f"--lowshot_draws must be positive, got {draws}")
    start = time.perf_counter()
    x_train = np.asarray(x_train, np.float32)
    y_train = np.asarray(y_train).astype(np.int64)
    y_test = np.asarray(y_test).astype(np.int64)
    classes = check_class_sizes(y_train, shots)
    unknown = np.setdiff1d(np.unique(y_test[y_test >= 0]), classes)
    if unknown.size:
        raise EvalError(f"lowshot: test labels {unknown[:8].tolist()} have no train images")
    options = dict(backend=backend, max_iter=max_iter, gtol=gtol)
    scores, chosen, n_folds = [], [], 0
    for d in range(draws):
        rows, positions = draw_shots(y_train, shots, seed, d)
        fold, n_folds = fold_of(positions, shots, folds)
        x, y = x_train[rows], y_train[rows]
        cv = select_reg_by_cv(x, y, fold, regs, metric=metric, **options)
        model = logreg.fit_logreg(x, y, cv.best_reg, classes=classes, **options)
        s = logreg.METRICS[metric](y_test, model.predict(x_test))
        scores.append(float(s))
        chosen.append(cv.best_reg)
        if log is not None:
            log(f"  {shots}-shot draw {d}: reg {cv.best_reg:.3e} (cv {max(cv.cv_scores):.4f}), test {s:.4f}")
    arr = np.asarray(scores)
    return LowshotResult(
        shots=int(shots), scores=scores, best_regs=chosen, mean=float(arr.mean()),
        std=float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, ci95=t_ci95(arr), classes=int(classes.size),
        n_train=int(shots * classes.size), folds=n_folds, seconds=time.perf_counter() - start,
    )
