"""Deterministic image ops used by the augmentation pipeline.

Every op here takes its parameters explicitly (no randomness): the random draws live in
``registry.py``. Images are float32 [H, W, 3] in [0, 1] unless stated otherwise. All ops are
graph-safe (usable inside ``tf.data.Dataset.map``) and work with dynamic H and W.
"""

from __future__ import annotations

import tensorflow as tf

# ITU-R 601-2 luma, as PIL's convert("L") (what the reference code's PIL-based transforms use).
# torchvision's tensor path uses 0.2989 for red; the difference is < 1e-4 per pixel.
GRAY_WEIGHTS = (0.299, 0.587, 0.114)

# Index of each colour-jitter adjustment in ``factors`` / ``order`` of ``color_jitter``.
BRIGHTNESS, CONTRAST, SATURATION, HUE = 0, 1, 2, 3


def to_float_rgb(image: tf.Tensor) -> tf.Tensor:
    """Converts an image to float32 RGB in [0, 1].

    Args:
      image: [H, W] or [H, W, C] with C in {1, 2, 3, 4} (may be dynamic); any integer dtype (scaled by
        its max, e.g. uint8 / 255) or a float dtype assumed to lie in [0, 1] (clipped).
    Returns:
      float32 [H, W, 3]: 1 (or 2 = gray+alpha) channels are replicated, a 4th (alpha) channel is dropped.
    """
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., tf.newaxis]
    if image.shape.rank is not None and image.shape.rank != 3:
        raise ValueError(f"expected an image of rank 2 or 3, got shape {image.shape}")
    if image.dtype.is_floating:
        image = tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 1.0)
    else:
        image = tf.image.convert_image_dtype(image, tf.float32)

    channels = image.shape[-1]
    if channels is not None:
        if channels not in (1, 2, 3, 4):
            raise ValueError(f"expected 1, 2, 3 or 4 channels, got {channels}")
        return tf.tile(image[..., :1], [1, 1, 3]) if channels < 3 else image[..., :3]
    rgb = tf.cond(
        tf.shape(image)[-1] < 3,
        lambda: tf.tile(image[..., :1], [1, 1, 3]),
        lambda: image[..., :3],
    )
    return tf.ensure_shape(rgb, [None, None, 3])


def crop_and_resize(image: tf.Tensor, offset: tf.Tensor, size: tf.Tensor, out_size: int) -> tf.Tensor:
    """Crops image[y0:y0+h, x0:x0+w] and resizes it to [out_size, out_size] (bilinear, antialiased).

    Antialiasing is on when a side shrinks, like PIL's bilinear resize that torchvision applies to PIL
    images in the reference code (tf.image.resize without it aliases when shrinking a large crop).

    Args:
      image: float32 [H, W, C].
      offset: int [2] (y0, x0) in pixels.
      size: int [2] (h, w) in pixels.
      out_size: side of the square output.
    """
    offset = tf.cast(offset, tf.int32)
    size = tf.cast(size, tf.int32)
    crop = tf.slice(image, tf.concat([offset, [0]], 0), tf.concat([size, [-1]], 0))
    # Antialiasing only changes a shrinking resize, and costs a slower kernel: use it only then.
    return tf.cond(
        tf.reduce_any(size > out_size),
        lambda: tf.image.resize(crop, [out_size, out_size], method="bilinear", antialias=True),
        lambda: tf.image.resize(crop, [out_size, out_size], method="bilinear"),
    )


def rgb_to_grayscale(x: tf.Tensor) -> tf.Tensor:
    """0.299 R + 0.587 G + 0.114 B of [..., 3] -> [..., 1]."""
    # Hand-written rather than tf.image.rgb_to_grayscale so the weights are explicit and match PIL.
    return tf.reduce_sum(x * tf.constant(GRAY_WEIGHTS, x.dtype), axis=-1, keepdims=True)


