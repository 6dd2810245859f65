"""The pieces every augmentation step is made of: step types, random-draw helpers and the generic ω targets.

A step (``Step``, or ``Augmentation`` when AugSelf can predict it) declares its draws, its stage (``HOST``: in
tf.data; ``DEVICE``: pixel-wise, may run batched in the training step), its probability knob
(``Probability``), its ω, the ω entries measured on its images (``Measurement``) and what a conditioned
projector reads of it (``Descriptor``). The geometric steps live in ``geometric.py``, the photometric ones in
``photometric.py``; ``registry.py`` orders and publishes them. The losses an entry names (one per kind of
target) are functions of tensors in ``augself_tf/losses/augself_heads.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import tensorflow as tf

from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.losses.augself_heads import tanh_mse

Omega = Mapping[str, tf.Tensor]
Params = dict[str, tf.Tensor]
# (seed int64 [2], shape int32 [3] of the image entering the step, config) -> the step's random draws
SampleFn = Callable[[tf.Tensor, tf.Tensor, AugmentConfig], Params]
# (image float32 [H,W,3], params, config) -> image: one image, in tf.data (the host stage)
TransformFn = Callable[[tf.Tensor, Params, AugmentConfig], tf.Tensor]
# (images float32 [B,S,S,3], params with a leading B axis, config) -> images: the device stage, batched
BatchTransformFn = Callable[[tf.Tensor, Params, AugmentConfig], tf.Tensor]
# (params, config) -> ω float32 [omega_dim] of one view
OmegaFn = Callable[[Params, AugmentConfig], tf.Tensor]
# (image entering the step, image leaving it, params, config) -> a statistic float32 [..., dim]; the images are
# [S,S,3] on the host path and [B,S,S,3] in the device stage, so the function must work on both
MeasureFn = Callable[[tf.Tensor, tf.Tensor, Params, AugmentConfig], tf.Tensor]
# (ω dict of a batch of views, entries [B, k], config) -> the views' description [B, dim]
DescribeFn = Callable[[Omega, AugmentConfig], tf.Tensor]
# (ω of a batch of views, ω of their other views, config) -> the views' relative description [B, dim]
RelateFn = Callable[[Omega, Omega, AugmentConfig], tf.Tensor]

HOST, DEVICE = "host", "device"


@dataclasses.dataclass(frozen=True)
class Probability:
    """A step's probability knob: its one declaration, an entry of ``AugmentConfig.probabilities`` and a
    train_main flag of the same name.

    Attributes:
      field: the knob's name, e.g. ``jitter_prob``.
      default: the probability when neither the config nor the flag gives one.
      when_predicted: the default instead when AugSelf predicts the step (rotation, solarize: 0.5), or None.
      help: the flag's help text.
    """

    field: str
    default: float
    help: str
    when_predicted: float | None = None

    def resolve(self, value: float | None, predicted: bool) -> float:
        """The probability for a flag value (None = not given) when the step is or is not predicted."""
        if value is not None:
            return float(value)
        return self.when_predicted if (predicted and self.when_predicted is not None) else self.default


@dataclasses.dataclass(frozen=True)
class Measurement:
    """An ω entry measured on the images rather than drawn: a statistic of a step's input and output.

    It is computed wherever the step runs: in ``augment_view`` (the host path), or in ``finish_views`` for a
    device step left to the training step, which adds it to the batch's ω. The two agree up to the uint8
    rounding of the device stage's input.

    Attributes:
      name: its key in ω (distinct from every step's name).
      dim: its size per view.
      measure: (image before, image after, params, config) -> [..., dim].
    """

    name: str
    dim: int
    measure: MeasureFn


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """What a conditioned projector (``--condition``, CASSLE) reads of one augmentation of a view.

    A function of the view's own ω (no image), declared by the step it describes; the model concatenates the
    chosen descriptors (sorted by name, as the reference code) into the view's description.

    Attributes:
      name: the ``--condition`` name.
      dim: its size per view.
      describe: (ω dict of a batch of views, config) -> [B, dim].
      relate: the relative description (``--condition_descriptor=relative``): (ω of the views, ω of the other
        views, config) -> [B, dim]; None: ``describe`` of the view minus ``describe`` of the other view.
    """

    name: str
    dim: int
    describe: DescribeFn
    relate: RelateFn | None = None

    def relative(self, omega: Omega, other: Omega, config: AugmentConfig) -> tf.Tensor:
        """The view's description relative to the other view of its pair, [B, dim]."""
        if self.relate is not None:
            return tf.cast(self.relate(omega, other, config), tf.float32)
        return (tf.cast(self.describe(omega, config), tf.float32)
                - tf.cast(self.describe(other, config), tf.float32))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One stage of the pipeline: draw its parameters, apply them, report its ω.

    Attributes:
      name: unique name (also the ω key and the ``--augself`` name when predicted).
      seed_slot: row of the per-view seed split that its draws use (fixed, independent of position).
      sample: (seed, image shape, config) -> params: every random draw of the step.
      transform: (image, params, config) -> image, on one image in tf.data.
      stage: ``HOST`` (in tf.data on each image: geometry) or ``DEVICE`` (pixel-wise photometric ops that
        ``finish_views`` may run batched inside the training step instead).
      transform_batch: the device stage's batched transform (required when ``stage == DEVICE``); it must
        compute what ``transform`` computes, example by example.
      probability: the step's probability knob, or None (always applied).
      omega: (params, config) -> ω [omega_dim], or None for a step without ω.
      omega_dim: size of ω per view (0 without ω).
      measurements: ω entries measured on the step's input and output images (``Measurement``).
      descriptors: what ``--condition`` can feed the projector about this step (``Descriptor``).
      commutes_with_device: a host step placed after device steps must commute with them (rotation by
        k·90° does, with pixel-wise ops and the symmetric blur), so the device mode can run it first.
    """

    name: str
    seed_slot: int
    sample: SampleFn
    transform: TransformFn
    stage: str = HOST
    transform_batch: BatchTransformFn | None = None
    probability: Probability | None = None
    omega: OmegaFn | None = None
    omega_dim: int = 0
    measurements: tuple[Measurement, ...] = ()
    descriptors: tuple[Descriptor, ...] = ()
    commutes_with_device: bool = False

    def apply(self, image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor | None]:
        """(image, ω or None): draw, transform one image, report ω (the host path of one step)."""
        params = self.sample(seed, tf.shape(image), config)
        omega = None if self.omega is None else self.omega(params, config)
        return self.transform(image, params, config), omega

    def measure(self, before: tf.Tensor, after: tf.Tensor, params: Params, config: AugmentConfig) -> dict:
        """{name: statistic} of every measurement of this step, from the images entering and leaving it."""
        return {m.name: tf.cast(m.measure(before, after, params, config), tf.float32) for m in self.measurements}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Augmentation(Step):
    """A pipeline step with parameters ω that AugSelf can predict.

    Attributes:
      head_dim: number of outputs of the AugSelf head φ for it.
      target: (omega1, omega2) -> AugSelf target ω_diff(1, 2); takes the full ω dicts (crop needs flip).
      loss: (pred [B, head_dim], target) -> per-example loss [B].
      metric: (pred, target) -> per-example error [B] for logging.
    """

    head_dim: int
    target: Callable[[Omega, Omega], tf.Tensor]
    loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
    metric: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]



# ----------------------------------------------------------------------------------------------- draws


def uniform(seed: tf.Tensor, shape: tuple[int, ...] = ()) -> tf.Tensor:
    """Stateless U[0, 1) float32 draws of ``shape``."""
    return tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)


def split_seed(seed: tf.Tensor, num: int) -> tf.Tensor:
    """``num`` independent stateless seeds [num, 2] from one."""
    return tf.random.experimental.stateless_split(seed, num=num)


def maybe(applied: tf.Tensor, fn: Callable[[], tf.Tensor], image: tf.Tensor) -> tf.Tensor:
    """``fn()`` where ``applied``, else ``image`` (only applied views pay for ``fn``)."""
    return tf.cond(applied, fn, lambda: image)


def coin(seed: tf.Tensor, p: float) -> tf.Tensor:
    """A stateless Bernoulli(p) draw (a constant when p is 0 or 1, so a disabled step costs nothing)."""
    if p <= 0.0:
        return tf.constant(False)
    return uniform(seed) < p


def batched(value: tf.Tensor) -> tf.Tensor:
    """A per-example value [B] reshaped to broadcast against images [B, S, S, C]."""
    return tf.reshape(value, [-1, 1, 1, 1])


def applied_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """ω = 1 if the step was applied, else 0 (flip, grayscale)."""
    del config
    return tf.reshape(tf.cast(params["applied"], tf.float32), [1])


# ------------------------------------------------------------------------------ targets (losses: losses/)


def difference(name: str) -> Callable[[Omega, Omega], tf.Tensor]:
    """The target ω1[name] - ω2[name]."""
    def target(omega1: Omega, omega2: Omega) -> tf.Tensor:
        return tf.cast(omega1[name], tf.float32) - tf.cast(omega2[name], tf.float32)

    target.__doc__ = f"ω1[{name!r}] - ω2[{name!r}]."
    return target


def as_is(name: str) -> DescribeFn:
    """The descriptor that feeds ω[name] as it is."""
    def describe(omega: Omega, config: AugmentConfig) -> tf.Tensor:
        del config
        return tf.cast(omega[name], tf.float32)

    describe.__doc__ = f"ω[{name!r}] as it is."
    return describe


def regression(name: str, **fields) -> Augmentation:
    """An augmentation whose ω difference is regressed: tanh outputs, MSE (the paper's loss)."""
    fields.setdefault("target", difference(name))
    return Augmentation(name=name, head_dim=fields["omega_dim"], loss=tanh_mse, metric=tanh_mse, **fields)
