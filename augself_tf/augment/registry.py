"""THE registry of augmentations: how each is sampled and applied, its ω, its AugSelf target and loss.

``PIPELINE`` lists the steps in their (fixed) order of application (DESIGN.md §2): RandomResizedCrop
-> horizontal flip -> colour jitter -> solarization -> grayscale -> Gaussian blur -> rotation by k*90°.
Steps whose parameters AugSelf can predict are ``Augmentation`` entries and appear in ``AUGMENTATIONS``
(grayscale has no ω and does not).
Adding an augmentation = one op in ``ops.py`` + one ``Augmentation`` entry in ``PIPELINE`` below (+ its
config field); ``augment_view``, ``omega_diff``, the model's heads and its losses all loop over this.

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
# (image float32 [H,W,3], seed int64 [2], config) -> (image, ω float32 [omega_dim] or None)
ApplyFn = Callable[[tf.Tensor, tf.Tensor, AugmentConfig], tuple[tf.Tensor, tf.Tensor | None]]


@dataclasses.dataclass(frozen=True)
class Step:
    """One stage of the pipeline: ``apply(image, seed, config) -> (image, omega or None)``."""

    name: str
    seed_slot: int
    apply: ApplyFn


@dataclasses.dataclass(frozen=True)
class Augmentation(Step):
    """A pipeline step with parameters ω that AugSelf can predict.

    Attributes:
      omega_dim: size of this step's ω (per view).
      head_dim: number of outputs of the AugSelf head φ for it.
      target: (omega1, omega2) -> AugSelf target ω_diff(1, 2); takes the full ω dicts (crop needs flip).
      loss: (pred [B, head_dim], target) -> per-example loss [B].
      metric: (pred, target) -> per-example error [B] for logging.
    """

    omega_dim: int
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


def _apply_crop(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """RandomResizedCrop with torchvision's sampler (``crop_box``); ω = (cy, cx, h, w) of the original image.

    ω is the integer pixel box as fractions of the ORIGINAL height / width: centre (offset + size / 2) / full
    and size / full.
    """
    shape = tf.shape(image)
    begin, size = crop_box(shape[0], shape[1], seed, config.crop_scale, config.crop_ratio)
    view = ops.crop_and_resize(image, begin, size, config.image_size)
    full = tf.cast(shape[:2], tf.float32)
    offset = tf.cast(begin, tf.float32)
    extent = tf.cast(size, tf.float32)
    omega = tf.concat([(offset + extent / 2.0) / full, extent / full], axis=0)
    return view, omega


def _apply_flip(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """Horizontal flip with probability flip_prob; ω = 1 if flipped."""
    if config.flip_prob == 0.0:
        return image, tf.zeros([1], tf.float32)
    flipped = _uniform(seed) < config.flip_prob
    image = tf.where(flipped, tf.reverse(image, axis=[1]), image)
    return image, tf.reshape(tf.cast(flipped, tf.float32), [1])


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


def _apply_color(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """Colour jitter with probability jitter_prob, the 4 adjustments in a random order per example."""
    identity = tf.constant(color_identity_omega(config), tf.float32)
    lo, hi = color_ranges(config)
    zero = [b <= a for a, b in zip(lo, hi, strict=True)]  # zero-strength components: ω fixed at 0.5
    if config.jitter_prob == 0.0 or all(zero):
        return image, identity
    seeds = _split(seed, 3)
    applied = _uniform(seeds[0]) < config.jitter_prob
    u = tf.where(tf.constant(zero), 0.5, _uniform(seeds[1], (4,)))  # ω = (factor - lo) / (hi - lo)
    order = tf.cast(tf.argsort(_uniform(seeds[2], (4,))), tf.int32)  # a uniform permutation
    factors = decode_color_omega(u, config)
    image = _maybe(applied, lambda: ops.color_jitter(image, factors, order), image)
    return image, tf.where(applied, u, identity)


def _apply_grayscale(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, None]:
    """Grayscale (replicated to 3 channels) with probability gray_prob; no ω."""
    if config.gray_prob == 0.0:
        return image, None
    applied = _uniform(seed) < config.gray_prob
    return _maybe(applied, lambda: ops.grayscale(image), image), None


def _apply_blur(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """Gaussian blur with probability blur_prob, σ ~ U[blur_sigma]; ω = σ / σ_max, 0 if not applied.

    At image_size < 20 the kernel size is 1, so the "blur" is the identity whatever σ (ω still reports σ).
    """
    if config.blur_prob == 0.0:
        return image, tf.zeros([1], tf.float32)
    seeds = _split(seed, 2)
    applied = _uniform(seeds[0]) < config.blur_prob
    lo, hi = config.blur_sigma
    sigma = lo + _uniform(seeds[1]) * (hi - lo)
    image = _maybe(applied, lambda: ops.gaussian_blur(image, sigma, config.blur_kernel_size), image)
    omega = tf.where(applied, sigma / hi, 0.0)
    return image, tf.reshape(omega, [1])


def _apply_rotation(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """With probability rotation_prob, rotate by k*90° counter-clockwise, k uniform in {0,1,2,3}; ω = k."""
    if config.rotation_prob == 0.0:
        return image, tf.zeros([1], tf.float32)
    seeds = _split(seed, 2)
    applied = _uniform(seeds[0]) < config.rotation_prob
    k = tf.random.stateless_uniform([], seed=seeds[1], minval=0, maxval=4, dtype=tf.int32)
    k = tf.where(applied, k, 0)
    image = tf.ensure_shape(tf.image.rot90(image, k), image.shape)
    return image, tf.reshape(tf.cast(k, tf.float32), [1])


def _apply_solarize(image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """With probability solarize_prob, x >= δ -> 1 - x with δ ~ U[0, 1); ω = δ, 1 if not applied.

    ω = 1 stands for "not applied" (the identity on [0, 1)); a pixel of exactly 1.0 would be inverted
    by threshold 1, so the op is skipped rather than run with δ = 1.
    """
    if config.solarize_prob == 0.0:
        return image, tf.ones([1], tf.float32)
    seeds = _split(seed, 2)
    applied = _uniform(seeds[0]) < config.solarize_prob
    delta = _uniform(seeds[1])
    image = _maybe(applied, lambda: ops.solarize(image, delta), image)
    return image, tf.reshape(tf.where(applied, delta, 1.0), [1])


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


# ------------------------------------------------------------------------------------------- registry


def _regression(name: str, seed_slot: int, apply: ApplyFn, dim: int, target=None) -> Augmentation:
    return Augmentation(
        name=name,
        seed_slot=seed_slot,
        apply=apply,
        omega_dim=dim,
        head_dim=dim,
        target=target or _difference(name),
        loss=tanh_mse,
        metric=tanh_mse,
    )


CROP = _regression("crop", 0, _apply_crop, 4, target=crop_target)
FLIP = Augmentation(
    name="flip",
    seed_slot=1,
    apply=_apply_flip,
    omega_dim=1,
    head_dim=1,
    target=flip_target,
    loss=binary_cross_entropy,
    metric=binary_error,
)
COLOR = _regression("color", 2, _apply_color, 4)
GRAYSCALE = Step(name="grayscale", seed_slot=3, apply=_apply_grayscale)
BLUR = _regression("blur", 4, _apply_blur, 1)
ROTATION = Augmentation(
    name="rotation",
    seed_slot=5,
    apply=_apply_rotation,
    omega_dim=1,
    head_dim=4,
    target=rotation_target,
    loss=categorical_cross_entropy,
    metric=categorical_error,
)
SOLARIZE = _regression("solarize", 6, _apply_solarize, 1)

# Order of application (fixed; DESIGN.md §2): solarization comes right after colour jitter, as in the
# paper's appendix (it does not commute with grayscale or blur). Seed slots are independent of positions.
PIPELINE: tuple[Step, ...] = (CROP, FLIP, COLOR, SOLARIZE, GRAYSCALE, BLUR, ROTATION)

# Listed by seed slot, not by position: the public order (AUGSELF_CHOICES, error messages, heads) does not
# change when a step moves in PIPELINE.
AUGMENTATIONS: dict[str, Augmentation] = {
    s.name: s for s in sorted(PIPELINE, key=lambda s: s.seed_slot) if isinstance(s, Augmentation)
}
AUGSELF_CHOICES: tuple[str, ...] = tuple(AUGMENTATIONS)
NUM_SEED_SLOTS: int = max(s.seed_slot for s in PIPELINE) + 1

if len({s.seed_slot for s in PIPELINE}) != len(PIPELINE) or len({s.name for s in PIPELINE}) != len(PIPELINE):
    raise RuntimeError("pipeline steps must have unique names and seed slots")


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