def grayscale(x: tf.Tensor) -> tf.Tensor:
    """The grayscale image replicated to 3 channels."""
    return tf.tile(rgb_to_grayscale(x), [1] * (x.shape.rank - 1) + [3])


def _blend(x: tf.Tensor, other: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision's _blend: clip(factor * x + (1 - factor) * other, 0, 1)."""
    return tf.clip_by_value(factor * x + (1.0 - factor) * other, 0.0, 1.0)


def adjust_brightness(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_brightness: clip(x * factor, 0, 1)."""
    return tf.clip_by_value(x * factor, 0.0, 1.0)


def adjust_contrast(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_contrast: blend x with the mean of its grayscale image."""
    # tf.image.adjust_contrast blends per channel with each channel's own mean: not torchvision's op.
    mean = tf.reduce_mean(rgb_to_grayscale(x), axis=[-3, -2, -1], keepdims=True)
    return _blend(x, mean, factor)


def adjust_saturation(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_saturation: blend x with its grayscale image."""
    # tf.image.adjust_saturation scales S in HSV space: not torchvision's op.
    return _blend(x, rgb_to_grayscale(x), factor)


def adjust_hue(x: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """Rotates the hue by ``delta`` turns (RGB -> HSV, h = (h + delta) mod 1, HSV -> RGB), as torchvision."""
    return tf.clip_by_value(tf.image.adjust_hue(x, delta), 0.0, 1.0)


def color_jitter(x: tf.Tensor, factors: tf.Tensor, order: tf.Tensor) -> tf.Tensor:
    """Applies brightness, contrast, saturation and hue adjustments in the given order.

    Args:
      x: float32 [H, W, 3] in [0, 1].
      factors: float32 [4] = (brightness, contrast, saturation, hue delta).
      order: int32 [4], a permutation of {0, 1, 2, 3} (BRIGHTNESS, CONTRAST, SATURATION, HUE);
        order[i] is the adjustment applied at step i.
    """
    factors = tf.cast(factors, tf.float32)
    order = tf.cast(order, tf.int32)
    branches = [
        lambda y: adjust_brightness(y, factors[BRIGHTNESS]),
        lambda y: adjust_contrast(y, factors[CONTRAST]),
        lambda y: adjust_saturation(y, factors[SATURATION]),
        lambda y: adjust_hue(y, factors[HUE]),
    ]
    for i in range(4):
        # Bind the current x in each branch (default argument) so switch_case runs only one of them.
        x = tf.switch_case(order[i], [lambda f=f, y=x: f(y) for f in branches])
    return x


def adjust_hue_batch(x: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """``adjust_hue`` of images [B, H, W, 3] by a per-example delta [B] (tf.image.adjust_hue takes a scalar)."""
    hsv = tf.image.rgb_to_hsv(x)
    hue = tf.math.floormod(hsv[..., :1] + tf.reshape(delta, [-1, 1, 1, 1]), 1.0)
    return tf.clip_by_value(tf.image.hsv_to_rgb(tf.concat([hue, hsv[..., 1:]], -1)), 0.0, 1.0)


def color_jitter_batch(x: tf.Tensor, factors: tf.Tensor, order: tf.Tensor) -> tf.Tensor:
    """``color_jitter`` of images [B, H, W, 3] with per-example factors [B, 4] and orders [B, 4].

    At each of the 4 positions every adjustment is computed for the whole batch and each example keeps
    the one its order names: batched tensor ops only (no per-example control flow), so it runs on an
    accelerator and under XLA; 4x the arithmetic of one pass, which is small next to a ResNet step.
    """
    factors = tf.cast(factors, tf.float32)
    order = tf.cast(order, tf.int32)
    per_example = [tf.reshape(factors[:, i], [-1, 1, 1, 1]) for i in range(4)]
    for i in range(4):
        candidates = [
            adjust_brightness(x, per_example[BRIGHTNESS]),
            adjust_contrast(x, per_example[CONTRAST]),
            adjust_saturation(x, per_example[SATURATION]),
            adjust_hue_batch(x, factors[:, HUE]),
        ]
        pick = tf.reshape(order[:, i], [-1, 1, 1, 1])
        x = candidates[HUE]
        for op in (BRIGHTNESS, CONTRAST, SATURATION):
            x = tf.where(tf.equal(pick, op), candidates[op], x)
    return x


def gaussian_blur_batch(x: tf.Tensor, sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """``gaussian_blur`` of images [B, H, W, C] with a per-example σ [B] (reflect padding, separable).

    The batch is folded into the channels so that one depthwise convolution applies every example's own
    kernel.
    """
    if kernel_size % 2 != 1 or kernel_size < 1:
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
    if kernel_size == 1:
        return x
    pad = (kernel_size - 1) // 2
    half = (kernel_size - 1) / 2.0
    t = tf.linspace(-half, half, kernel_size)
    pdf = tf.exp(-0.5 * tf.square(t[tf.newaxis, :] / tf.reshape(tf.cast(sigma, tf.float32), [-1, 1])))
    kernel = pdf / tf.reduce_sum(pdf, axis=1, keepdims=True)  # [B, k]
    shape = tf.shape(x)
    b, c = shape[0], x.shape[-1]
    padded = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    folded = tf.transpose(padded, [1, 2, 0, 3])  # [H', W', B, C]
    folded = tf.reshape(folded, [1, shape[1] + 2 * pad, shape[2] + 2 * pad, b * c])
    per_channel = tf.reshape(tf.repeat(kernel, c, axis=0), [b * c, kernel_size])  # channel b*C + ch
    ky = tf.reshape(tf.transpose(per_channel), [kernel_size, 1, b * c, 1])
    kx = tf.reshape(tf.transpose(per_channel), [1, kernel_size, b * c, 1])
    out = tf.nn.depthwise_conv2d(folded, ky, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.nn.depthwise_conv2d(out, kx, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.reshape(out, [shape[1], shape[2], b, c])
    return tf.transpose(out, [2, 0, 1, 3])


def gaussian_kernel1d(sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """Normalised 1-D Gaussian exp(-t^2 / (2 sigma^2)) on t = -(k-1)/2 .. (k-1)/2, as torchvision."""
    half = (kernel_size - 1) / 2.0
    t = tf.linspace(-half, half, kernel_size)
    pdf = tf.exp(-0.5 * tf.square(t / tf.cast(sigma, tf.float32)))
    return pdf / tf.reduce_sum(pdf)


def gaussian_blur(x: tf.Tensor, sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """Separable Gaussian blur with reflect padding (torchvision's gaussian_blur).

    TF has no Gaussian blur op (tensorflow-addons is gone), hence a depthwise convolution.

    Args:
      x: float32 [H, W, C] with H, W > (kernel_size - 1) / 2.
      sigma: scalar standard deviation in pixels.
      kernel_size: odd kernel size k; k = 1 is the identity.
    """
    if kernel_size % 2 != 1 or kernel_size < 1:
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
    if kernel_size == 1:
        return x
    pad = (kernel_size - 1) // 2
    channels = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    kernel = gaussian_kernel1d(sigma, kernel_size)
    ky = tf.tile(tf.reshape(kernel, [kernel_size, 1, 1, 1]), [1, 1, channels, 1])
    kx = tf.tile(tf.reshape(kernel, [1, kernel_size, 1, 1]), [1, 1, channels, 1])
    padded = tf.pad(x[tf.newaxis], [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    out = tf.nn.depthwise_conv2d(padded, ky, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.nn.depthwise_conv2d(out, kx, strides=[1, 1, 1, 1], padding="VALID")
    return out[0]


def solarize(x: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """x >= threshold -> 1 - x, else x (the paper's definition).

    TF has no solarize op. Note threshold = 1 (the "not applied" ω) still maps pixels equal to exactly
    1.0 to 0; the pipeline therefore skips the op instead of calling it with threshold 1.
    """
    return tf.where(x >= threshold, 1.0 - x, x)
