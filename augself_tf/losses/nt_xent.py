"""SimCLR's loss (Chen et al., 2020): NT-Xent over the 2B projections of the global batch.

Negatives come from every replica: each replica gathers the projections of all replicas (in replica order)
as the columns of its similarity matrix and keeps its own 2b rows, so the mean of the per-replica losses is
exactly the single-device loss on the global batch. The gather (`augself_tf.losses.cross_replica.all_gather`,
no merge_call) has `all_gather`'s gradient: it all-reduces the upstream
gradient and slices this replica's part, so the column path sends each replica the gradient that the
other replicas' rows put on its projections. The 1/replicas scaling of the gradient is the train step's.
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.losses.cross_replica import all_gather


def nt_xent(z1: tf.Tensor, z2: tf.Tensor, temperature: float) -> tf.Tensor:
    """NT-Xent of this replica's 2b anchors against the 2B projections gathered from all replicas.

    Args:
      z1, z2: projections of the two views on this replica, [b, D] (need not be normalised).
      temperature: softmax temperature T.

    Returns:
      Mean over this replica's 2b anchors of −log softmax(sim/T)[positive], the anchor itself excluded from
      the denominator. Anchor order: rows z1 then z2; column order: all z1 (replica order) then all z2.
    """
    z1 = tf.math.l2_normalize(tf.cast(z1, tf.float32), -1)
    z2 = tf.math.l2_normalize(tf.cast(z2, tf.float32), -1)
    b = tf.shape(z1)[0]
    ctx = tf.distribute.get_replica_context()
    if ctx is not None and ctx.num_replicas_in_sync > 1:
        a1, a2 = all_gather(z1), all_gather(z2)
        offset = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * b
    else:
        a1, a2, offset = z1, z2, tf.constant(0, tf.int32)
    n = tf.shape(a1)[0]  # global B
    rows = tf.concat([z1, z2], 0)  # [2b, D]
    cols = tf.concat([a1, a2], 0)  # [2B, D]
    logits = tf.matmul(rows, cols, transpose_b=True) / temperature
    local = offset + tf.range(b)
    self_idx = tf.concat([local, n + local], 0)
    pos_idx = tf.concat([n + local, local], 0)
    logits -= 1e9 * tf.one_hot(self_idx, 2 * n, dtype=logits.dtype)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=pos_idx, logits=logits)
    return tf.reduce_mean(losses)
