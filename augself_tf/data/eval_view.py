"""The evaluation view of an image: what evaluation and the training monitors show a backbone.

Preprocessing is the paper's (appendix "Evaluation protocol"; its pixels are `augself_tf.image_preprocess`'s,
which the augmentations' evaluation-view views share): resize the shorter side to S (bicubic, antialiased, as
torchvision's ``Resize(S, BICUBIC)``), centre-crop S×S, float32 in [0, 1]. Boxes
(``bbox``: ymin, xmin, ymax, xmax fractions of the original image) are re-expressed in the frame of the
crop the model sees (clipped to it). :data:`CHANNEL_PERMUTATIONS` are the six RGB orders the colour
probes (evaluation's ``colorperm``, the ``colorperm`` monitor) classify.
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.image_preprocess import center_crop_geometry, preprocess, to_float_rgb

__all__ = ["CHANNEL_PERMUTATIONS", "bbox_to_crop_frame", "center_crop_geometry", "preprocess", "to_float_rgb"]


def bbox_to_crop_frame(bbox: tf.Tensor, height: tf.Tensor, width: tf.Tensor, size: int) -> tf.Tensor:
    """(ymin, xmin, ymax, xmax) fractions of the original image -> fractions of the centre crop, clipped.

    NaN coordinates (no box) stay NaN.
    """
    new_h, new_w, top, left = center_crop_geometry(height, width, size)
    bbox = tf.cast(bbox, tf.float32)
    nh, nw = tf.cast(new_h, tf.float32), tf.cast(new_w, tf.float32)
    top_f, left_f = tf.cast(top, tf.float32), tf.cast(left, tf.float32)
    s = float(size)
    ys = (bbox[0::2] * nh - top_f) / s
    xs = (bbox[1::2] * nw - left_f) / s
    out = tf.stack([ys[0], xs[0], ys[1], xs[1]])
    clipped = tf.clip_by_value(out, 0.0, 1.0)
    return tf.where(tf.math.is_nan(out), out, clipped)  # a missing box (NaN) stays missing


#: The six RGB channel orders of the colour-permutation probe, index = class.
CHANNEL_PERMUTATIONS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0),
)
