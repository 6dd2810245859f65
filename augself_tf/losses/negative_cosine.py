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


def normalized_std(*outputs: tf.Tensor) -> tf.Tensor:
    """SimSiam's collapse diagnostic (its paper's Fig. 2; solo-learn's ``z_std``): the per-dimension standard deviation
    over the batch of each ℓ2-normalised output [B, D] (unbiased, as torch's ``std``), averaged over dimensions and
    outputs. About 1/√D while the outputs spread; 0 when they collapse to one vector. No gradient."""
    z = tf.stack([tf.math.l2_normalize(tf.stop_gradient(tf.cast(o, tf.float32)), -1) for o in outputs])  # [V, B, D]
    n = tf.cast(tf.shape(z)[1], tf.float32)
    variance = tf.math.reduce_variance(z, axis=1) * n / tf.maximum(n - 1.0, 1.0)
    return tf.reduce_mean(tf.sqrt(variance))
