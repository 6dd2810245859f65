"""Conditioned projectors (CASSLE: Przewięźlikowski et al., "Augmentation-aware self-supervised learning with
conditioned projector"): every view's projector reads its backbone features f and an embedding of the view's own
augmentation description d.

The description d of a view is the concatenation of the chosen descriptors (``registry.DESCRIPTORS``, each
declared beside the ω it reads), sorted by name as the reference code (mprzewie/AugSelf, ``trainers_cond``)
concatenates them; with ``--condition_descriptor=relative`` each descriptor is the view's relative to the other
view of its pair (``Descriptor.relative``: the reference's ``extract_diff``). An MLP e (the reference's
``aug_processor``, or its hypernetwork: ``depth`` linear layers, ``width`` units in the hidden ones, BN + ReLU
between them, BN at its end) embeds d. How e(d) enters the method's head g is the condition kind
(``--condition_kind``, one `ConditionedHead` subclass each in `CONDITION_KINDS`):

  concat    g([f, e(d)]), e's output ``width`` wide                         the reference's proj-cat
  add       g(f + e(d)), e's output as wide as f                            proj-add
  mul       g(f ⊙ e(d)), likewise                                           proj-mul
  hypernet  e(d) is, per example, every weight and bias of an MLP with g's  hn
            depth and output size (hidden layers as wide as f), which replaces g

With ``--condition_predictor`` SimSiam's predictor h reads [z, e_h(d)] too, e_h its own MLP (concat whatever
the kind: the reference's ``AugSSPredictor`` offers proj-cat only). Momentum targets (MoCo's keys, BYOL's
targets) carry their own EMA copy of e, as the reference deep-copies the whole conditioned projector. The
backbone is unchanged, so the exported SavedModel is the backbone alone.

How the description travels: the model hands its method the head input [f, d] (``head_input``) in place of
f, and the head wrapped by a ``ConditionedHead`` splits d off and conditions g on it. A method thus only
wraps its projector (``AugSelfModel.conditioned``); its loss code is unchanged.

Adding a kind: a ``ConditionedHead`` subclass (``build_conditioned``, ``call_conditioned``,
``compute_output_shape``) and its line in ``CONDITION_KINDS``; the flag's choices and help follow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import keras
import tensorflow as tf

from augself_tf.augment import registry
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.models.resnet import mlp
from augself_tf.registries import Registry

#: The reference's ImageNet-100 runs (README / paper): --aug-nn-width 64 --aug-nn-depth 6.
DEFAULT_WIDTH = 64
DEFAULT_DEPTH = 6
#: ``--condition_descriptor``: each view's own descriptors, or each relative to the other view's.
DESCRIPTOR_MODES = ("absolute", "relative")


@dataclasses.dataclass(frozen=True)
class Conditioning:
    """Which descriptors a view's description holds, the MLP that embeds it and how the projector reads it.

    Attributes:
      names: descriptor names (keys of ``registry.DESCRIPTORS``), sorted.
      width: units of the embedding MLP's hidden layers (its output size too for ``concat``).
      depth: linear layers of the embedding MLP.
      kind: how the embedding enters the projector (a key of `CONDITION_KINDS`).
      descriptor: ``absolute`` (the view's own ω) or ``relative`` (relative to the other view's).
      predictor: whether SimSiam's predictor is conditioned too.
    """

    names: tuple[str, ...]
    width: int = DEFAULT_WIDTH
    depth: int = DEFAULT_DEPTH
    kind: str = "concat"
    descriptor: str = "absolute"
    predictor: bool = False

    @classmethod
    def create(cls, names: tuple[str, ...] | list[str], width: int = DEFAULT_WIDTH, depth: int = DEFAULT_DEPTH, *,
               kind: str = "concat", descriptor: str = "absolute", predictor: bool = False) -> Conditioning | None:
        """The conditioning for ``names`` (None when empty: no conditioning at all).

        Raises:
          ValueError: an unknown descriptor, kind or descriptor mode, a width or depth below 1, or a kind,
            relative descriptors or a conditioned predictor asked for without descriptors.
        """
        unknown = [n for n in names if n not in registry.DESCRIPTORS]
        if unknown:
            raise ValueError(f"unknown descriptor {unknown[0]!r} for --condition; choose from "
                             f"{', '.join(registry.CONDITION_CHOICES)}")
        if kind not in CONDITION_KINDS:
            raise ValueError(f"unknown --condition_kind {kind!r}; choose from {', '.join(CONDITION_KINDS)}")
        if descriptor not in DESCRIPTOR_MODES:
            raise ValueError(f"unknown --condition_descriptor {descriptor!r}; choose from "
                             f"{', '.join(DESCRIPTOR_MODES)}")
        if not names:
            # Without descriptors there is nothing to condition on: a flag that says how would silently do nothing.
            asked = [flag for flag, on in (("--condition_kind=" + kind, kind != "concat"),
                                           ("--condition_descriptor=" + descriptor, descriptor != "absolute"),
                                           ("--condition_predictor", predictor)) if on]
            if asked:
                raise ValueError(f"{asked[0]} needs --condition (the descriptors each view's projector reads)")
            return None
        if width < 1 or depth < 1:
            raise ValueError(f"the ω-embedding MLP needs width and depth >= 1, got {width} and {depth}")
        return cls(tuple(sorted(set(names))), int(width), int(depth), kind, descriptor, bool(predictor))

    @property
    def size(self) -> int:
        """Size of one view's description."""
        return sum(registry.DESCRIPTORS[n].dim for n in self.names)

    def describe(self, omega: Mapping[str, tf.Tensor], config: AugmentConfig,
                 other: Mapping[str, tf.Tensor] | None = None) -> tf.Tensor:
        """The description [B, size] of a batch of views from their ω (entries [B, k]); ``other``: the ω of the
        other view of each pair, which relative descriptors need.

        Raises:
          ValueError: relative descriptors without ``other``.
        """
        if self.descriptor == "relative" and other is None:
            raise ValueError("relative descriptors (--condition_descriptor=relative) need the other view's ω")
        parts = []
        for name in self.names:
            descriptor = registry.DESCRIPTORS[name]
            if self.descriptor == "relative":
                part = descriptor.relative(omega, other, config)
            else:
                part = tf.cast(descriptor.describe(omega, config), tf.float32)
            parts.append(tf.ensure_shape(part, [None, descriptor.dim]))
        return tf.concat(parts, axis=-1)


