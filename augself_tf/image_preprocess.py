"""An image's pixels as the models see them: :func:`to_float_rgb` (any image -> float32 RGB in [0, 1]) and the
evaluation view, :func:`preprocess`: the shorter side resized to S (bicubic, antialiased, as torchvision's
``Resize(S, BICUBIC)``), a centre crop S×S, float32 in [0, 1] (the paper's appendix, "Evaluation protocol").

Below both the augmentations and the data: the pair stream's views start from :func:`to_float_rgb`
(augment/pipeline.py, through ``augment.ops``), its evaluation-view views and the evaluation view of
data/eval_view.py (which evaluation, the monitors and the precise-BN export read) are :func:`preprocess`'s pixels,
and neither package imports the other for them. One conversion serves both, so an image means the same numbers to
training and to evaluation: an integer image scaled by its dtype's maximum (uint8 / 255, a 16-bit PNG's uint16 /
65535), a float image taken to lie in [0, 1] and clipped to it.
"""

from __future__ import annotations

import tensorflow as tf


def to_float_rgb(image: tf.Tensor) -> tf.Tensor:
    """Image [H, W(, C)] -> float32 RGB [H, W, 3] in [0, 1]: the one conversion of both the augmentations and the
    evaluation view.

    Args:
      image: [H, W] or [H, W, C] with C in {1, 2, 3, 4} (may be dynamic). An integer dtype is scaled by its own
        maximum (``tf.image.convert_image_dtype``): uint8 / 255, uint16 (16-bit PNGs) / 65535. A float dtype is
        assumed to lie in [0, 1] and clipped to it.

    Returns:
      float32 [H, W, 3]: 1 (gray) or 2 (gray + alpha) channels give the gray replicated, a 4th (alpha) channel is
      dropped.
    """
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., tf.newaxis]
    if image.shape.rank is not None and image.shape.rank != 3:
        raise ValueError(f"expected an image of rank 2 or 3, got shape {image.shape}")
    if image.dtype.is_floating:
        image = tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 1.0)
    else:  # uint8: cast, times float32(1 / 255), the pair stream's pinned pixels
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
      image: one image [H, W(, C)], as :func:`to_float_rgb` takes it (uint8, uint16, float in [0, 1]).
      size: output side S.

    Returns:
      float32 [S, S, 3] in [0, 1].
    """
    image = to_float_rgb(image)
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
