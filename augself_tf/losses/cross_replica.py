"""Cross-replica gathers and sums that need no merge_call, for the replica function GPUs and TPUs run compiled: the
global batch of NT-Xent's negatives, the keys MoCo and LooC enqueue, DINO's center. Functions of tensors, as every
loss here.

`ReplicaContext.all_gather` makes a merge_call on MirroredStrategy in TF 2.21 whether or not the strategy runs
without them (distribute_lib.py has no other branch), and a merge_call inside the XLA-compiled replica function
GPUs run raises ("merge_call called while defining a new graph"). `ReplicaContext.all_reduce` has a collective
form without merge_call, so the gather here is one all-reduce: each replica writes its tensor into its own
slot of zeros, and the sum over replicas is the concatenation, exactly (x + 0 = x).
"""

from __future__ import annotations

import tensorflow as tf


def all_gather(x: tf.Tensor) -> tf.Tensor:
    """Every replica's `x` [n, ...] concatenated along axis 0 in replica order: [R·n, ...] (`x` itself on one).

    Each replica's `x` must have the same shape. The gradient is `all_gather`'s: the upstream gradients summed over
    replicas (`all_reduce`'s gradient), then this replica's slot (the `tf.where` routes it back to `x`).
    """
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return x
    replicas = ctx.num_replicas_in_sync
    mine = tf.equal(tf.range(replicas), tf.cast(ctx.replica_id_in_sync_group, tf.int32))
    mine = tf.reshape(mine, [replicas] + [1] * x.shape.rank)
    # tf.where, not a one-hot product: a NaN or Inf in one replica's x stays in its own slot.
    slots = tf.where(mine, x[None], tf.zeros_like(x)[None])  # [R, n, ...], zeros but in this replica's slot
    total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, slots)
    inner = x.shape[1:]
    return tf.reshape(total, [-1, *inner] if inner.is_fully_defined() else tf.concat([[-1], tf.shape(x)[1:]], 0))


def all_reduce_sum(x: tf.Tensor) -> tf.Tensor:
    """The sum of every replica's `x` (`x` itself on one device), by `ReplicaContext.all_reduce`, whose collective
    form needs no merge_call (DINO's center: the teacher outputs' sum over the global batch)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return x
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)