def head_input(features: tf.Tensor, description: tf.Tensor | None) -> tf.Tensor:
    """[f, d]: what a conditioned head reads (``features`` itself when there is no description)."""
    if description is None:
        return features
    return tf.concat([features, tf.cast(description, features.dtype)], axis=-1)


class ConditionedHead(keras.layers.Layer):
    """A method's head conditioned on the view's description: reads the head input [f, d], splits d off and
    computes the kind's g(f, e(d)). The base of every kind in `CONDITION_KINDS`.

    Args:
      head: the method's projector (or classifier, or SimSiam's predictor): an `mlp` or a single Linear.
      conditioning: the descriptors and the embedding MLP's shape.
      synchronized_bn: cross-replica batch statistics in the embedding MLP (the reference uses SyncBN).
    """

    #: The reference's name of the kind (its --aug-inj-type / --aug-treatment) and a one-line summary.
    reference_name: ClassVar[str] = ""
    help_line: ClassVar[str] = ""

    def __init__(self, head: keras.layers.Layer, conditioning: Conditioning, *, synchronized_bn: bool) -> None:
        super().__init__(name=f"conditioned_{head.name}")
        self.conditioning = conditioning
        self.description_size = conditioning.size
        self.synchronized_bn = synchronized_bn
        self.head_name = head.name

    def omega_mlp(self, units: int) -> keras.Sequential:
        """The embedding MLP: the reference's load_mlp(n, width, units, num_layers=depth) — Linear–BN–ReLU blocks
        and a last Linear–BN (affine), linear layers without bias before a BN, PyTorch's default initialisation."""
        c = self.conditioning
        return mlp([c.width] * (c.depth - 1) + [units], last_bn=True, synchronized_bn=self.synchronized_bn,
                   name=f"{self.head_name}_omega")

    def build(self, input_shape) -> None:
        features = int(input_shape[-1]) - self.description_size
        if features < 1:
            raise ValueError(f"{self.name}: input of size {input_shape[-1]} holds no features besides the "
                             f"description of size {self.description_size}")
        self.build_conditioned(features)
        self.built = True

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        features = inputs[..., : -self.description_size]
        description = inputs[..., -self.description_size :]
        return self.call_conditioned(features, description, training)

    def features_of(self, input_shape) -> int:
        """The size of f in a head input of ``input_shape``."""
        return int(input_shape[-1]) - self.description_size

    def build_conditioned(self, features: int) -> None:
        """Creates the variables for features f of size ``features`` and descriptions of `description_size`."""
        raise NotImplementedError

    def call_conditioned(self, features: tf.Tensor, description: tf.Tensor, training: bool | None) -> tf.Tensor:
        """The head's output for features [B, F] and descriptions [B, n]."""
        raise NotImplementedError


class ConcatHead(ConditionedHead):
    """g([f, e(d)]), e(d) of size ``width``."""

    reference_name = "proj-cat"
    help_line = "[f, e(d)] into the projector"

    def __init__(self, head: keras.layers.Layer, conditioning: Conditioning, *, synchronized_bn: bool) -> None:
        super().__init__(head, conditioning, synchronized_bn=synchronized_bn)
        self.embedding = self.omega_mlp(conditioning.width)
        self.head = head

    def build_conditioned(self, features: int) -> None:
        self.embedding.build((None, self.description_size))
        self.head.build((None, features + self.conditioning.width))

    def call_conditioned(self, features, description, training):
        embedded = self.embedding(description, training=training)
        return self.head(tf.concat([features, tf.cast(embedded, features.dtype)], axis=-1), training=training)

    def compute_output_shape(self, input_shape):
        return self.head.compute_output_shape((*input_shape[:-1], self.features_of(input_shape)
                                               + self.conditioning.width))


