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

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.losses.byol_regression import byol_regression
from augself_tf.methods.momentum import MomentumMethod, cosine_tau
from augself_tf.models.resnet import mlp


class BYOL(MomentumMethod):
    """Projector and predictor d→4096→256 (BN+ReLU hidden, no BN at the end), EMA target network.

    Args:
      projector_hidden / projector_dim: 4096 / 256 (BYOL's and the paper's).
      predictor_hidden: 4096; the predictor maps projector_dim → predictor_hidden → projector_dim.
      target_momentum: τ_base = 0.996, raised to 1 on a cosine schedule over `total_steps`.
      total_steps: K of the schedule (the training loop passes it; None keeps τ = τ_base).
    """

    method_name = "byol"
    momentum_prefix = "target"

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
        self.create_momentum_encoder([o.projector_hidden, o.projector_dim])

    def build_heads(self, feature_dim: int) -> None:
        self.predictor(self.projector(tf.zeros([2, feature_dim])))
        self.initialize_momentum_encoder(feature_dim)

    def momentum_at(self, step: tf.Tensor) -> tf.Tensor:
        """τ on the cosine schedule from `target_momentum` to 1 over `total_steps`."""
        return cosine_tau(step, self.total_steps, self.target_momentum)

    def current_tau(self) -> tf.Tensor:
        """τ for the update after the step just taken (call after `optimizer.apply`)."""
        return self.current_momentum()

    def method_loss(self, f1, f2, batch, training):
        p1 = self.predictor(self.projector(f1, training=training), training=training)
        p2 = self.predictor(self.projector(f2, training=training), training=training)
        _, t1 = self.encode_momentum(batch["view1"], batch["omega1"], training, batch["omega2"])
        _, t2 = self.encode_momentum(batch["view2"], batch["omega2"], training, batch["omega1"])
        loss = byol_regression(p1, t2) + byol_regression(p2, t1)
        if getattr(self, "optimizer", None) is None:  # called outside training (tests, evaluation)
            return loss, {}
        # The τ the update after this step will use (iterations is incremented by the optimizer).
        tau = self.momentum_at(tf.cast(self.optimizer.iterations, tf.float32))
        return loss, {"byol/tau": tau}
