"""THE registry of augmentations: how each is sampled and applied, its ω, its AugSelf target and loss, and
what a conditioned projector (CASSLE) reads of it.

``PIPELINE`` lists the steps in their (fixed) order of application (docs/architecture.md): RandomResizedCrop
-> horizontal flip -> colour jitter -> solarization -> grayscale -> Gaussian blur -> rotation by k*90°.
Steps whose parameters AugSelf can predict are ``Augmentation`` entries and appear in ``AUGMENTATIONS``
(grayscale has an ω, 1 if applied, but is not predicted).
Each entry declares its draws, its stage (``HOST``: in tf.data; ``DEVICE``: pixel-wise, may run batched in
the training step via ``finish_views``), its probability knob, its ω, the ω entries measured on its images
(``Measurement``: colour jitter's mean colour shift) and its descriptors (``Descriptor``: the view's
description that ``--condition`` feeds the projector). Adding an augmentation = its op + its entry (in
``_publish`` below, or ``register(entry, after=...)``); ``augment_view``, ``finish_views``, ``omega_diff``,
train_main's probability flags, ``AugmentConfig`` validation, the model's heads, losses and conditioning all
loop over this.

Randomness: ``augment_view`` gives every step its own seed, row ``seed_slot`` of
``stateless_split(seed, NUM_SEED_SLOTS)``; a step splits it further for its own draws. Slots are fixed per
step (not positions), so adding a step never changes the draws of the others.

Target conventions (shapes for a batch of B; unbatched works the same without the leading B):
  crop [B,4], flip [B,1] (1.0 if both views have the same flip), color [B,4], blur [B,1],
  rotation [B] int32 ((k1 - k2) mod 4, a class label for sparse softmax cross-entropy), solarize [B,1].
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import tensorflow as tf

from augself_tf.augment import ops
from augself_tf.augment.config import AugmentConfig

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

HOST, DEVICE = "host", "device"


@dataclasses.dataclass(frozen=True)
class Probability:
    """A step's probability knob: an ``AugmentConfig`` field and a train_main flag of the same name.

    Attributes:
      field: the name, e.g. ``jitter_prob``; a step registered later without a field of its own reads it
        from ``AugmentConfig.probabilities``.
      default: the probability when the flag is not given.
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
    """

    name: str
    dim: int
    describe: DescribeFn


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


def _uniform(seed: tf.Tensor, shape: tuple[int, ...] = ()) -> tf.Tensor:
    return tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)


def _split(seed: tf.Tensor, num: int) -> tf.Tensor:
    return tf.random.experimental.stateless_split(seed, num=num)


def _maybe(applied: tf.Tensor, fn: Callable[[], tf.Tensor], image: tf.Tensor) -> tf.Tensor:
    return tf.cond(applied, fn, lambda: image)


# ----------------------------------------------------------------------------------------------- apply


CROP_ATTEMPTS = 10  # torchvision's RandomResizedCrop.get_params tries 10 boxes before its fallback


def crop_box(
    height: tf.Tensor,
    width: tf.Tensor,
    seed: tf.Tensor,
    scale: tuple[float, float],
    ratio: tuple[float, float],
) -> tuple[tf.Tensor, tf.Tensor]:
    """torchvision's ``RandomResizedCrop.get_params``, stateless: the pixel box (offset, size) to crop.

    Up to 10 attempts: area ~ U(scale) * H * W, log(aspect) ~ U(log ratio), w = round(sqrt(area * aspect)),
    h = round(sqrt(area / aspect)) (round half to even, like Python's round); the first attempt with
    0 < w <= W and 0 < h <= H is kept, at offsets i ~ U{0..H-h}, j ~ U{0..W-w}. When none fits: the
    centre crop of the whole image clamped to the ratio range (w = W, h = round(W / min ratio) for a too
    tall image; h = H, w = round(H * max ratio) for a too wide one; else the whole image).

    The 10 attempts are drawn at once and the first valid one picked (same distribution as stopping at
    it; no loop, few ops: cheap inside tf.data.map). Geometry in float64, so rounding matches Python's
    doubles. The offsets are integer draws: 64 random bits modulo the number of offsets.

    Args:
      height, width: int scalars, the image's size (may be dynamic).
      seed: int [2] stateless seed.
      scale, ratio: (lo, hi) of the area fraction and of the aspect ratio w / h.

    Returns:
      (offset, size): int32 [2] (i, j) and int32 [2] (h, w).
    """
    seed_attempts, seed_offsets = tf.unstack(_split(seed, 2))
    height = tf.cast(height, tf.int32)
    width = tf.cast(width, tf.int32)
    full = tf.stack([height, width])  # (H, W)
    h_full = tf.cast(height, tf.float64)
    w_full = tf.cast(width, tf.float64)
    scale_lo, scale_hi = (float(v) for v in scale)
    ratio_lo, ratio_hi = sorted(float(v) for v in ratio)
    log_lo, log_hi = math.log(ratio_lo), math.log(ratio_hi)

    # The 10 attempts: area fractions ~ U(scale) and log aspect ratios ~ U(log ratio).
    u_area, u_log_ratio = tf.unstack(
        tf.random.stateless_uniform([2, CROP_ATTEMPTS], seed=seed_attempts, dtype=tf.float64)
    )
    target_area = h_full * w_full * (scale_lo + u_area * (scale_hi - scale_lo))
    log_aspect = log_lo + u_log_ratio * (log_hi - log_lo)
    # (h, w) = (sqrt(area / aspect), sqrt(area * aspect)), [2, 10], rounded half to even by tf.round.
    aspect_pm = tf.exp(tf.constant([[-1.0], [1.0]], tf.float64) * log_aspect)  # (1 / aspect, aspect)
    sizes = tf.cast(tf.round(tf.sqrt(target_area * aspect_pm)), tf.int32)
    valid = tf.reduce_all((sizes > 0) & (sizes <= full[:, None]), axis=0)  # [10]
    found = tf.reduce_any(valid)
    first = tf.argmax(tf.cast(valid, tf.int32), output_type=tf.int32)  # the first valid attempt

    # Fallback: the centre crop, clamped to the ratio range: (round(W / r_lo), W) if W/H < r_lo,
    # (H, round(H * r_hi)) if W/H > r_hi, else (H, W).
    in_ratio = w_full / h_full
    fallback = tf.where(
        in_ratio < ratio_lo,
        tf.stack([tf.cast(tf.round(w_full / ratio_lo), tf.int32), width]),
        tf.where(in_ratio > ratio_hi, tf.stack([height, tf.cast(tf.round(h_full * ratio_hi), tf.int32)]), full),
    )

    size = tf.where(found, tf.gather(sizes, first, axis=1), fallback)
    room = full - size  # >= 0
    bits = tf.random.stateless_uniform([2], seed=seed_offsets, minval=None, maxval=None, dtype=tf.int64)
    offset = tf.where(found, tf.cast(tf.math.floormod(bits, tf.cast(room + 1, tf.int64)), tf.int32), room // 2)
    return offset, size


def _coin(seed: tf.Tensor, p: float) -> tf.Tensor:
    """A stateless Bernoulli(p) draw (a constant when p is 0 or 1, so a disabled step costs nothing)."""
    if p <= 0.0:
        return tf.constant(False)
    return _uniform(seed) < p


def _batched(value: tf.Tensor) -> tf.Tensor:
    """A per-example value [B] reshaped to broadcast against images [B, S, S, C]."""
    return tf.reshape(value, [-1, 1, 1, 1])


# crop: RandomResizedCrop (host) ---------------------------------------------------------------------


def _sample_crop(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    offset, size = crop_box(shape[0], shape[1], seed, config.crop_scale, config.crop_ratio)
    return {"offset": offset, "size": size, "full": tf.cast(shape[:2], tf.int32)}


def _crop(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return ops.crop_and_resize(image, params["offset"], params["size"], config.image_size)


def _crop_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """(cy, cx, h, w): the integer pixel box as fractions of the ORIGINAL image (centre and size)."""
    del config
    full = tf.cast(params["full"], tf.float32)
    offset = tf.cast(params["offset"], tf.float32)
    extent = tf.cast(params["size"], tf.float32)
    return tf.concat([(offset + extent / 2.0) / full, extent / full], axis=0)


# flip (host) -----------------------------------------------------------------------------------------


def _sample_flip(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    return {"applied": _coin(seed, config.probability("flip_prob"))}


def _flip(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return _maybe(params["applied"], lambda: tf.reverse(image, axis=[1]), image)  # only flipped views pay


def _applied_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.reshape(tf.cast(params["applied"], tf.float32), [1])


def color_ranges(config: AugmentConfig) -> tuple[list[float], list[float]]:
    """(lo, hi) of the 4 jitter factors: [max(0, 1-s), 1+s] for b, c, s and [-s, s] for the hue."""
    sb, sc, ss, sh = config.jitter_strength
    lo = [max(0.0, 1.0 - sb), max(0.0, 1.0 - sc), max(0.0, 1.0 - ss), -sh]
    hi = [1.0 + sb, 1.0 + sc, 1.0 + ss, sh]
    return lo, hi


def color_identity_omega(config: AugmentConfig) -> list[float]:
    """ω_color of "jitter not applied": the encoding of the identity factors (1, 1, 1, 0).

    This is 0.5 for every component whenever the b/c/s strengths are <= 1 (all of the paper's settings)
    and for a zero-strength component; only a strength > 1 (lo clipped at 0) moves it below 0.5.
    """
    # For s <= 1 the range [1 - s, 1 + s] is centred on 1: exactly 0.5 (no rounding). For s > 1 it is
    # [0, 1 + s] and the identity factor 1 sits at 1 / (1 + s).
    *bcs, _ = config.jitter_strength
    return [0.5 if s <= 1.0 else 1.0 / (1.0 + s) for s in bcs] + [0.5]


def decode_color_omega(omega: tf.Tensor, config: AugmentConfig) -> tf.Tensor:
    """Factors (b, c, s, hue delta) from ω_color [..., 4]: lo + ω (hi - lo)."""
    lo, hi = color_ranges(config)
    lo_t = tf.constant(lo, tf.float32)
    return lo_t + tf.cast(omega, tf.float32) * (tf.constant(hi, tf.float32) - lo_t)


# colour jitter (device) -------------------------------------------------------------------------------


def _sample_color(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    """applied, u = (factor - lo) / (hi - lo) per component (0.5 for a zero-strength one), and the order."""
    lo, hi = color_ranges(config)
    zero = [b <= a for a, b in zip(lo, hi, strict=True)]  # zero-strength components: ω fixed at 0.5
    p = 0.0 if all(zero) else config.probability("jitter_prob")
    seeds = _split(seed, 3)
    return {
        "applied": _coin(seeds[0], p),
        "u": tf.where(tf.constant(zero), 0.5, _uniform(seeds[1], (4,))),
        "order": tf.cast(tf.argsort(_uniform(seeds[2], (4,))), tf.int32),  # a uniform permutation
    }


def _color(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    factors = decode_color_omega(params["u"], config)
    return _maybe(params["applied"], lambda: ops.color_jitter(image, factors, params["order"]), image)


def _color_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    factors = decode_color_omega(params["u"], config)
    return ops.color_jitter_batch(images, factors, params["order"], params["applied"])


def _color_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.where(params["applied"], params["u"], tf.constant(color_identity_omega(config), tf.float32))


def _color_mean_shift(before: tf.Tensor, after: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    """Per-channel mean of the image entering the jitter minus that of the jittered image (CASSLE's
    ``color_diff``); exactly 0 when the jitter is not applied (the same image leaves)."""
    del params, config
    return tf.reduce_mean(before, axis=[-3, -2]) - tf.reduce_mean(after, axis=[-3, -2])


# solarize (device): right after colour jitter ---------------------------------------------------------


def _sample_solarize(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    seeds = _split(seed, 2)
    return {"applied": _coin(seeds[0], config.probability("solarize_prob")), "delta": _uniform(seeds[1])}


def _solarize(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    # Skipped rather than run with δ = 1 when not applied: threshold 1 would still invert pixels equal to 1.
    return _maybe(params["applied"], lambda: ops.solarize(image, params["delta"]), image)


def _solarize_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    flip = _batched(params["applied"]) & (images >= _batched(params["delta"]))
    return tf.where(flip, 1.0 - images, images)


def _solarize_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """δ, or 1 when not applied (the identity on [0, 1))."""
    return tf.reshape(tf.where(params["applied"], params["delta"], 1.0), [1])


# grayscale (device), ω = 1 if applied (not predicted by AugSelf; read by --condition) ---------------------


def _sample_grayscale(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    return {"applied": _coin(seed, config.probability("gray_prob"))}


def _grayscale(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return _maybe(params["applied"], lambda: ops.grayscale(image), image)


def _grayscale_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.where(_batched(params["applied"]), ops.grayscale(images), images)


# Gaussian blur (device) --------------------------------------------------------------------------------


def _sample_blur(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    seeds = _split(seed, 2)
    lo, hi = config.blur_sigma
    return {"applied": _coin(seeds[0], config.probability("blur_prob")), "sigma": lo + _uniform(seeds[1]) * (hi - lo)}


def _blur(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    # At image_size < 20 the kernel size is 1: the blur is the identity whatever σ (ω still reports σ).
    return _maybe(params["applied"], lambda: ops.gaussian_blur(image, params["sigma"], config.blur_kernel_size),
                  image)


def _blur_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    blurred = ops.gaussian_blur_batch(images, params["sigma"], config.blur_kernel_size)
    return tf.where(_batched(params["applied"]), blurred, images)


def _blur_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """σ / σ_max, 0 when not applied."""
    return tf.reshape(tf.where(params["applied"], params["sigma"] / config.blur_sigma[1], 0.0), [1])


# rotation by k·90° (host; commutes with the device stage) ---------------------------------------------


def _sample_rotation(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    seeds = _split(seed, 2)
    applied = _coin(seeds[0], config.probability("rotation_prob"))
    k = tf.random.stateless_uniform([], seed=seeds[1], minval=0, maxval=4, dtype=tf.int32)
    return {"k": tf.where(applied, k, 0)}


def _rotate(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.ensure_shape(tf.image.rot90(image, params["k"]), image.shape)  # counter-clockwise


def _rotation_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.reshape(tf.cast(params["k"], tf.float32), [1])


# ----------------------------------------------------------------------------------- targets / losses


def _difference(name: str) -> Callable[[Omega, Omega], tf.Tensor]:
    def target(omega1: Omega, omega2: Omega) -> tf.Tensor:
        return tf.cast(omega1[name], tf.float32) - tf.cast(omega2[name], tf.float32)

    target.__doc__ = f"ω1[{name!r}] - ω2[{name!r}]."
    return target


def crop_target(omega1: Omega, omega2: Omega) -> tf.Tensor:
    """(cy1 - cy2, cx1 - cx2, h1 - h2, w1 - w2), both centres in view 1's displayed frame.

    When view 1 is flipped, cx <- 1 - cx for BOTH views (so the x difference changes sign).
    Rotation is not taken into account (as in the reference code).
    """
    if "flip" not in omega1:
        raise KeyError("the crop target needs omega1['flip'] (view 1's flip) to express centres in its frame")
    c1 = tf.cast(omega1["crop"], tf.float32)
    c2 = tf.cast(omega2["crop"], tf.float32)
    flipped = tf.cast(omega1["flip"], tf.float32) > 0.5  # [..., 1]
    cx1 = tf.where(flipped, 1.0 - c1[..., 1:2], c1[..., 1:2])
    cx2 = tf.where(flipped, 1.0 - c2[..., 1:2], c2[..., 1:2])
    return tf.concat([c1[..., 0:1] - c2[..., 0:1], cx1 - cx2, c1[..., 2:4] - c2[..., 2:4]], axis=-1)


def flip_target(omega1: Omega, omega2: Omega) -> tf.Tensor:
    """1.0 if both views have the same flip, else 0.0; shape [..., 1]."""
    f1 = tf.cast(omega1["flip"], tf.float32) > 0.5
    f2 = tf.cast(omega2["flip"], tf.float32) > 0.5
    return tf.cast(tf.equal(f1, f2), tf.float32)


def rotation_target(omega1: Omega, omega2: Omega) -> tf.Tensor:
    """(k1 - k2) mod 4 as int32 class labels, shape [...] (the trailing ω axis of size 1 is dropped)."""
    k1 = tf.cast(tf.round(tf.cast(omega1["rotation"], tf.float32)), tf.int32)[..., 0]
    k2 = tf.cast(tf.round(tf.cast(omega2["rotation"], tf.float32)), tf.int32)[..., 0]
    return tf.math.floormod(k1 - k2, 4)


def tanh_mse(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """mean over the last axis of (tanh(pred) - target)^2 -> [B]."""
    pred = tf.cast(pred, tf.float32)
    return tf.reduce_mean(tf.square(tf.tanh(pred) - tf.cast(target, tf.float32)), axis=-1)


def binary_cross_entropy(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Sigmoid binary cross-entropy from logits, mean over the last axis -> [B]."""
    pred = tf.cast(pred, tf.float32)
    labels = tf.cast(target, tf.float32)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=pred), axis=-1)