class _ElementwiseHead(ConditionedHead):
    """g(f ∘ e(d)) for an elementwise ∘; e's output is as wide as f, so e is made when f's size is known."""

    def __init__(self, head: keras.layers.Layer, conditioning: Conditioning, *, synchronized_bn: bool) -> None:
        super().__init__(head, conditioning, synchronized_bn=synchronized_bn)
        self.head = head

    @staticmethod
    def combine(features: tf.Tensor, embedded: tf.Tensor) -> tf.Tensor:
        """f ∘ e(d)."""
        raise NotImplementedError

    def build_conditioned(self, features: int) -> None:
        self.embedding = self.omega_mlp(features)
        self.embedding.build((None, self.description_size))
        self.head.build((None, features))

    def call_conditioned(self, features, description, training):
        embedded = tf.cast(self.embedding(description, training=training), features.dtype)
        return self.head(self.combine(features, embedded), training=training)

    def compute_output_shape(self, input_shape):
        return self.head.compute_output_shape((*input_shape[:-1], self.features_of(input_shape)))


class AddHead(_ElementwiseHead):
    """g(f + e(d))."""

    reference_name = "proj-add"
    help_line = "f + e(d) into the projector, e(d) as wide as f"

    @staticmethod
    def combine(features, embedded):
        return features + embedded


class MulHead(_ElementwiseHead):
    """g(f ⊙ e(d))."""

    reference_name = "proj-mul"
    help_line = "f ⊙ e(d) into the projector, e(d) as wide as f"

    @staticmethod
    def combine(features, embedded):
        return features * embedded


def linear_units(head: keras.layers.Layer) -> list[int]:
    """Output sizes of the linear layers of ``head`` (an `mlp`, or a single Linear), in order."""
    layers = head.layers if isinstance(head, keras.Sequential) else [head]
    units = [int(layer.units) for layer in layers if isinstance(layer, keras.layers.Dense)]
    if not units:
        raise ValueError(f"--condition_kind=hypernet: head {head.name!r} has no linear layer to generate")
    return units


class HypernetHead(ConditionedHead):
    """e(d) generates, per example, every weight and bias of an MLP that replaces g (g's own weights are unused).

    As the reference's hypernetwork (``cond_utils.AugProjector``, ``--aug-treatment hn``): the generated MLP has
    g's number of linear layers and g's output size, its hidden layers as wide as f; layer l maps x to
    x·W_l + b_l with W_l the next in·out outputs of e(d) read row-major as [in, out] and b_l the next out, and
    a ReLU between layers (its default ``--aug-hn-type mlp``: no BN in the generated MLP, none at its end).
    """

    reference_name = "hn"
    help_line = "e(d) is every weight and bias of the projector, per example"

    def __init__(self, head: keras.layers.Layer, conditioning: Conditioning, *, synchronized_bn: bool) -> None:
        super().__init__(head, conditioning, synchronized_bn=synchronized_bn)
        self.layer_units = linear_units(head)  # the head itself is not kept: its weights would never train

    def build_conditioned(self, features: int) -> None:
        ins = [features] * len(self.layer_units)
        outs = [features] * (len(self.layer_units) - 1) + [self.layer_units[-1]]
        self.shapes = list(zip(ins, outs, strict=True))
        self.embedding = self.omega_mlp(sum(i * o + o for i, o in self.shapes))
        self.embedding.build((None, self.description_size))

    def call_conditioned(self, features, description, training):
        generated = tf.cast(self.embedding(description, training=training), features.dtype)
        x, start = features, 0
        for index, (n_in, n_out) in enumerate(self.shapes):
            weight = tf.reshape(generated[:, start : start + n_in * n_out], [-1, n_in, n_out])
            bias = generated[:, start + n_in * n_out : start + n_in * n_out + n_out]
            start += n_in * n_out + n_out
            x = tf.einsum("bi,bio->bo", x, weight) + bias
            if index < len(self.shapes) - 1:
                x = tf.nn.relu(x)
        return x

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.layer_units[-1])


#: ``--condition_kind``: name -> its ConditionedHead (adding a kind = a subclass above and its line here).
CONDITION_KINDS: Registry[type[ConditionedHead]] = Registry("condition kind", {
    "concat": ConcatHead,
    "add": AddHead,
    "mul": MulHead,
    "hypernet": HypernetHead,
})


def kinds_help() -> str:
    """The kinds for a flag's help: ``concat ([f, e(d)] into the projector; CASSLE's proj-cat), ...``."""
    return ", ".join(f"{name} ({cls.help_line}; CASSLE's {cls.reference_name})"
                     for name, cls in CONDITION_KINDS.items())


def condition_head(head: keras.layers.Layer, conditioning: Conditioning | None, *, synchronized_bn: bool,
                   kind: str | None = None) -> keras.layers.Layer:
    """``head`` wrapped in the ``ConditionedHead`` of ``kind`` (default: the conditioning's), or ``head`` itself
    when ``conditioning`` is None."""
    if conditioning is None:
        return head
    return CONDITION_KINDS[kind or conditioning.kind](head, conditioning, synchronized_bn=synchronized_bn)
