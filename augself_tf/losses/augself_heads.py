"""AugSelf's loss (Lee et al., 2021): each head φ_aug predicts ω_diff from a pair of views' features, both orders.

A head reads [f1, f2] → ω_diff(1, 2) and [f2, f1] → ω_diff(2, 1): `ordered_pairs` and `ordered_targets` stack
the two orders (view-1-first rows, then view-2-first). Its loss depends on the kind of target, which each
augmentation's registry entry names (``augment/geometric.py``, ``augment/photometric.py``):

| target kind | augmentations | loss (per pair) | logged error |
|---|---|---|---|
| regression | crop, color, blur, solarize | `tanh_mse`: mean (tanh(p) − t)² | the same, and `batch_r2` |
| binary | flip | `binary_cross_entropy` of a logit | `binary_error` |
| 4-way class | rotation | `categorical_cross_entropy` of logits | `categorical_error` |

Every function returns one value per pair [N]; the model averages over the 2B pairs and sums over the heads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf


def ordered_pairs(f1: tf.Tensor, f2: tf.Tensor) -> tf.Tensor:
    """float32 [2B, 2d]: rows [f1_i, f2_i] for every i, then [f2_i, f1_i]."""
    pairs = tf.concat([tf.concat([f1, f2], -1), tf.concat([f2, f1], -1)], 0)
    return tf.cast(pairs, tf.float32)


def ordered_targets(target: Callable[[Mapping, Mapping], tf.Tensor], omega1: Mapping, omega2: Mapping) -> tf.Tensor:
    """[ω_diff(1, 2); ω_diff(2, 1)]: `target` (a registry entry's) in the row order of `ordered_pairs`."""
    return tf.concat([target(omega1, omega2), target(omega2, omega1)], 0)


def tanh_mse(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """mean over the last axis of (tanh(pred) - target)^2 -> [B]."""
    pred = tf.cast(pred, tf.float32)
    return tf.reduce_mean(tf.square(tf.tanh(pred) - tf.cast(target, tf.float32)), axis=-1)


def batch_r2(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Pooled R² of predictions [N, c] over the batch: 1 − Σ(pred − t)² / Σ(t − mean_N t)² (a scalar).

    0 is a predictor of the batch's mean target, 1 an exact one. Logged beside a regressed target's error, whose
    fall from step 0 is mostly a random head learning the mean (its floor is the target's variance, not 0).
    """
    pred, target = tf.cast(pred, tf.float32), tf.cast(target, tf.float32)
    sse = tf.reduce_sum(tf.square(pred - target))
    sst = tf.reduce_sum(tf.square(target - tf.reduce_mean(target, axis=0, keepdims=True)))
    return 1.0 - sse / tf.maximum(sst, 1e-12)


def binary_cross_entropy(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Sigmoid binary cross-entropy from logits, mean over the last axis -> [B]."""
    pred = tf.cast(pred, tf.float32)
    labels = tf.cast(target, tf.float32)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=pred), axis=-1)


def binary_error(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Fraction of wrong signs (logit > 0 vs target > 0.5) over the last axis -> [B]."""
    wrong = tf.not_equal(tf.cast(pred, tf.float32) > 0.0, tf.cast(target, tf.float32) > 0.5)
    return tf.reduce_mean(tf.cast(wrong, tf.float32), axis=-1)


def categorical_cross_entropy(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Sparse softmax cross-entropy of logits [B, n] against int labels [B] -> [B]."""
    labels = tf.cast(target, tf.int32)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=tf.cast(pred, tf.float32))


def categorical_error(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """1.0 where argmax(logits) != label -> [B]."""
    guess = tf.argmax(tf.cast(pred, tf.float32), axis=-1, output_type=tf.int32)
    return tf.cast(tf.not_equal(guess, tf.cast(target, tf.int32)), tf.float32)
