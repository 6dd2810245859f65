"""SimSiam (Chen & He, 2021): predictor on one branch, stop-gradient on the other, symmetrised."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.losses.negative_cosine import negative_cosine, normalized_std
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models.resnet import mlp


class SimSiam(AugSelfModel):
    """Projector g (BN on its last layer) and predictor h (2048→512→2048, no BN at its end).

    With ``--condition_predictor`` (CASSLE's ``--ss-aug-inj-type proj-cat``) h reads [z, e_h(d)], d the description
    of the view z comes from (the reference's ``AugSSPredictor``), e_h trained at h's constant lr.

    Args:
      projector_layers: 2 for the STL10 setting, 3 for ImageNet100.
      projector_dim / predictor_hidden: 2048 / 512 as in the paper.
    """

    method_name = "simsiam"

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_layers: int = option(2, "SimSiam projector depth (paper: 2 on STL10, 3 on ImageNet100)")
        projector_dim: int = option(2048, "Projector output size")
        predictor_hidden: int = option(512, "Predictor hidden size")

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o, sync = self.method_options, self.synchronized_bn
        self.projector = self.conditioned(mlp([o.projector_dim] * o.projector_layers, last_bn=True,
                                              synchronized_bn=sync, name="projector"))
        self.predictor = self.conditioned_predictor(mlp([o.predictor_hidden, o.projector_dim], synchronized_bn=sync,
                                                        name="predictor"))

    def build_heads(self, feature_dim: int) -> None:
        x = tf.zeros([2, feature_dim])
        self.predictor(self.predictor_input(self.projector(x), x))

    def constant_lr_variables(self) -> list[tf.Variable]:
        return list(self.predictor.trainable_variables)

    def method_loss(self, f1, f2, batch, training):
        z1, z2 = self.projector(f1, training=training), self.projector(f2, training=training)
        p1 = self.predictor(self.predictor_input(z1, f1), training=training)
        p2 = self.predictor(self.predictor_input(z2, f2), training=training)
        loss = 0.5 * (negative_cosine(p1, z2) + negative_cosine(p2, z1))
        return loss, {"collapse/z_std": normalized_std(z1, z2)}  # read beside the kNN monitor: collapse or slow
