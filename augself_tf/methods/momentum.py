"""The momentum (EMA) copy of an online backbone + projector that MoCo's keys and BYOL's targets come from.

The target network is never touched by the optimizer: after every step it moves towards the online network,
    target ← m·target + (1 − m)·online,
for every weight the online network trains. Batch-norm moving statistics are not averaged: each network
keeps the statistics of its own forward passes, as in MoCo and BYOL. The method chooses m for each update
(MoCo: constant; BYOL: a cosine schedule).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from augself_tf.methods.conditioning import Conditioning, condition_head, head_input
from augself_tf.models.resnet import mlp


class MomentumEncoder(keras.layers.Layer):
    """A clone of the online backbone and an MLP projector shaped like the online one, updated by EMA.

    Args:
      backbone: the online backbone; cloned (same architecture, fresh weights until `initialize`).
      projector_dims: output sizes of the projector's linear layers (`mlp`'s `dims`), as the online projector.
      synchronized_bn: cross-replica batch statistics in the projector.
      name: prefix of the layer names ("key" → `key_encoder`, `key_projector`).
      conditioning: the online projector's conditioning (CASSLE): the target projector then has its own EMA
        copy of the ω-embedding MLP, as the reference deep-copies the conditioned projector; None: plain.

    The online networks are passed to `initialize` and `update` rather than stored here: as attributes of
    this layer they would be tracked as its own weights, and so excluded from the optimizer.
    """

    def __init__(self, backbone: keras.Model, projector_dims: list[int], *, synchronized_bn: bool, name: str,
                 conditioning: Conditioning | None = None) -> None:
        super().__init__(name=f"{name}_encoder")
        self.backbone = keras.models.clone_model(backbone)
        self.projector = condition_head(mlp(projector_dims, synchronized_bn=synchronized_bn, name=f"{name}_projector"),
                                        conditioning, synchronized_bn=synchronized_bn)

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
