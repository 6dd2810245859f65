"""E-SSL (Dangovski et al., "Equivariant Contrastive Learning", ICLR 2022): predict the rotation of a small extra crop.

Each example gets one extra view x̃, a small crop (`extend_views`: its own size and crop area range, the run's other
augmentations). The model rotates it by all four multiples of 90° (``tf.image.rot90``, exact), so 4B images go
through the online backbone as one batch, and a head reads the rotation k ∈ {0, 1, 2, 3} from their features:

    L_E-SSL = mean over the 4B images of CE(head(f(rot_k x̃)), k),  total = L_method + λ·L_E-SSL.

As the reference code (rdangovs/essl, ``rotate_images``): the four rotations of one crop, rotated counter-clockwise,
class k = k·90°; the head Linear(h)–LN–ReLU–Linear(h)–LN–ReLU–[Linear(b)–LN]–Linear(4) (ImageNet code: h = 2048,
b = 128 for SimCLR, 256 for SimSiam; CIFAR-10 code: h = 2048, no b); gradients reach the backbone. A run that
rotates its views as an augmentation (``--rotation_prob``) rotated x̃ by its own k₀ too: its four images are then
rot_{k₀+r} of the upright crop, labelled (k₀ + r) mod 4, the same set of (image, class) pairs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras
import tensorflow as tf

from augself_tf.augment.views import ViewPlan, ViewSpec, parse_area_range, side_pixels, view_keys
from augself_tf.flag_fields import option
from augself_tf.models.torch_init import Linear
from augself_tf.objectives.base import Objective

ROTATIONS = 4
MIN_CROP_PIXELS = 8  # below this a ResNet's stem leaves too little of the crop to tell its rotation


def rotation_head(hidden: int, bottleneck: int, name: str) -> keras.Sequential:
    """E-SSL's rotation predictor: Linear(hidden)–LN–ReLU–Linear(hidden)–LN–ReLU–[Linear(bottleneck)–LN]–Linear(4),
    torch.nn.Linear's initialisation, LayerNorm ε = 1e-5 (torch's), float32 under mixed precision."""
    stack: list[keras.layers.Layer] = []
    for i in (1, 2):
        stack += [Linear(hidden, name=f"{name}_fc{i}", dtype="float32"),
                  keras.layers.LayerNormalization(epsilon=1e-5, name=f"{name}_ln{i}", dtype="float32"),
                  keras.layers.ReLU(name=f"{name}_relu{i}", dtype="float32")]
    if bottleneck:
        stack += [Linear(bottleneck, name=f"{name}_fc3", dtype="float32"),
                  keras.layers.LayerNormalization(epsilon=1e-5, name=f"{name}_ln3", dtype="float32")]
    stack.append(Linear(ROTATIONS, name=f"{name}_out", dtype="float32"))
    return keras.Sequential(stack, name=name)


def rotate_four(images: tf.Tensor, k0: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """[B, s, s, 3] -> (the 4B images rot_r(x) for r = 0, 1, 2, 3, in blocks of B; their classes (k0 + r) mod 4).

    ``k0``: int [B], the rotation each image already carries (0 when None)."""
    n = tf.shape(images)[0]
    k0 = tf.zeros([n], tf.int32) if k0 is None else tf.cast(k0, tf.int32)
    rotated = tf.concat([tf.image.rot90(images, r) for r in range(ROTATIONS)], axis=0)
    labels = tf.concat([tf.math.floormod(k0 + r, ROTATIONS) for r in range(ROTATIONS)], axis=0)
    return rotated, labels


class ESSL(Objective):
    """The rotation head and its loss on the run's extra small crop (one view per example, rotated 4 ways here)."""

    key = "essl"
    weight_option = "essl_weight"

    @dataclasses.dataclass(frozen=True)
    class Options:  # each option field is a train_main flag
        essl_weight: float = option(0.0, "E-SSL: weight λ of the 4-way rotation loss on an extra small crop "
                                         "(0 = off; E-SSL's ImageNet SimCLR 0.4, SimSiam 0.08; CIFAR-10 0.4)")
        essl_crop_size: float = option(0.43, "E-SSL: side of the extra crop, a fraction of --image_size (<= 1) or "
                                             "pixels (> 1), at least 8 pixels (ImageNet code: 96 of 224 px; "
                                             "CIFAR-10 code: 16 of 32)")
        essl_crop_scale: str = option("0.05,0.14", "E-SSL: area range lo,hi of the extra crop as fractions of the "
                                                   "image (ImageNet code: 0.05,0.14; CIFAR-10 code: 0.2,1)")
        essl_hidden: int = option(0, "E-SSL: units of the rotation head's two hidden layers (0 = the backbone's "
                                     "feature size, as the ImageNet code's 2048 on ResNet-50)")
        essl_bottleneck: int = option(128, "E-SSL: units of the rotation head's layer before its 4-way output (0 = "
                                           "none, as the CIFAR-10 code; ImageNet code: SimCLR 128, SimSiam 256)")

        def __post_init__(self) -> None:
            size = self.essl_crop_size
            if not (math.isfinite(size) and size > 0):
                raise ValueError(f"--essl_crop_size must be a fraction of --image_size in (0, 1] or a number of "
                                 f"pixels >= {MIN_CROP_PIXELS}, got {size}")
            if size > 1 and (size != int(size) or size < MIN_CROP_PIXELS):
                raise ValueError(f"--essl_crop_size in pixels must be a whole number >= {MIN_CROP_PIXELS}, got "
                                 f"{size:g}")
            parse_area_range("essl_crop_scale", self.essl_crop_scale)
            for name in ("essl_hidden", "essl_bottleneck"):
                if getattr(self, name) < 0:
                    raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")

        @property
        def crop_scale(self) -> tuple[float, float]:
            """(lo, hi) of ``essl_crop_scale``."""
            return parse_area_range("essl_crop_scale", self.essl_crop_scale)

    @classmethod
    def extend_views(cls, plan: ViewPlan, options: ESSL.Options) -> ViewPlan:
        """The run's views and one more: a crop of ``--essl_crop_size`` and ``--essl_crop_scale``, drawn afresh."""
        size = options.essl_crop_size
        spec = ViewSpec(image_size=int(size), crop_scale=options.crop_scale) if size > 1 else \
            ViewSpec(size_fraction=float(size), crop_scale=options.crop_scale)
        return plan.with_view(spec)

    def __init__(self, options: Any = None, **kwargs) -> None:
        super().__init__(options, **kwargs)
        self.head: keras.Sequential | None = None

    def build_objective(self, model: keras.Model) -> None:
        """The head on the backbone's features; refuses an extra crop under 8 pixels at the run's image size."""
        o = self.options
        pixels = side_pixels(o.essl_crop_size, model.augment_config.image_size)
        if pixels < MIN_CROP_PIXELS:
            raise ValueError(f"--essl_crop_size={o.essl_crop_size:g} gives a {pixels}-pixel crop at --image_size="
                             f"{model.augment_config.image_size}; it must be at least {MIN_CROP_PIXELS} pixels")
        self.head = rotation_head(o.essl_hidden or model.feature_dim, o.essl_bottleneck, name="essl_head")
        self.head.build((None, model.feature_dim))

    def objective_loss(self, model, batch, forward, training):
        """Mean 4-way cross-entropy over the 4B rotations of the extra crop; logs ``essl/accuracy``."""
        del forward
        view_key, omega_key, _ = view_keys(self.view_index(model))
        images = tf.cast(batch[view_key], tf.float32)
        k0 = batch.get(omega_key, {}).get("rotation")
        k0 = None if k0 is None else tf.cast(tf.round(tf.cast(k0, tf.float32)), tf.int32)[:, 0]
        rotated, labels = rotate_four(images, k0)
        features = model.backbone(rotated, training=training)
        logits = tf.cast(self.head(tf.cast(features, tf.float32), training=training), tf.float32)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        hit = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
        return loss, {"essl/accuracy": tf.reduce_mean(hit)}
