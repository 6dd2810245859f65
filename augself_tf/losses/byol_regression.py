"""BYOL's loss (Grill et al., 2020): the normalised MSE of an online prediction against a target projection."""

from __future__ import annotations

import tensorflow as tf


def byol_regression(p: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
    """Mean over the batch of 2 − 2·cos(p, stopgrad(t)) (= ‖p̂ − t̂‖² of the unit vectors), in float32.

    Args:
      p: online predictions [B, D].
      t: target-network projections [B, D] (no gradient).

    Returns:
      A scalar in [0, 4]; BYOL sums it over both view orders itself.
    """
    p = tf.math.l2_normalize(tf.cast(p, tf.float32), -1)
    t = tf.math.l2_normalize(tf.stop_gradient(tf.cast(t, tf.float32)), -1)
    return tf.reduce_mean(2.0 - 2.0 * tf.reduce_sum(p * t, -1))