def binary_error(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Fraction of wrong signs (logit > 0 vs target > 0.5) over the last axis -> [B]."""
    wrong = tf.not_equal(tf.cast(pred, tf.float32) > 0.0, tf.cast(target, tf.float32) > 0.5)
    return tf.reduce_mean(tf.cast(wrong, tf.float32), axis=-1)


def categorical_cross_entropy(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Sparse softmax cross-entropy of logits [B, n] against int labels [B] -> [B]."""
    labels = tf.cast(target, tf.int32)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=tf.cast(pred, tf.float32))


def categorical_error(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """1.0 where argmax(logits) != label -> [B]."""
    guess = tf.argmax(tf.cast(pred, tf.float32), axis=-1, output_type=tf.int32)
    return tf.cast(tf.not_equal(guess, tf.cast(target, tf.int32)), tf.float32)


# ------------------------------------------------------------------- descriptors (--condition, CASSLE)
# The reference code (mprzewie/AugSelf, transforms.extract_aug_descriptors) describes a view by: crop (centre
# in the displayed frame, size), colour ((factor - 1) / range width, 0 when not applied), the mean colour
# shift of the jitter, flip, blur σ in pixels (0 when not applied) and grayscale (1 if applied).


def _crop_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """(cy, cx, h, w) with the centre in the view's displayed frame: cx <- 1 - cx when the view is flipped."""
    del config
    crop = tf.cast(omega["crop"], tf.float32)
    flipped = tf.cast(omega["flip"], tf.float32) > 0.5
    cx = tf.where(flipped, 1.0 - crop[..., 1:2], crop[..., 1:2])
    return tf.concat([crop[..., 0:1], cx, crop[..., 2:4]], axis=-1)


def _color_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """(factor − identity factor) / (hi − lo) per component: ω − ω(identity), 0 when not applied.

    With factor = lo + ω·(hi − lo) and the identity factor (1, 1, 1, 0) = lo + ω_id·(hi − lo), this is ω − ω_id
    exactly, also for a zero-strength component (where the reference divides 0 by 0).
    """
    return tf.cast(omega["color"], tf.float32) - tf.constant(color_identity_omega(config), tf.float32)


def _blur_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """σ in output pixels, 0 when not applied (the reference feeds the raw σ)."""
    return tf.cast(omega["blur"], tf.float32) * config.blur_sigma[1]


def _rotation_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """One-hot k of the rotation by k·90° (size 4, as the reference's disabled "rot" entry)."""
    del config
    k = tf.cast(tf.round(tf.cast(omega["rotation"], tf.float32)), tf.int32)[..., 0]
    return tf.one_hot(k, 4, dtype=tf.float32)


def _as_is(name: str) -> DescribeFn:
    def describe(omega: Omega, config: AugmentConfig) -> tf.Tensor:
        del config
        return tf.cast(omega[name], tf.float32)

    describe.__doc__ = f"ω[{name!r}] as it is."
    return describe


# ------------------------------------------------------------------------------------------- registry


def _regression(name: str, **fields) -> Augmentation:
    """An augmentation whose ω difference is regressed: tanh outputs, MSE (the paper's loss)."""
    fields.setdefault("target", _difference(name))
    return Augmentation(name=name, head_dim=fields["omega_dim"], loss=tanh_mse, metric=tanh_mse, **fields)


CROP = _regression(
    "crop", seed_slot=0, sample=_sample_crop, transform=_crop, omega=_crop_omega, omega_dim=4, target=crop_target,
    descriptors=(Descriptor("crop", 4, _crop_descriptor),),
)
FLIP = Augmentation(
    name="flip", seed_slot=1, sample=_sample_flip, transform=_flip, omega=_applied_omega, omega_dim=1,
    probability=Probability("flip_prob", 0.5, "Horizontal-flip probability."),
    head_dim=1, target=flip_target, loss=binary_cross_entropy, metric=binary_error,
    descriptors=(Descriptor("flip", 1, _as_is("flip")),),
)
COLOR = _regression(
    "color", seed_slot=2, sample=_sample_color, transform=_color, stage=DEVICE, transform_batch=_color_batch,
    omega=_color_omega, omega_dim=4, probability=Probability("jitter_prob", 0.8, "Colour-jitter probability."),
    measurements=(Measurement("color_diff", 3, _color_mean_shift),),
    descriptors=(Descriptor("color", 4, _color_descriptor), Descriptor("color_diff", 3, _as_is("color_diff"))),
)
GRAYSCALE = Step(
    name="grayscale", seed_slot=3, sample=_sample_grayscale, transform=_grayscale, stage=DEVICE,
    transform_batch=_grayscale_batch, probability=Probability("gray_prob", 0.2, "Grayscale probability."),
    omega=_applied_omega, omega_dim=1, descriptors=(Descriptor("grayscale", 1, _as_is("grayscale")),),
)
BLUR = _regression(
    "blur", seed_slot=4, sample=_sample_blur, transform=_blur, stage=DEVICE, transform_batch=_blur_batch,
    omega=_blur_omega, omega_dim=1, probability=Probability("blur_prob", 0.5, "Gaussian-blur probability."),
    descriptors=(Descriptor("blur", 1, _blur_descriptor),),
)
ROTATION = Augmentation(
    name="rotation", seed_slot=5, sample=_sample_rotation, transform=_rotate, omega=_rotation_omega, omega_dim=1,
    commutes_with_device=True, descriptors=(Descriptor("rotation", 4, _rotation_descriptor),),
    probability=Probability("rotation_prob", 0.0, "Rotation probability (default 0.5 when rotation is predicted, "
                            "else 0).", when_predicted=0.5),
    head_dim=4, target=rotation_target, loss=categorical_cross_entropy, metric=categorical_error,
)
SOLARIZE = _regression(
    "solarize", seed_slot=6, sample=_sample_solarize, transform=_solarize, stage=DEVICE,
    transform_batch=_solarize_batch, omega=_solarize_omega, omega_dim=1,
    probability=Probability("solarize_prob", 0.0, "Solarization probability (default 0.5 when solarize is "
                            "predicted, else 0).", when_predicted=0.5),
    descriptors=(Descriptor("solarize", 1, _as_is("solarize")),),  # δ, 1 when not applied: the reference's
)

# Order of application (fixed; docs/architecture.md): solarization comes right after colour jitter, as in the
# paper's appendix (it does not commute with grayscale or blur). Seed slots are independent of positions.
# Lists and dicts below are updated in place by `register`, so importers see registered steps.
PIPELINE: list[Step] = []
# Listed by seed slot, not by position: the public order (AUGSELF_CHOICES, error messages, heads) does not
# change when a step moves in PIPELINE.
AUGMENTATIONS: dict[str, Augmentation] = {}
AUGSELF_CHOICES: list[str] = []
NUM_SEED_SLOTS: int = 0
# Every ω entry of a view and its size: the steps' ω and their measurements.
OMEGA_DIMS: dict[str, int] = {}
# The descriptors --condition can choose, by name (listed by seed slot, as AUGMENTATIONS).
DESCRIPTORS: dict[str, Descriptor] = {}
CONDITION_CHOICES: list[str] = []


def _check(pipeline: list[Step]) -> None:
    if len({s.seed_slot for s in pipeline}) != len(pipeline) or len({s.name for s in pipeline}) != len(pipeline):
        raise ValueError("pipeline steps must have unique names and seed slots")
    seen_device = False
    for step in pipeline:
        if step.stage not in (HOST, DEVICE):
            raise ValueError(f"step {step.name!r}: stage must be {HOST!r} or {DEVICE!r}, got {step.stage!r}")
        if step.stage == DEVICE and step.transform_batch is None:
            raise ValueError(f"device step {step.name!r} needs a transform_batch")
        if step.stage == HOST and seen_device and not step.commutes_with_device:
            raise ValueError(f"host step {step.name!r} follows a device step but does not commute with it")
        if (step.omega is None) != (step.omega_dim == 0):
            raise ValueError(f"step {step.name!r}: omega and omega_dim go together")
        seen_device |= step.stage == DEVICE
    omega_names = [s.name for s in pipeline if s.omega is not None]
    omega_names += [m.name for s in pipeline for m in s.measurements]
    step_names = {s.name for s in pipeline}
    measured = {m.name for s in pipeline for m in s.measurements}
    if len(set(omega_names)) != len(omega_names) or measured & step_names:
        raise ValueError("measurements must have names distinct from each other and from every step")
    descriptors = [d.name for s in pipeline for d in s.descriptors]
    if len(set(descriptors)) != len(descriptors):
        raise ValueError("descriptors must have unique names")


def _publish(pipeline: list[Step]) -> None:
    global NUM_SEED_SLOTS
    _check(pipeline)
    PIPELINE[:] = pipeline
    AUGMENTATIONS.clear()
    AUGMENTATIONS.update(
        {s.name: s for s in sorted(pipeline, key=lambda s: s.seed_slot) if isinstance(s, Augmentation)}
    )
    AUGSELF_CHOICES[:] = list(AUGMENTATIONS)
    NUM_SEED_SLOTS = max(s.seed_slot for s in pipeline) + 1
    by_slot = sorted(pipeline, key=lambda s: s.seed_slot)
    OMEGA_DIMS.clear()
    OMEGA_DIMS.update({s.name: s.omega_dim for s in by_slot if s.omega is not None})
    OMEGA_DIMS.update({m.name: m.dim for s in by_slot for m in s.measurements})
    DESCRIPTORS.clear()
    DESCRIPTORS.update({d.name: d for s in by_slot for d in s.descriptors})
    CONDITION_CHOICES[:] = list(DESCRIPTORS)


def register(step: Step, *, after: str) -> None:
    """Adds a step to the pipeline right after the step named ``after`` (an augmentation is then predictable).

    Raises:
      ValueError: a clash of name or seed slot, an unknown ``after``, or a host step that would follow a
        device step without commuting with it.
    """
    names = [s.name for s in PIPELINE]
    if after not in names:
        raise ValueError(f"unknown step {after!r}; steps are {', '.join(names)}")
    pipeline = list(PIPELINE)
    pipeline.insert(names.index(after) + 1, step)
    _publish(pipeline)


def unregister(name: str) -> None:
    """Removes a registered step (tests use it to undo ``register``)."""
    _publish([s for s in PIPELINE if s.name != name])


def probabilities() -> list[Probability]:
    """Every step's probability knob, in pipeline order (flags and config validation read this)."""
    return [s.probability for s in PIPELINE if s.probability is not None]


_publish([CROP, FLIP, COLOR, SOLARIZE, GRAYSCALE, BLUR, ROTATION])


def parse_augself(text: str | None) -> tuple[str, ...]:
    """Parses a comma-separated list of AugSelf augmentations, e.g. "crop,color" -> ("crop", "color").

    Empty text or "none" -> (). Whitespace is ignored; duplicates are dropped (first occurrence kept).

    Raises:
      ValueError: for a name that is not in ``AUGMENTATIONS``.
    """
    if text is None:
        return ()
    text = text.strip()
    if text.lower() in ("", "none"):
        return ()
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if name not in AUGMENTATIONS:
            raise ValueError(
                f"unknown AugSelf augmentation {name!r}; choose from {', '.join(AUGSELF_CHOICES)}"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def parse_condition(text: str | None) -> tuple[str, ...]:
    """Parses a comma-separated list of descriptors for ``--condition``, e.g. "crop,color" -> ("crop", "color").

    Empty text or "none" -> (). Whitespace is ignored; duplicates are dropped (first occurrence kept).

    Raises:
      ValueError: for a name that is not in ``DESCRIPTORS``.
    """
    if text is None or text.strip().lower() in ("", "none"):
        return ()
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if name not in DESCRIPTORS:
            raise ValueError(f"unknown descriptor {name!r} for --condition; choose from {', '.join(CONDITION_CHOICES)}")
        if name not in names:
            names.append(name)
    return tuple(names)
