"""MoCo v3's contrastive loss (Chen, Xie & He, ICCV 2021; ``moco/builder.py`` `contrastive_loss`): each query
against every key of the global batch, its own key the positive, no queue.

    L(q, k) = CE(q̂ · all_gather(k̂)ᵀ / T, arange(N) + N·rank) · 2T

with q̂, k̂ l2-normalised, N the per-replica batch and rank the replica's index in the gathered keys. The keys
carry no gradient (they come from the momentum encoder; ``concat_all_gather`` has none). Symmetrised by the
caller: L(q1, k2) + L(q2, k1).
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.losses.cross_replica import all_gather


def moco_v3_contrastive(q: tf.Tensor, k: tf.Tensor, temperature: float) -> tf.Tensor:
    """Mean over this replica's queries of the cross-entropy against all replicas' keys, times 2T.

    Args:
      q: this replica's queries [N, D] (predictor outputs; normalised here).
      k: this replica's keys [N, D] (momentum projections; normalised and gathered here, no gradient).
      temperature: T.
    """
    q = tf.math.l2_normalize(tf.cast(q, tf.float32), -1)
    k = tf.stop_gradient(tf.math.l2_normalize(tf.cast(k, tf.float32), -1))
    keys = all_gather(k)
    logits = tf.matmul(q, keys, transpose_b=True) / temperature
    n = tf.shape(q)[0]
    context = tf.distribute.get_replica_context()
    rank = 0 if context is None else tf.cast(context.replica_id_in_sync_group, tf.int32)
    labels = tf.range(n) + n * rank
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(ce) * (2.0 * temperature)
