"""Conditioned projectors (CASSLE: Przewięźlikowski et al., "Augmentation-aware self-supervised learning with
conditioned projector"): every view's projector input is its backbone features concatenated with an
embedding of the view's own augmentation description.

The description d of a view is the concatenation of the chosen descriptors (``registry.DESCRIPTORS``, each
declared beside the ω it reads), sorted by name as the reference code (mprzewie/AugSelf, ``trainers_cond``)
concatenates them. An MLP e (the reference's ``aug_processor``: ``depth`` linear layers of ``width`` units,
BN + ReLU between them, BN at its end) embeds d, and the method's head g reads [f, e(d)]. Momentum targets
(MoCo's keys, BYOL's targets) carry their own EMA copy of e, as the reference deep-copies the whole
conditioned projector. The backbone is unchanged, so the exported SavedModel is the backbone alone.

How the description travels: the model hands its method the head input [f, d] (``head_input``) in place of
f, and the head wrapped by ``ConditionedHead`` splits d off, embeds it and concatenates. A method thus only
wraps its projector (``AugSelfModel.conditioned``); its loss code is unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import keras
import tensorflow as tf

from augself_tf.augment import registry
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.models.resnet import mlp

#: The reference's ImageNet-100 runs (README / paper): --aug-nn-width 64 --aug-nn-depth 6.
DEFAULT_WIDTH = 64
DEFAULT_DEPTH = 6


@dataclasses.dataclass(frozen=True)
class Conditioning:
    """Which descriptors a view's description holds, and the shape of the MLP that embeds it.

    Attributes:
      names: descriptor names (keys of ``registry.DESCRIPTORS``), sorted.
      width: units of every layer of the embedding MLP (its output size too).
      depth: linear layers of the embedding MLP.
    """

    names: tuple[str, ...]
    width: int = DEFAULT_WIDTH
    depth: int = DEFAULT_DEPTH

    @classmethod
    def create(cls, names: tuple[str, ...] | list[str], width: int = DEFAULT_WIDTH,
               depth: int = DEFAULT_DEPTH) -> Conditioning | None:
        """The conditioning for ``names`` (None when empty: no conditioning at all).

        Raises:
          ValueError: an unknown descriptor, or a width or depth below 1.
        """
        unknown = [n for n in names if n not in registry.DESCRIPTORS]
        if unknown:
            raise ValueError(f"unknown descriptor {unknown[0]!r} for --condition; choose from "
                             f"{', '.join(registry.CONDITION_CHOICES)}")
        if not names:
            return None
        if width < 1 or depth < 1:
            raise ValueError(f"the ω-embedding MLP needs width and depth >= 1, got {width} and {depth}")
        return cls(tuple(sorted(set(names))), int(width), int(depth))

    @property
    def size(self) -> int:
        """Size of one view's description."""
        return sum(registry.DESCRIPTORS[n].dim for n in self.names)

    def describe(self, omega: Mapping[str, tf.Tensor], config: AugmentConfig) -> tf.Tensor:
        """The description [B, size] of a batch of views from their ω (entries [B, k])."""
        parts = []
        for name in self.names:
            descriptor = registry.DESCRIPTORS[name]
            part = tf.cast(descriptor.describe(omega, config), tf.float32)
            parts.append(tf.ensure_shape(part, [None, descriptor.dim]))
        return tf.concat(parts, axis=-1)


def head_input(features: tf.Tensor, description: tf.Tensor | None) -> tf.Tensor:
    """[f, d]: what a conditioned head reads (``features`` itself when there is no description)."""
    if description is None:
        return features
    return tf.concat([features, tf.cast(description, features.dtype)], axis=-1)


class ConditionedHead(keras.layers.Layer):
    """g([f, e(d)]) from the head input [f, d]: a method's head fed the features and the ω-embedding.

    Args:
      head: the method's projector (or classifier), built here on inputs of size d_f + width.
      conditioning: the descriptors and the embedding MLP's shape.
      synchronized_bn: cross-replica batch statistics in the embedding MLP (the reference uses SyncBN).
    """

    def __init__(self, head: keras.layers.Layer, conditioning: Conditioning, *, synchronized_bn: bool) -> None:
        super().__init__(name=f"conditioned_{head.name}")
        self.conditioning = conditioning
        self.description_size = conditioning.size
        # The reference's load_mlp(n_in, width, width, num_layers=depth): Linear–BN–ReLU blocks and a last
        # Linear–BN (affine), linear layers without bias before a BN, PyTorch's default initialisation.
        self.embedding = mlp([conditioning.width] * conditioning.depth, last_bn=True,
                             synchronized_bn=synchronized_bn, name=f"{head.name}_omega")
        self.head = head

    def build(self, input_shape) -> None:
        features = int(input_shape[-1]) - self.description_size
        if features < 1:
            raise ValueError(f"{self.name}: input of size {input_shape[-1]} holds no features besides the "
                             f"description of size {self.description_size}")
        self.embedding.build((None, self.description_size))
        self.head.build((None, features + self.conditioning.width))
        self.built = True

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        features = inputs[..., : -self.description_size]
        embedded = self.embedding(inputs[..., -self.description_size :], training=training)
        return self.head(tf.concat([features, tf.cast(embedded, features.dtype)], axis=-1), training=training)

    def compute_output_shape(self, input_shape):
        return self.head.compute_output_shape((*input_shape[:-1], int(input_shape[-1]) - self.description_size
                                               + self.conditioning.width))


def condition_head(head: keras.layers.Layer, conditioning: Conditioning | None, *,
                   synchronized_bn: bool) -> keras.layers.Layer:
    """``head`` wrapped in a ``ConditionedHead``, or ``head`` itself when ``conditioning`` is None."""
    if conditioning is None:
        return head
    return ConditionedHead(head, conditioning, synchronized_bn=synchronized_bn)
