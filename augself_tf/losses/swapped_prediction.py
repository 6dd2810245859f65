"""SwAV's loss (Caron et al., 2020): codes from Sinkhorn-Knopp, and the swapped prediction of each view's code.

The codes are those of the GLOBAL batch: Sinkhorn's normalising sums are all-reduced across replicas, so 2
replicas give the codes that one device gives on the concatenated batch (the paper's reference code sums per
GPU). The swapped-prediction loss is the SUM of its two terms, as the paper's reference code (SwAV's own code
averages them), which keeps the paper's balance against λ·L_AugSelf.
"""

from __future__ import annotations

import tensorflow as tf


def _all_reduce_sum(x: tf.Tensor) -> tf.Tensor:
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return x
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)


def sinkhorn(scores: tf.Tensor, epsilon: float = 0.05, iterations: int = 3) -> tf.Tensor:
    """SwAV's distributed Sinkhorn-Knopp: codes [b, K] for this replica's scores [b, K].

    Q = exp(scores/ε)ᵀ is scaled to total mass 1, then alternately every prototype row is scaled to mass 1/K
    (sums over the global batch, all-reduced) and every sample column to 1/B (B = global batch); the result
    is returned ×B so that each sample's code sums to 1 and, at convergence, each prototype's codes sum to
    B/K over the global batch. No gradient flows through the codes.
    """
    scores = tf.stop_gradient(tf.cast(scores, tf.float32))
    q = tf.transpose(tf.exp(scores / epsilon))  # [K, b]
    k = tf.cast(tf.shape(q)[0], tf.float32)
    b_global = _all_reduce_sum(tf.cast(tf.shape(q)[1], tf.float32))
    q /= _all_reduce_sum(tf.reduce_sum(q))
    for _ in range(iterations):
        q /= _all_reduce_sum(tf.reduce_sum(q, 1, keepdims=True))
        q /= k
        q /= tf.reduce_sum(q, 0, keepdims=True)
        q /= b_global
    return tf.transpose(q * b_global)


def swapped_prediction(s1: tf.Tensor, s2: tf.Tensor, q1: tf.Tensor, q2: tf.Tensor, temperature: float) -> tf.Tensor:
    """mean −Σ q1·log softmax(s2/τ) + mean −Σ q2·log softmax(s1/τ).

    Args:
      s1, s2: prototype scores [b, K] of the two views (gradient flows into them).
      q1, q2: their codes [b, K] (`sinkhorn`; constants).
      temperature: τ of the prediction softmax.
    """
    logp1 = tf.nn.log_softmax(tf.cast(s1, tf.float32) / temperature, -1)
    logp2 = tf.nn.log_softmax(tf.cast(s2, tf.float32) / temperature, -1)
    return tf.reduce_mean(-tf.reduce_sum(q1 * logp2, -1)) + tf.reduce_mean(-tf.reduce_sum(q2 * logp1, -1))
