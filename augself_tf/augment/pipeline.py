"""The augmentation pipeline: one view of one image with its parameters ω, and AugSelf targets."""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

from augself_tf.augment import ops, registry
from augself_tf.augment.config import AugmentConfig


def augment_view(
    image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig | None = None
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Draws one augmented view of one image, deterministically from ``seed``.

    Graph-safe (use it inside ``tf.data.Dataset.map``); all randomness is ``tf.random.stateless_*``.

    Args:
      image: one unbatched image [H, W] or [H, W, C], any (dynamic) H and W, C in {1, 2, 3, 4}
        (gray is replicated to RGB, alpha dropped); uint8 (or any integer dtype) or float in [0, 1].
      seed: int32 or int64 tensor of shape [2] (int32 and int64 seeds with equal values give equal views).
      config: the pipeline's parameters; ``AugmentConfig()`` if None.

    Returns:
      (view, omega): view float32 [S, S, 3] in [0, 1] with S = config.image_size; omega a dict of float32
      tensors {"crop": [4], "flip": [1], "color": [4], "blur": [1], "rotation": [1], "solarize": [1]}
      (see DESIGN.md §2 and ``registry``).
    """
    config = AugmentConfig() if config is None else config
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
    seed = tf.ensure_shape(seed, [2])
    step_seeds = tf.random.experimental.stateless_split(seed, num=registry.NUM_SEED_SLOTS)

    size = config.image_size
    view = ops.to_float_rgb(image)
    omega: dict[str, tf.Tensor] = {}
    for step in registry.PIPELINE:
        view, step_omega = step.apply(view, step_seeds[step.seed_slot], config)
        view = tf.ensure_shape(view, [size, size, 3])  # keep the static shape through tf.cond branches
        if step_omega is not None:
            omega[step.name] = tf.ensure_shape(tf.cast(step_omega, tf.float32), [step.omega_dim])
    view = tf.ensure_shape(tf.clip_by_value(view, 0.0, 1.0), [size, size, 3])
    return view, omega


def omega_diff(omega1: Mapping[str, tf.Tensor], omega2: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """AugSelf targets ω_diff(1, 2) for every registered augmentation present in both ω dicts.

    Works batched ([B, k] per entry) or unbatched ([k]). Conventions (DESIGN.md §2):
    crop (centre1 - centre2, size1 - size2) in view 1's displayed frame [.., 4]; flip 1.0 if equal [.., 1];
    color / blur / solarize ω1 - ω2; rotation (k1 - k2) mod 4 as int32 with the ω axis dropped ([B] or []).
    """
    return {
        name: aug.target(omega1, omega2)
        for name, aug in registry.AUGMENTATIONS.items()
        if name in omega1 and name in omega2
    }
