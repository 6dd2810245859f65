"""Stateless augmentations that return their parameters ω (no Keras).

Public API: ``AugmentConfig``, ``augment_view``, ``omega_diff``, ``AUGMENTATIONS``, ``AUGSELF_CHOICES``,
``parse_augself``, ``augment_view_for_device`` + ``finish_views`` (the device stage), and the ``registry`` /
``ops`` modules.
"""

from augself_tf.augment import ops, registry
from augself_tf.augment.config import DEFAULT_JITTER_STRENGTH, AugmentConfig
from augself_tf.augment.pipeline import (
    PHOTOMETRIC_MODES,
    augment_view,
    augment_view_for_device,
    finish_views,
    omega_diff,
)
from augself_tf.augment.registry import AUGMENTATIONS, AUGSELF_CHOICES, Augmentation, parse_augself

__all__ = [
    "AUGMENTATIONS",
    "AUGSELF_CHOICES",
    "DEFAULT_JITTER_STRENGTH",
    "AugmentConfig",
    "Augmentation",
    "PHOTOMETRIC_MODES",
    "augment_view",
    "augment_view_for_device",
    "finish_views",
    "omega_diff",
    "ops",
    "parse_augself",
    "registry",
]
