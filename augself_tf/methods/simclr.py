"""SimCLR (Chen et al., 2020): NT-Xent over the 2B projections of the global batch, T = 0.2.

Negatives come from every replica: each replica gathers the projections of all replicas (in replica order)
as the columns of its similarity matrix and keeps its own 2b rows, so the mean of the per-replica losses is
exactly the single-device loss on the global batch. `all_gather`'s gradient all-reduces the upstream
gradient and slices this replica's part, so the column path sends each replica the gradient that the
other replicas' rows put on its projections.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models.resnet import mlp


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
        a1, a2 = ctx.all_gather(z1, axis=0), ctx.all_gather(z2, axis=0)
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


class SimCLR(AugSelfModel):
    """Projector d→512→128 (BN+ReLU hidden, no BN at the end) and the cross-replica NT-Xent loss."""

    method_name = "simclr"

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_hidden: int = option(512, "Projector hidden size")
        projector_dim: int = option(128, "Projector output size")
        temperature: float = option(0.2, "Softmax temperature of the loss")

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o = self.method_options
        self.temperature = float(o.temperature)
        self.projector = self.conditioned(mlp([o.projector_hidden, o.projector_dim],
                                              synchronized_bn=self.synchronized_bn, name="projector"))

    def build_heads(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))

    def method_loss(self, f1, f2, batch, training):
        z1, z2 = self.projector(f1, training=training), self.projector(f2, training=training)
        return nt_xent(z1, z2, self.temperature), {}
