"""SimSiam's loss (Chen & He, 2021): the negative cosine of a prediction and a stop-gradient target."""

from __future__ import annotations

import tensorflow as tf


def negative_cosine(p: tf.Tensor, z: tf.Tensor) -> tf.Tensor:
    """Mean over the batch of −cos(p, stopgrad(z)), in float32.

    Args:
      p: predictions [B, D] (gradient flows into them).
      z: targets [B, D] (no gradient: the stop-gradient that keeps SimSiam from collapsing).

    Returns:
      A scalar in [−1, 1]; SimSiam symmetrises it itself, 0.5·(D(p1, z2) + D(p2, z1)).
    """
    p = tf.math.l2_normalize(tf.cast(p, tf.float32), -1)
    z = tf.math.l2_normalize(tf.stop_gradient(tf.cast(z, tf.float32)), -1)
    return -tf.reduce_mean(tf.reduce_sum(p * z, -1))
