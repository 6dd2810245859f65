"""MoCo v3 (Chen, Xie & He, ICCV 2021; facebookresearch/moco-v3 ``moco/builder.py``, ``main_moco.py``).

Both views go through the online backbone, projector and predictor (q1, q2) and through the momentum backbone
and projector (k1, k2); the loss is the symmetric `moco_v3_contrastive` (keys of the whole global batch, no
queue, T 0.2). The MLPs are MoCo v3's `_build_mlp`: linears without bias, BN + ReLU between them; for a ViT the
projector has 3 layers and the predictor 2, both ending in BN without affine; for a ResNet the projector has 2
layers ending in that BN and the predictor 2 with no BN at the end. The EMA covers the backbone and projector,
with m on MoCo v3's per-step cosine from ``moco_momentum`` to 1 (`cosine_tau`; constant with
``--nomomentum_cosine``). MoCo v3 moves the momentum
encoder at the START of each step with m(t/T), a no-op at step 0; the update after step t here uses m((t+1)/T),
the same sequence of encoders for every forward pass.

Views: BYOL's asymmetric recipe, as ``main_moco.py``: view 1 always blurred, view 2 blurred at p 0.1 and
solarized at p 0.2 (``--asymmetric_views``, on by default); the crop, flip, jitter and grayscale are the run's
(MoCo v3's crop minimum 0.08 is ``--crop_min_scale`` of the flagfiles). The AugSelf heads read the online
features of both views (on a ViT, the class tokens, as CASSLE's ``models.py``).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.augment.views import ViewPlan, ViewSpec
from augself_tf.flag_fields import option
from augself_tf.losses.moco_v3 import moco_v3_contrastive
from augself_tf.methods.momentum import MomentumMethod, cosine_tau
from augself_tf.models.resnet import mlp
from augself_tf.models.vit import is_vit_model

#: main_moco.py's augmentation1 / augmentation2: the probabilities that differ between the two views.
ASYMMETRIC_VIEWS = ViewPlan((ViewSpec(probabilities=(("blur_prob", 1.0), ("solarize_prob", 0.0))),
                             ViewSpec(probabilities=(("blur_prob", 0.1), ("solarize_prob", 0.2)))))


class MoCoV3(MomentumMethod):
    """MoCo v3 with projector d→hidden(→hidden)→dim and predictor dim→hidden→dim, EMA momentum encoder."""

    method_name = "mocov3"
    momentum_prefix = "key"  # its layers and checkpoint keys: key_encoder, key_backbone, key_projector

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_hidden: int = option(4096, "Projector hidden size")
        projector_dim: int = option(256, "Projector output size")
        predictor_hidden: int = option(4096, "Predictor hidden size")
        temperature: float = option(0.2, "Softmax temperature of the loss")
        moco_momentum: float = option(0.99, "MoCo v3 base EMA momentum m0, raised to 1 on a per-step cosine")
        momentum_cosine: bool = option(True, "MoCo v3: raise the EMA momentum to 1 on a per-step cosine (its "
                                             "--moco-m-cos; off: constant --moco_momentum, as CASSLE's MoCo v3)")
        asymmetric_views: bool = option(True, "BYOL's asymmetric views (MoCo v3's, DINO's global crops): view 1 "
                                              "always blurred, view 2 blurred at p 0.1 and solarized at p 0.2 (off: "
                                              "both take --blur_prob and --solarize_prob)")
        total_steps: int | None = None  # the training loop's

    @classmethod
    def view_plan(cls, options):
        """MoCo v3's asymmetric blur and solarization unless ``--noasymmetric_views``."""
        asymmetric = options.get("asymmetric_views")
        return ASYMMETRIC_VIEWS if asymmetric is None or asymmetric else super().view_plan(options)

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o, sync = self.method_options, self.synchronized_bn
        self.temperature = float(o.temperature)
        self.moco_momentum = float(o.moco_momentum)
        self.total_steps = o.total_steps if o.momentum_cosine else None  # cosine_tau is constant without it
        vit = is_vit_model(backbone)
        projector = [o.projector_hidden] * (2 if vit else 1) + [o.projector_dim]
        heads = {"synchronized_bn": sync, "bias": False, "last_bn_affine": False}
        self.projector = self.conditioned(mlp(projector, last_bn=True, name="projector", **heads))
        self.predictor = mlp([o.predictor_hidden, o.projector_dim], last_bn=vit, name="predictor", **heads)
        self.create_momentum_encoder(projector=self.conditioned(
            mlp(projector, last_bn=True, name="key_projector", **heads)))

    def build_heads(self, feature_dim: int) -> None:
        self.predictor(self.projector(tf.zeros([2, feature_dim])))
        self.initialize_momentum_encoder(feature_dim)

    def momentum_at(self, step: tf.Tensor) -> tf.Tensor:
        """m of MoCo v3's update before step ``step + 1``: 1 − ½(1 + cos(π(t+1)/T))(1 − m0)."""
        return cosine_tau(tf.cast(step, tf.float32) + 1.0, self.total_steps, self.moco_momentum)

    def method_loss(self, f1, f2, batch, training):
        q1 = self.predictor(self.projector(f1, training=training), training=training)
        q2 = self.predictor(self.projector(f2, training=training), training=training)
        _, k1 = self.encode_momentum(batch["view1"], batch["omega1"], training, batch["omega2"])
        _, k2 = self.encode_momentum(batch["view2"], batch["omega2"], training, batch["omega1"])
        loss = (moco_v3_contrastive(q1, k2, self.temperature) + moco_v3_contrastive(q2, k1, self.temperature))
        if getattr(self, "optimizer", None) is None:  # called outside training (tests, evaluation)
            return loss, {}
        return loss, {"mocov3/momentum": self.momentum_at(tf.cast(self.optimizer.iterations, tf.float32))}
