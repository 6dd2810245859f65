"""The photometric steps, pixel-wise and so able to run batched in the training step (the device stage): colour
jitter, solarization, grayscale and Gaussian blur, each with its draws, one-image and batched transforms, ω and
``--condition`` descriptors. AugSelf regresses the ω difference of colour, blur and solarize ([B,4], [B,1],
[B,1]); grayscale has an ω (1 if applied) but is not predicted.
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.augment import ops
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.steps import (
    DEVICE,
    Descriptor,
    Measurement,
    Omega,
    Params,
    Probability,
    Step,
    applied_omega,
    as_is,
    batched,
    coin,
    maybe,
    regression,
    split_seed,
    uniform,
)


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
    seeds = split_seed(seed, 3)
    return {
        "applied": coin(seeds[0], p),
        "u": tf.where(tf.constant(zero), 0.5, uniform(seeds[1], (4,))),
        "order": tf.cast(tf.argsort(uniform(seeds[2], (4,))), tf.int32),  # a uniform permutation
    }


def _color(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    factors = decode_color_omega(params["u"], config)
    return maybe(params["applied"], lambda: ops.color_jitter(image, factors, params["order"]), image)


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
    seeds = split_seed(seed, 2)
    return {"applied": coin(seeds[0], config.probability("solarize_prob")), "delta": uniform(seeds[1])}


def _solarize(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    # Skipped rather than run with δ = 1 when not applied: threshold 1 would still invert pixels equal to 1.
    return maybe(params["applied"], lambda: ops.solarize(image, params["delta"]), image)


def _solarize_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    flip = batched(params["applied"]) & (images >= batched(params["delta"]))
    return tf.where(flip, 1.0 - images, images)


def _solarize_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """δ, or 1 when not applied (the identity on [0, 1))."""
    return tf.reshape(tf.where(params["applied"], params["delta"], 1.0), [1])


# grayscale (device), ω = 1 if applied (not predicted by AugSelf; read by --condition) ---------------------


def _sample_grayscale(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    return {"applied": coin(seed, config.probability("gray_prob"))}


def _grayscale(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return maybe(params["applied"], lambda: ops.grayscale(image), image)


def _grayscale_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.where(batched(params["applied"]), ops.grayscale(images), images)


# Gaussian blur (device) --------------------------------------------------------------------------------


def _sample_blur(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    seeds = split_seed(seed, 2)
    lo, hi = config.blur_sigma
    return {"applied": coin(seeds[0], config.probability("blur_prob")), "sigma": lo + uniform(seeds[1]) * (hi - lo)}


def _blur(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    # At image_size < 20 the kernel size is 1: the blur is the identity whatever σ (ω still reports σ).
    return maybe(params["applied"], lambda: ops.gaussian_blur(image, params["sigma"], config.blur_kernel_size),
                  image)


def _blur_batch(images: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    blurred = ops.gaussian_blur_batch(images, params["sigma"], config.blur_kernel_size)
    return tf.where(batched(params["applied"]), blurred, images)


def _blur_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    """σ / σ_max, 0 when not applied."""
    return tf.reshape(tf.where(params["applied"], params["sigma"] / config.blur_sigma[1], 0.0), [1])


# ----------------------------------------------------------------------------------- descriptors (--condition)
# The reference code (mprzewie/AugSelf, transforms.extract_aug_descriptors) describes a view by: crop (centre
# in the displayed frame, size), colour ((factor - 1) / range width, 0 when not applied), the mean colour
# shift of the jitter, flip, blur σ in pixels (0 when not applied) and grayscale (1 if applied).


def _color_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """(factor − identity factor) / (hi − lo) per component: ω − ω(identity), 0 when not applied.

    With factor = lo + ω·(hi − lo) and the identity factor (1, 1, 1, 0) = lo + ω_id·(hi − lo), this is ω − ω_id
    exactly, also for a zero-strength component (where the reference divides 0 by 0).
    """
    return tf.cast(omega["color"], tf.float32) - tf.constant(color_identity_omega(config), tf.float32)


def _blur_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """σ in output pixels, 0 when not applied (the reference feeds the raw σ)."""
    return tf.cast(omega["blur"], tf.float32) * config.blur_sigma[1]


# ----------------------------------------------------------------------------------------------- the steps


COLOR = regression(
    "color", seed_slot=2, sample=_sample_color, transform=_color, stage=DEVICE, transform_batch=_color_batch,
    omega=_color_omega, omega_dim=4, probability=Probability("jitter_prob", 0.8, "Colour-jitter probability."),
    measurements=(Measurement("color_diff", 3, _color_mean_shift),),
    descriptors=(Descriptor("color", 4, _color_descriptor), Descriptor("color_diff", 3, as_is("color_diff"))),
)
GRAYSCALE = Step(
    name="grayscale", seed_slot=3, sample=_sample_grayscale, transform=_grayscale, stage=DEVICE,
    transform_batch=_grayscale_batch, probability=Probability("gray_prob", 0.2, "Grayscale probability."),
    omega=applied_omega, omega_dim=1, descriptors=(Descriptor("grayscale", 1, as_is("grayscale")),),
)
BLUR = regression(
    "blur", seed_slot=4, sample=_sample_blur, transform=_blur, stage=DEVICE, transform_batch=_blur_batch,
    omega=_blur_omega, omega_dim=1, probability=Probability("blur_prob", 0.5, "Gaussian-blur probability."),
    descriptors=(Descriptor("blur", 1, _blur_descriptor),),
)
SOLARIZE = regression(
    "solarize", seed_slot=6, sample=_sample_solarize, transform=_solarize, stage=DEVICE,
    transform_batch=_solarize_batch, omega=_solarize_omega, omega_dim=1,
    probability=Probability("solarize_prob", 0.0, "Solarization probability (default 0.5 when solarize is "
                            "predicted or left out by --method=looc, else 0).", when_predicted=0.5),
    descriptors=(Descriptor("solarize", 1, as_is("solarize")),),  # δ, 1 when not applied: the reference's
)
