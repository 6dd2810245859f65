"""Weather corruptions (fog, frost, snow) of Hendrycks & Dietterich (ICLR 2019, "Benchmarking Neural Network
Robustness to Common Corruptions and Perturbations") as TensorFlow ops on float images in [0, 1].

Each function takes a batch ``images`` float32 [N, H, W, 3] in [0, 1], a ``severity`` in 1..5 and a seed
(int), and returns a batch of the same shape, clipped to [0, 1]. Constants are those of the ImageNet-C
code (``imagenet_c/corruptions.py``, whose images are 224 px); spatial constants (blur radius, zoom) are
scaled by H/224 so that a 96 px image gets the same corruption relative to its size.

* **fog** — ImageNet-C: ``x += c0 · plasma_fractal(wibbledecay=c1)``; ``x = x · max(x) / (max(x) + c0)``,
  with (c0, c1) = (1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4). The plasma fractal (diamond-square
  noise on a 256² map, amplitude divided by ``wibbledecay`` at each finer level, normalised to [0, 1]) is
  approximated here by fractal value noise: one uniform random grid per octave 2, 4, …, 256 cells per
  side, bilinearly upsampled, octave k weighted by wibbledecay^-k, summed, normalised to [0, 1]. Same
  spectrum shape (amplitude decaying geometrically with frequency); not the same random field.
* **frost** — ImageNet-C: ``x = c0 · x + c1 · frost`` with (c0, c1) = (1, 0.4), (0.8, 0.6), (0.7, 0.7),
  (0.65, 0.7), (0.6, 0.75), where ``frost`` is a random crop of one of six photographs of frost on a
  window (pixel values in [0, 1] after /255). We have no such images: **frost is approximated by a
  procedural ice texture** — ridged fractal noise (1 − |2n − 1|)² for crystal-like veins plus fine
  speckle, tinted pale blue (0.85, 0.93, 1.0). The blend formula
  and the per-severity constants are the original's.
* **snow** — ImageNet-C, step by step: a Gaussian snow layer N(c0, c1) per pixel, zoomed by c2 (centre
  crop + resize), values below c3 set to 0, a motion blur of radius c4 and sigma c5 in a random direction
  in [−135°, −45°]; the image is first blended ``c6 · x + (1 − c6) · max(x, 1.5 · gray(x) + 0.5)`` and
  then ``x + snow + rot180(snow)``. Constants (c0..c6) per severity: (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
  (0.2, 0.3, 2, 0.5, 12, 4, 0.7), (0.55, 0.3, 4, 0.9, 12, 8, 0.7), (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
  (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55). The original uses ImageMagick's motion blur (a one-sided line
  kernel with Gaussian weights); ours is a depthwise convolution with that kernel, drawn by bilinear
  splatting of the line's sample points. The original snow layer is one per image; so is ours.

ImageNet-C reports accuracy averaged over the five severities; :mod:`augself_tf.evaluation.perturbed_accuracy`
does the same by default (``--robustness_severities``). The paper does not state its severities.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf

FOG = [(1.5, 2.0), (2.0, 2.0), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4)]
FROST = [(1.0, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)]
SNOW = [
    (0.1, 0.3, 3.0, 0.5, 10, 4, 0.8),
    (0.2, 0.3, 2.0, 0.5, 12, 4, 0.7),
    (0.55, 0.3, 4.0, 0.9, 12, 8, 0.7),
    (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
    (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
]
FROST_TINT = (0.85, 0.93, 1.0)


def _check(images: tf.Tensor, severity: int) -> tf.Tensor:
    if not 1 <= severity <= 5:
        raise ValueError(f"severity must be in 1..5, got {severity}")
    images = tf.convert_to_tensor(images, tf.float32)
    if images.shape.rank != 4:
        raise ValueError(f"expected images [N, H, W, C], got shape {images.shape}")
    return images


def fractal_noise(n: int, height: int, width: int, decay: float, seed: int, ridged: bool = False) -> tf.Tensor:
    """Fractal value noise [n, height, width, 1] in [0, 1] (per image min-max normalised).

    Octave k (k = 1..8) is a uniform grid of 2^k × 2^k cells upsampled bilinearly, weighted decay^-k.
    ``ridged``: each octave is mapped to (1 − |2u − 1|)² first (sharp bright veins).
    """
    total = tf.zeros([n, height, width, 1])
    for k in range(1, 9):
        cells = 2**k
        u = tf.random.stateless_uniform([n, cells, cells, 1], seed=[seed, k])
        if ridged:
            u = tf.square(1.0 - tf.abs(2.0 * u - 1.0))
        total += tf.image.resize(u, [height, width], method="bilinear") * decay ** (-k)
    lo = tf.reduce_min(total, axis=[1, 2, 3], keepdims=True)
    hi = tf.reduce_max(total, axis=[1, 2, 3], keepdims=True)
    return (total - lo) / tf.maximum(hi - lo, 1e-8)


def fog(images: tf.Tensor, severity: int = 3, seed: int = 0) -> tf.Tensor:
    """Hendrycks & Dietterich's fog (module docstring)."""
    x = _check(images, severity)
    c0, c1 = FOG[severity - 1]
    n, h, w = tf.shape(x)[0], x.shape[1], x.shape[2]
    max_val = tf.reduce_max(x, axis=[1, 2, 3], keepdims=True)
    x = x + c0 * fractal_noise(n, h, w, c1, seed)
    return tf.clip_by_value(x * max_val / (max_val + c0), 0.0, 1.0)


