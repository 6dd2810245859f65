"""Stateless augmentations that return their parameters ω (no Keras).

Public API: ``AugmentConfig``, ``augment_view``, ``omega_diff``, ``AUGMENTATIONS``, ``AUGSELF_CHOICES``,
``parse_augself``, ``augment_view_for_device`` + ``finish_views`` (the device stage), ``augment_views`` with
``ViewPlan`` (N views that may copy each other's draws), and the modules: ``registry`` (order and publication),
``views`` (view plans), ``steps`` (step types, generic ω targets; the losses the entries name are in
``augself_tf.losses.augself_heads``), ``geometric`` / ``photometric`` (the steps), ``crop_sampler`` (torchvision's
crop box) and ``ops`` (image ops).
"""

from augself_tf.augment import crop_sampler, geometric, ops, photometric, registry, steps, views
from augself_tf.augment.augment_config import DEFAULT_JITTER_STRENGTH, AugmentConfig
from augself_tf.augment.pipeline import (
    PHOTOMETRIC_MODES,
    augment_view,
    augment_view_for_device,
    augment_views,
    finish_views,
    omega_diff,
)
from augself_tf.augment.registry import AUGMENTATIONS, AUGSELF_CHOICES, parse_augself
from augself_tf.augment.steps import Augmentation
from augself_tf.augment.views import TWO_VIEWS, ViewPlan, ViewSpec, leave_one_out

__all__ = [
    "AUGMENTATIONS",
    "AUGSELF_CHOICES",
    "DEFAULT_JITTER_STRENGTH",
    "AugmentConfig",
    "Augmentation",
    "PHOTOMETRIC_MODES",
    "TWO_VIEWS",
    "ViewPlan",
    "ViewSpec",
    "augment_view",
    "augment_view_for_device",
    "augment_views",
    "finish_views",
    "crop_sampler",
    "geometric",
    "leave_one_out",
    "omega_diff",
    "ops",
    "parse_augself",
    "photometric",
    "registry",
    "steps",
    "views",
]
