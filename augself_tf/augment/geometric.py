"""The geometric steps, applied in tf.data (the host stage): RandomResizedCrop, horizontal flip and rotation by
k·90°, each with its draws, ω, AugSelf target and ``--condition`` descriptor.

Targets (shapes for a batch of B; unbatched works the same without the leading B): crop [B,4] (centres in
view 1's displayed frame), flip [B,1] (1.0 if both views have the same flip), rotation [B] int32
((k1 - k2) mod 4, a class label for sparse softmax cross-entropy).
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.augment import ops
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.crop_sampler import crop_box
from augself_tf.augment.steps import (
    Augmentation,
    Descriptor,
    Omega,
    Params,
    Probability,
    applied_omega,
    as_is,
    coin,
    maybe,
    regression,
    split_seed,
)
from augself_tf.losses.augself_heads import (
    binary_cross_entropy,
    binary_error,
    categorical_cross_entropy,
    categorical_error,
)

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
    return {"applied": coin(seed, config.probability("flip_prob"))}


def _flip(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return maybe(params["applied"], lambda: tf.reverse(image, axis=[1]), image)  # only flipped views pay



# rotation by k·90° (host; commutes with the device stage) ---------------------------------------------


def _sample_rotation(seed: tf.Tensor, shape: tf.Tensor, config: AugmentConfig) -> Params:
    seeds = split_seed(seed, 2)
    applied = coin(seeds[0], config.probability("rotation_prob"))
    k = tf.random.stateless_uniform([], seed=seeds[1], minval=0, maxval=4, dtype=tf.int32)
    return {"k": tf.where(applied, k, 0)}


def _rotate(image: tf.Tensor, params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.ensure_shape(tf.image.rot90(image, params["k"]), image.shape)  # counter-clockwise


def _rotation_omega(params: Params, config: AugmentConfig) -> tf.Tensor:
    return tf.reshape(tf.cast(params["k"], tf.float32), [1])


# ----------------------------------------------------------------------------------------------- targets


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



# ----------------------------------------------------------------------------------- descriptors (--condition)


def _crop_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """(cy, cx, h, w) with the centre in the view's displayed frame: cx <- 1 - cx when the view is flipped."""
    del config
    crop = tf.cast(omega["crop"], tf.float32)
    flipped = tf.cast(omega["flip"], tf.float32) > 0.5
    cx = tf.where(flipped, 1.0 - crop[..., 1:2], crop[..., 1:2])
    return tf.concat([crop[..., 0:1], cx, crop[..., 2:4]], axis=-1)


def _rotation_descriptor(omega: Omega, config: AugmentConfig) -> tf.Tensor:
    """One-hot k of the rotation by k·90° (size 4, as the reference's disabled "rot" entry)."""
    del config
    k = tf.cast(tf.round(tf.cast(omega["rotation"], tf.float32)), tf.int32)[..., 0]
    return tf.one_hot(k, 4, dtype=tf.float32)


def _crop_relative(omega: Omega, other: Omega, config: AugmentConfig) -> tf.Tensor:
    """Relative crop: the AugSelf crop target (both centres in this view's displayed frame), as the reference's
    relative descriptors are its ``extract_diff``."""
    del config
    return crop_target(omega, other)


def _flip_relative(omega: Omega, other: Omega, config: AugmentConfig) -> tf.Tensor:
    """Relative flip: 1 if both views have the same flip (the reference's ``extract_diff``), not a difference."""
    del config
    return flip_target(omega, other)


def _rotation_relative(omega: Omega, other: Omega, config: AugmentConfig) -> tf.Tensor:
    """Relative rotation: one-hot (k − k_other) mod 4, the absolute descriptor's encoding of a relative k."""
    del config
    return tf.one_hot(rotation_target(omega, other), 4, dtype=tf.float32)


# ----------------------------------------------------------------------------------------------- the steps


CROP = regression(
    "crop", seed_slot=0, sample=_sample_crop, transform=_crop, omega=_crop_omega, omega_dim=4, target=crop_target,
    descriptors=(Descriptor("crop", 4, _crop_descriptor, _crop_relative),),
)
FLIP = Augmentation(
    name="flip", seed_slot=1, sample=_sample_flip, transform=_flip, omega=applied_omega, omega_dim=1,
    probability=Probability("flip_prob", 0.5, "Horizontal-flip probability."),
    head_dim=1, target=flip_target, loss=binary_cross_entropy, metric=binary_error,
    descriptors=(Descriptor("flip", 1, as_is("flip"), _flip_relative),),
)
ROTATION = Augmentation(
    name="rotation", seed_slot=5, sample=_sample_rotation, transform=_rotate, omega=_rotation_omega, omega_dim=1,
    commutes_with_device=True, descriptors=(Descriptor("rotation", 4, _rotation_descriptor, _rotation_relative),),
    probability=Probability("rotation_prob", 0.0, "Rotation probability (default 0.5 when rotation is predicted or "
                            "left out by --method=looc, else 0).", when_predicted=0.5),
    head_dim=4, target=rotation_target, loss=categorical_cross_entropy, metric=categorical_error,
)
