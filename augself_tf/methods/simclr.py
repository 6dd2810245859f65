"""SimCLR (Chen et al., 2020): projector d→512→128 and NT-Xent over the 2B projections of the global batch, T = 0.2.

The loss, its negatives gathered from every replica included, is `augself_tf.losses.nt_xent`.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.losses.nt_xent import nt_xent
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models.resnet import mlp


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
