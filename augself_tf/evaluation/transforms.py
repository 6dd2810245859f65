"""The transforms the probes apply to evaluation views (:mod:`augself_tf.data.eval_view`): rotations and
RGB channel orders, each a named :class:`ImageTransform`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from augself_tf.data.eval_view import CHANNEL_PERMUTATIONS


@dataclasses.dataclass(frozen=True)
class ImageTransform:
    """A named transform of preprocessed images (one image [S, S, 3] or a batch [N, S, S, 3]).

    The name keys the feature cache and names the probe's classes in the records (``rot1``, ``perm4``).
    """

    name: str
    apply: Callable[[tf.Tensor], tf.Tensor] = dataclasses.field(compare=False, repr=False)

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return self.apply(images)


def rotation(k: int) -> ImageTransform:
    """Rotation by k·90° counter-clockwise, named ``rot{k}``."""
    return ImageTransform(f"rot{k}", lambda images: tf.image.rot90(images, k=k))


def channel_order(i: int) -> ImageTransform:
    """RGB channels reordered as ``CHANNEL_PERMUTATIONS[i]``, named ``perm{i}``."""
    perm = list(CHANNEL_PERMUTATIONS[i])
    return ImageTransform(f"perm{i}", lambda images: tf.gather(images, perm, axis=-1))


#: The rotation probe's classes and the colour-permutation probe's classes, in class order.
ROTATIONS: tuple[ImageTransform, ...] = tuple(rotation(k) for k in range(4))
CHANNEL_ORDERS: tuple[ImageTransform, ...] = tuple(channel_order(i) for i in range(len(CHANNEL_PERMUTATIONS)))
