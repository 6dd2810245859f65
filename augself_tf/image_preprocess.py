"""The evaluation view's pixels: the shorter side resized to S (bicubic, antialiased, as torchvision's
``Resize(S, BICUBIC)``), a centre crop S×S, float32 in [0, 1] (the paper's appendix, "Evaluation protocol").

Below both the augmentations and the data: the pair stream's evaluation-view views (augment/pipeline.py) and the
evaluation view of data/eval_view.py, which evaluation, the monitors and the precise-BN export read, are these
pixels, and neither package imports the other for them.
"""

from __future__ import annotations

import tensorflow as tf


def to_float_rgb_over_255(image: tf.Tensor) -> tf.Tensor:
    """Image [H, W(, C)] -> float32 [H, W, 3]: integers divided by 255 (whatever their dtype), floats kept.

    Floats are not clipped here (:func:`preprocess` clips after resizing); gray is replicated and alpha
    dropped. Unlike ``augment.ops.to_float_rgb``, which scales integers by their dtype's maximum and
    clips floats first: both give the same uint8 → [0, 1] mapping up to float rounding, but they are kept
    apart because merging them would move the last bits of recorded eval figures.
    """
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., None]
    if image.dtype.is_integer:
        image = tf.cast(image, tf.float32) / 255.0
    else:
        image = tf.cast(image, tf.float32)
    channels = image.shape[-1]
    if channels == 1:
        image = tf.tile(image, [1, 1, 3])
    elif channels == 2:
        image = tf.tile(image[..., :1], [1, 1, 3])
    elif channels == 4:
        image = image[..., :3]
    elif channels is None:
        c = tf.shape(image)[-1]
        image = tf.cond(c >= 3, lambda: image[..., :3], lambda: tf.tile(image[..., :1], [1, 1, 3]))
    return image


def center_crop_geometry(height: tf.Tensor, width: tf.Tensor, size: int) -> tuple[tf.Tensor, ...]:
    """torchvision ``Resize(size)`` + ``CenterCrop(size)`` geometry.

    Returns:
      (new_h, new_w, top, left) — the resized shape (shorter side = size, longer side truncated as in
      torchvision) and the crop offset in the resized image.
    """
    h = tf.cast(height, tf.float64)
    w = tf.cast(width, tf.float64)
    s = tf.constant(float(size), tf.float64)
    new_h = tf.where(h <= w, s, tf.floor(s * h / w))
    new_w = tf.where(h <= w, tf.floor(s * w / h), s)
    new_h = tf.cast(tf.maximum(new_h, s), tf.int32)
    new_w = tf.cast(tf.maximum(new_w, s), tf.int32)
    top = tf.cast(tf.round(tf.cast(new_h - size, tf.float64) / 2.0), tf.int32)
    left = tf.cast(tf.round(tf.cast(new_w - size, tf.float64) / 2.0), tf.int32)
    return new_h, new_w, top, left


def preprocess(image: tf.Tensor, size: int) -> tf.Tensor:
    """The eval view: shorter side resized to ``size`` (bicubic, antialiased), centre crop size×size.

    Args:
      image: one image [H, W(, C)], uint8 or float in [0, 1].
      size: output side S.

    Returns:
      float32 [S, S, 3] in [0, 1].
    """
    image = to_float_rgb_over_255(image)
    shape = tf.shape(image)
    new_h, new_w, top, left = center_crop_geometry(shape[0], shape[1], size)
    same = tf.logical_and(tf.equal(new_h, shape[0]), tf.equal(new_w, shape[1]))
    resized = tf.cond(
        same,
        lambda: image,
        lambda: tf.image.resize(image, tf.stack([new_h, new_w]), method="bicubic", antialias=True),
    )
    crop = resized[top : top + size, left : left + size, :]
    crop = tf.ensure_shape(crop, [size, size, 3])
    return tf.clip_by_value(crop, 0.0, 1.0)
