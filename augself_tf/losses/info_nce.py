"""MoCo's loss (He et al., 2020; v2: Chen et al., 2020): InfoNCE of a query against its positive key and a queue.

Split in two so that another queue method (LooC's per-subspace heads) can reuse the logits: `info_nce_logits`
builds [positive | negatives] / T, `info_nce` is their cross-entropy with the positive at index 0.
"""

from __future__ import annotations

import tensorflow as tf


def info_nce_logits(q: tf.Tensor, k: tf.Tensor, queue: tf.Tensor, temperature: float) -> tf.Tensor:
    """Logits [B, 1 + K]: column 0 is q·k (each query's own positive key), columns 1.. are q·queueᵀ, all / T.

    Args:
      q: queries [B, D], l2-normalised by the caller.
      k: positive keys [B, D], l2-normalised (and stop-gradient) by the caller.
      queue: negative keys [K, D], l2-normalised.
      temperature: softmax temperature T.
    """
    l_pos = tf.reduce_sum(q * k, -1, keepdims=True)
    l_neg = tf.matmul(q, queue, transpose_b=True)
    return tf.concat([l_pos, l_neg], 1) / temperature


def info_nce(q: tf.Tensor, k: tf.Tensor, queue: tf.Tensor, temperature: float) -> tf.Tensor:
    """Mean over the queries of −log softmax(`info_nce_logits`)[0]: the positive key against the queue."""
    logits = info_nce_logits(q, k, queue, temperature)
    labels = tf.zeros([tf.shape(q)[0]], tf.int32)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
