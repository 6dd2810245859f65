"""torchvision's ``RandomResizedCrop.get_params``, stateless: the crop box the crop step draws."""

from __future__ import annotations

import math

import tensorflow as tf

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
    seed_attempts, seed_offsets = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
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