def frost_texture(n: int, height: int, width: int, seed: int) -> tf.Tensor:
    """The procedural stand-in for the frost photographs: [n, height, width, 3] in [0, 1]."""
    veins = fractal_noise(n, height, width, 1.3, seed, ridged=True)
    speckle = tf.random.stateless_uniform([n, height, width, 1], seed=[seed, 99])
    ice = tf.clip_by_value(0.8 * tf.pow(veins, 1.5) + 0.25 * speckle * veins, 0.0, 1.0)
    return ice * tf.constant(FROST_TINT, tf.float32)


def frost(images: tf.Tensor, severity: int = 3, seed: int = 0) -> tf.Tensor:
    """Hendrycks & Dietterich's frost blend with a procedural ice texture (module docstring)."""
    x = _check(images, severity)
    c0, c1 = FROST[severity - 1]
    tex = frost_texture(tf.shape(x)[0], x.shape[1], x.shape[2], seed)
    return tf.clip_by_value(c0 * x + c1 * tex, 0.0, 1.0)


def motion_blur_kernel(radius: float, sigma: float, angle_deg: float) -> np.ndarray:
    """ImageMagick-style one-sided motion-blur kernel [k, k] (sums to 1): Gaussian weights along a line."""
    r = max(1, int(math.ceil(radius)))
    size = 2 * r + 1
    kernel = np.zeros((size, size), np.float64)
    theta = math.radians(angle_deg)
    for i in range(r + 1):
        weight = math.exp(-(i * i) / (2.0 * sigma * sigma))
        y, x = r + i * math.sin(theta), r + i * math.cos(theta)
        y0, x0 = int(math.floor(y)), int(math.floor(x))
        fy, fx = y - y0, x - x0
        for dy, dx, wgt in ((0, 0, (1 - fy) * (1 - fx)), (1, 0, fy * (1 - fx)), (0, 1, (1 - fy) * fx), (1, 1, fy * fx)):
            yy, xx = min(y0 + dy, size - 1), min(x0 + dx, size - 1)
            kernel[yy, xx] += weight * wgt
    return (kernel / kernel.sum()).astype(np.float32)


def _zoom(layer: tf.Tensor, factor: float) -> tf.Tensor:
    """Centre crop 1/factor of each side and resize back (ImageNet-C's clipped_zoom)."""
    h, w = layer.shape[1], layer.shape[2]
    ch, cw = max(1, int(math.ceil(h / factor))), max(1, int(math.ceil(w / factor)))
    top, left = (h - ch) // 2, (w - cw) // 2
    return tf.image.resize(layer[:, top : top + ch, left : left + cw], [h, w], method="bilinear")


def snow(images: tf.Tensor, severity: int = 3, seed: int = 0) -> tf.Tensor:
    """Hendrycks & Dietterich's snow (module docstring)."""
    x = _check(images, severity)
    c0, c1, c2, c3, c4, c5, c6 = SNOW[severity - 1]
    n, h, w = tf.shape(x)[0], x.shape[1], x.shape[2]
    scale = h / 224.0
    layer = c0 + c1 * tf.random.stateless_normal([n, h, w, 1], seed=[seed, 1])
    layer = _zoom(layer, c2)
    layer = tf.where(layer < c3, 0.0, layer)
    angle = float(np.random.default_rng(seed).uniform(-135, -45))
    kernel = motion_blur_kernel(max(1.0, c4 * scale), max(0.5, c5 * scale), angle)
    r = kernel.shape[0] // 2
    padded = tf.pad(layer, [[0, 0], [r, r], [r, r], [0, 0]], mode="SYMMETRIC" if r < min(h, w) else "CONSTANT")
    layer = tf.nn.conv2d(padded, kernel[:, :, None, None], strides=1, padding="VALID")
    gray = tf.image.rgb_to_grayscale(x)
    x = c6 * x + (1.0 - c6) * tf.maximum(x, gray * 1.5 + 0.5)
    return tf.clip_by_value(x + layer + tf.image.rot90(layer, 2), 0.0, 1.0)


CORRUPTIONS: dict[str, Callable[..., tf.Tensor]] = {"fog": fog, "frost": frost, "snow": snow}
