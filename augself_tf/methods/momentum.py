"""The momentum (EMA) target network of MoCo's keys and BYOL's targets, and the one owner of its updates.

The target network is never touched by the optimizer: after every step it moves towards the online network,
    target ← m·target + (1 − m)·online,
for every weight the online network trains. Batch-norm moving statistics are not averaged: each network
keeps the statistics of its own forward passes, as in MoCo and BYOL. `MomentumEncoder` is the network;
`MomentumMethod`, the base of every method with one, creates it, keeps it out of the optimizer and updates it
after every step with the m its subclass schedules (`momentum_at`: MoCo a constant, BYOL a cosine schedule).
"""

from __future__ import annotations

import math
from typing import ClassVar

import keras
import tensorflow as tf

from augself_tf.methods.augself_model import AugSelfModel, Forward
from augself_tf.models.resnet import mlp
from augself_tf.objectives.conditioning import Conditioning, condition_head, head_input


class MomentumEncoder(keras.layers.Layer):
    """A clone of the online backbone and an MLP projector shaped like the online one, updated by EMA.

    Args:
      backbone: the online backbone; cloned (same architecture, fresh weights until `initialize`).
      projector_dims: output sizes of the projector's linear layers (`mlp`'s `dims`), as the online projector.
      synchronized_bn: cross-replica batch statistics in the projector.
      name: prefix of the layer names ("key" → `key_encoder`, `key_projector`).
      conditioning: the online projector's conditioning (CASSLE): the target projector then has its own EMA
        copy of the ω-embedding MLP, as the reference deep-copies the conditioned projector; None: plain.
      projector: the target projector itself, for an online projector that is not one MLP (LooC's head per
        space); ``projector_dims`` and ``conditioning`` are then unused.

    The online networks are passed to `initialize` and `update` rather than stored here: as attributes of
    this layer they would be tracked as its own weights, and so excluded from the optimizer.
    """

    def __init__(self, backbone: keras.Model, projector_dims: list[int] | None, *, synchronized_bn: bool, name: str,
                 conditioning: Conditioning | None = None, projector: keras.layers.Layer | None = None) -> None:
        super().__init__(name=f"{name}_encoder")
        self.backbone = keras.models.clone_model(backbone)
        if projector is None:
            projector = condition_head(mlp(projector_dims, synchronized_bn=synchronized_bn, name=f"{name}_projector"),
                                       conditioning, synchronized_bn=synchronized_bn)
        self.projector = projector

    def encode(self, images: tf.Tensor, training: bool,
               description: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """(backbone features, projection) of `images`; callers stop the gradient where they need to.

        `description`: the views' descriptions [B, n] when the projector is conditioned (`AugSelfModel.describe`).
        """
        features = self.backbone(images, training=training)
        return features, self.projector(head_input(features, description), training=training)

    def initialize(self, online_backbone: keras.Model, online_projector: keras.Layer, feature_dim: int) -> None:
        """Creates the projector's variables and copies every online weight into the target (m = 0);
        `feature_dim` is the size of the projector's input (features and description when conditioned)."""
        self.projector(tf.zeros([2, feature_dim]))
        if not self.backbone.built:  # a clone of a functional backbone is built (a ViT refuses 8 px under its patch)
            self.backbone(tf.zeros([2, 8, 8, 3]))
        for online, target in self._pairs(online_backbone, online_projector):
            target.assign(online)
        self.built = True

    def update(self, online_backbone: keras.Model, online_projector: keras.Layer, momentum: float | tf.Tensor) -> None:
        """target ← m·target + (1 − m)·online for every trainable online weight; call after the optimizer step."""
        # 1 − m is formed before the cast so that a Python float m gives the double-precision difference.
        keep, take = momentum, 1.0 - momentum
        for online, target in self._pairs(online_backbone, online_projector):
            if online.trainable:
                target.assign(tf.cast(keep, target.dtype) * target + tf.cast(take, target.dtype) * online)

    def _pairs(self, online_backbone: keras.Model, online_projector: keras.Layer) -> list[tuple]:
        online = online_backbone.weights + online_projector.weights
        target = self.backbone.weights + self.projector.weights
        return list(zip(online, target, strict=True))


def cosine_tau(step: tf.Tensor, total_steps: int | None, base: float) -> tf.Tensor:
    """BYOL's schedule τ_k = 1 − (1 − base)(cos(πk/K) + 1)/2; constant `base` when K is unknown (None or 0)."""
    if not total_steps:
        return tf.constant(base, tf.float32)
    k = tf.cast(step, tf.float32)
    return 1.0 - (1.0 - base) * (tf.cos(math.pi * k / float(total_steps)) + 1.0) / 2.0


class MomentumMethod(AugSelfModel):
    """A method with a momentum target of its backbone + projector: the one place that updates it.

    A subclass calls `create_momentum_encoder` in `__init__` (after creating ``self.projector``) and
    `initialize_momentum_encoder` in `build_heads` (after building it), encodes with `encode_momentum`, and
    returns the m of each update from `momentum_at`. This class returns the target's variables from
    `target_variables` (so the optimizer never sees them) and updates the target in `post_step`; a subclass
    that does more after a step (MoCo's queue) calls ``super().post_step`` first.
    """

    #: Names the target: its attribute ``<prefix>_encoder``, its layers, and its checkpoint keys
    #: ``model/<prefix>_backbone/...`` and ``model/<prefix>_projector/...`` (those of runs saved before it).
    momentum_prefix: ClassVar[str] = "target"

    def create_momentum_encoder(self, projector_dims: list[int] | None = None, *,
                                projector: keras.layers.Layer | None = None) -> MomentumEncoder:
        """The target: a clone of ``self.backbone`` and a projector of `projector_dims` shaped like the online one
        (with its own ω-MLP when conditioned), or the given target ``projector`` (a layer shaped like
        ``self.projector``), kept as ``self.<prefix>_encoder``."""
        prefix = self.momentum_prefix
        encoder = MomentumEncoder(self.backbone, projector_dims, synchronized_bn=self.synchronized_bn, name=prefix,
                                  conditioning=self.conditioning, projector=projector)
        setattr(self, f"{prefix}_encoder", encoder)
        # The checkpoint keys model/<prefix>_backbone/... of runs saved before the shared encoder: they restore.
        setattr(self, f"{prefix}_backbone", encoder.backbone)
        setattr(self, f"{prefix}_projector", encoder.projector)
        return encoder

    @property
    def momentum_encoder(self) -> MomentumEncoder:
        """The target network (``self.<prefix>_encoder``)."""
        return getattr(self, f"{self.momentum_prefix}_encoder")

    def initialize_momentum_encoder(self, feature_dim: int) -> None:
        """Builds the target and copies the online backbone and ``self.projector`` into it; `feature_dim` is the
        projector's input size (`head_input_dim`)."""
        self.momentum_encoder.initialize(self.backbone, self.projector, feature_dim)

    def encode_momentum(self, images: tf.Tensor, omega: dict, training: bool,
                        other: dict | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """(target backbone features, target projection) of `images`, conditioned on their ω when the method is
        (``other``: the ω of the other view of each pair, for relative descriptors)."""
        return self.momentum_encoder.encode(images, training, self.describe(omega, other))

    def momentum_at(self, step: tf.Tensor) -> float | tf.Tensor:
        """m of the update after the 0-based step `step` (float32). A Python float keeps 1 − m in double
        precision (`MomentumEncoder.update`)."""
        raise NotImplementedError(f"{type(self).__name__} must say which momentum each update uses (momentum_at)")

    def current_momentum(self) -> float | tf.Tensor:
        """m of the update after the step just taken (call after `optimizer.apply`, which counts the step)."""
        return self.momentum_at(tf.cast(self.optimizer.iterations, tf.float32) - 1.0)

    def target_variables(self) -> list[tf.Variable]:
        return self.momentum_encoder.trainable_variables

    def post_step(self, batch: dict, forward: Forward) -> None:
        self.momentum_encoder.update(self.backbone, self.projector, self.current_momentum())
