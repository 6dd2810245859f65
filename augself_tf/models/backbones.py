"""Every backbone by name: the ResNets (`resnet.py`) and the Vision Transformers (`vit.py`), built from one call."""

from __future__ import annotations

import keras

from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD
from augself_tf.models import resnet, vit

BACKBONES = (*resnet.BACKBONES, *vit.VIT_SIZES)


def is_vit(name: str) -> bool:
    """Whether backbone ``name`` is a Vision Transformer (its feature the class token, no batch norm)."""
    return name in vit.VIT_SIZES


def build(
    name: str,
    *,
    width: float = 1.0,
    synchronized_bn: bool = False,
    input_mean: tuple[float, ...] = IMAGENET_MEAN,
    input_std: tuple[float, ...] = IMAGENET_STD,
    image_size: int = 224,
    patch_size: int = 0,
    position: str = "sincos",
    drop_path: float = 0.0,
    frozen_patch_projection: bool = False,
) -> keras.Model:
    """Backbone ``name`` mapping [N, H, W, 3] images in [0, 1] to [N, d] features. A ResNet reads ``width`` and
    ``synchronized_bn``; a ViT reads ``image_size`` (its position embedding's grid), ``patch_size``, ``position``,
    ``drop_path`` and ``frozen_patch_projection`` (`vit.build_vit`).

    Raises:
      ValueError: an unknown name or a size no backbone of that name can take.
    """
    if is_vit(name):
        return vit.build_vit(name, image_size=image_size, patch_size=patch_size, position=position,
                             drop_path=drop_path, frozen_patch_projection=frozen_patch_projection,
                             input_mean=input_mean, input_std=input_std)
    if name not in resnet.BACKBONES:
        raise ValueError(f"unknown backbone '{name}'; choose from {', '.join(BACKBONES)}")
    return resnet.build_backbone(name, width, synchronized_bn=synchronized_bn, input_mean=input_mean,
                                 input_std=input_std)
