"""BYOL (Grill et al., 2020): online projector + predictor regress an EMA target network's projection.

Loss (exact scale): L = mean_i[2 − 2·cos(p1_i, sg(t2_i))] + mean_i[2 − 2·cos(p2_i, sg(t1_i))], i.e. the sum of
BYOL's two normalised-MSE terms. The paper's reference code uses (−cos1 − cos2)·2, which is this minus the
constant 4: same gradients, so the same balance against λ·L_AugSelf.

Target τ follows BYOL's cosine schedule τ_k = 1 − (1 − τ_base)(cos(πk/K) + 1)/2 with K = total_steps and k the
0-based index of the step just taken (`optimizer.iterations − 1` after the update): the first update uses
τ_base, the last one ≈ 1. (The reference code steps τ once per epoch; BYOL itself, and this file,
per step.) The AugSelf heads read the online features f(v1), f(v2).
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.methods.momentum import MomentumEncoder
from augself_tf.models.resnet import mlp


def byol_regression(p: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
    """Mean of 2 − 2·cos(p, stopgrad(t)) over the batch (= ‖p̂ − t̂‖² of unit vectors)."""
    p = tf.math.l2_normalize(tf.cast(p, tf.float32), -1)
    t = tf.math.l2_normalize(tf.stop_gradient(tf.cast(t, tf.float32)), -1)
    return tf.reduce_mean(2.0 - 2.0 * tf.reduce_sum(p * t, -1))


def cosine_tau(step: tf.Tensor, total_steps: int | None, base: float) -> tf.Tensor:
    """τ_k = 1 − (1 − base)(cos(πk/K) + 1)/2; constant `base` when K is unknown (None or 0)."""
    if not total_steps:
        return tf.constant(base, tf.float32)
    k = tf.cast(step, tf.float32)
    return 1.0 - (1.0 - base) * (tf.cos(math.pi * k / float(total_steps)) + 1.0) / 2.0


class BYOL(AugSelfModel):
    """Projector and predictor d→4096→256 (BN+ReLU hidden, no BN at the end), EMA target network.

    Args:
      projector_hidden / projector_dim: 4096 / 256 (BYOL's and the paper's).
      predictor_hidden: 4096; the predictor maps projector_dim → predictor_hidden → projector_dim.
      target_momentum: τ_base = 0.996, raised to 1 on a cosine schedule over `total_steps`.
      total_steps: K of the schedule (the training loop passes it; None keeps τ = τ_base).
    """

    method_name = "byol"

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_hidden: int = option(4096, "Projector hidden size")
        projector_dim: int = option(256, "Projector output size")
        predictor_hidden: int = option(4096, "Predictor hidden size")
        target_momentum: float = option(0.996, "BYOL base EMA τ, raised to 1 on a cosine schedule")
        total_steps: int | None = None  # the training loop's

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o, sync = self.method_options, self.synchronized_bn
        self.target_momentum = float(o.target_momentum)
        self.total_steps = o.total_steps
        self.projector = self.conditioned(mlp([o.projector_hidden, o.projector_dim], synchronized_bn=sync,
                                              name="projector"))
        self.predictor = mlp([o.predictor_hidden, o.projector_dim], synchronized_bn=sync, name="predictor")
        self.target_encoder = MomentumEncoder(backbone, [o.projector_hidden, o.projector_dim], synchronized_bn=sync,
                                              name="target", conditioning=self.conditioning)
        # Keeps the checkpoint keys model/target_backbone/... of runs saved before the shared encoder: they restore.
        self.target_backbone, self.target_projector = self.target_encoder.backbone, self.target_encoder.projector

    def build_heads(self, feature_dim: int) -> None:
        self.predictor(self.projector(tf.zeros([2, feature_dim])))
        self.target_encoder.initialize(self.backbone, self.projector, feature_dim)

    def target_variables(self) -> list[tf.Variable]:
        return self.target_encoder.trainable_variables

    def current_tau(self) -> tf.Tensor:
        """τ for the update after the step just taken (call after `optimizer.apply`)."""
        return cosine_tau(tf.cast(self.optimizer.iterations, tf.float32) - 1.0, self.total_steps,
                          self.target_momentum)

    def method_loss(self, f1, f2, batch, training):
        p1 = self.predictor(self.projector(f1, training=training), training=training)
        p2 = self.predictor(self.projector(f2, training=training), training=training)
        _, t1 = self.target_encoder.encode(batch["view1"], training, self.describe(batch["omega1"]))
        _, t2 = self.target_encoder.encode(batch["view2"], training, self.describe(batch["omega2"]))
        loss = byol_regression(p1, t2) + byol_regression(p2, t1)
        if getattr(self, "optimizer", None) is None:  # called outside training (tests, evaluation)
            return loss, {}
        # The τ the update after this step will use (iterations is incremented by the optimizer).
        tau = cosine_tau(tf.cast(self.optimizer.iterations, tf.float32), self.total_steps, self.target_momentum)
        return loss, {"byol/tau": tau}

    def post_step(self, batch, forward):
        self.target_encoder.update(self.backbone, self.projector, self.current_tau())
