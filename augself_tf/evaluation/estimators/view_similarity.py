"""Invariance: cosine similarity between features of augmented views and of the original image.

Paper (appendix A, Table "invariance"): CS = E_{x, t}[cos(g∘f(t(x)), g∘f(x))] over 80k random samples
of the STL10 test split (10 views per image), ± 95% CI. Our exported models hold the backbone f only,
so we measure CS with f (the same quantity for the backbone, not comparable digit-for-digit with the
paper's projector-space numbers). t is the standard pretraining augmentation (``AugmentConfig`` at the
eval size: crop, flip, colour jitter, grayscale, blur); x is the eval centre crop. Each (image, view)
pair is one sample; the CI is 1.96·std/√samples.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.intervals import normal_ci95
from augself_tf.evaluation.estimators.neighbours import l2_normalize


def make_view_fn(image_size: int, seed: int, view: int, views: int):
    """``view(image, index)`` drawing the ``view``-th augmented view of example ``index`` (stateless)."""
    from augself_tf.augment import AugmentConfig, augment_view

    config = AugmentConfig(image_size=image_size)

    # augment_view is graph-safe as written: skipping autograph's conversion makes tracing ~3x faster.
    @tf.autograph.experimental.do_not_convert
    def fn(image: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
        s = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64) * views + view])
        pixels, _omega = augment_view(image, s, config)
        return pixels

    return fn


@dataclasses.dataclass
class InvarianceResult:
    """Mean cosine similarity and its 95% half-width over (image, view) samples."""

    mean: float
    ci95: float
    samples: int
    images: int
    views: int


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two [n, d] arrays."""
    return np.sum(l2_normalize(a) * l2_normalize(b), axis=1)


def invariance_from_features(original: np.ndarray, views: list[np.ndarray]) -> InvarianceResult:
    """CS over aligned rows: ``original`` [n, d] and each view's features [n, d]."""
    if not views:
        raise EvalError("invariance needs at least one augmented view per image")
    sims = np.concatenate([cosine_rows(v, original) for v in views])
    return InvarianceResult(
        mean=float(sims.mean()),
        ci95=normal_ci95(sims),
        samples=int(len(sims)),
        images=int(len(original)),
        views=len(views),
    )
