"""``fc100`` / ``fc100:SPEC``: FC100's meta-test set, the 20 CIFAR-100 classes of its 4 test superclasses.

FC100 (Oreshkin et al., 2018) splits CIFAR-100 by superclass; the paper's few-shot protocol draws its
episodes from the meta-test classes (aquatic mammals, insects, medium mammals, people), train and test
images together: 12,000 images (its dataset table). Labels are 0..19 in the order of the CIFAR-100 fine
label ids (:data:`FC100_TEST_CLASSES`).

Splits: ``train`` and ``test`` are CIFAR-100's, restricted to the 20 classes; ``all`` is both (the
few-shot pool). The images come from tfds ``cifar100`` or from another source SPEC whose class names are
CIFAR-100's (``fc100:folder:/data/cifar100``). Like ``imagenet100`` it reads its base source through the
registry it is given, so it never imports :mod:`augself_tf.data.sources`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from augself_tf.data import folder
from augself_tf.data.classes import class_ids_from_names, filter_classes
from augself_tf.data.source_base import Source, SourceInfo, split_parts, unknown_split_error

#: FC100 meta-test classes (Oreshkin et al. 2018): CIFAR-100 fine label -> name, superclass order.
FC100_TEST_CLASSES: dict[int, str] = {
    4: "beaver", 30: "dolphin", 55: "otter", 72: "seal", 95: "whale",  # aquatic_mammals
    6: "bee", 7: "beetle", 14: "butterfly", 18: "caterpillar", 24: "cockroach",  # insects
    34: "fox", 63: "porcupine", 64: "possum", 66: "raccoon", 75: "skunk",  # medium_mammals
    2: "baby", 11: "boy", 35: "girl", 46: "man", 98: "woman",  # people
}
DEFAULT_BASE = "cifar100"
SPLITS: dict[str, str] = {"train": "train", "test": "test", "all": "train+test"}  # ours -> the base's
CIFAR100_CLASSES = 100  # CIFAR-100 is balanced: the 20 classes are a fifth of any of its splits

# spec -> (registry key, source, argument): how the registry resolves the base spec.
Resolver = Callable[[str], tuple[str, Source, str]]


def class_order() -> list[int]:
    """The CIFAR-100 fine labels of the 20 classes in label order (label i = ``class_order()[i]``)."""
    return sorted(FC100_TEST_CLASSES)


class FC100:
    """The :class:`~augself_tf.data.source_base.Source` of ``fc100[:BASE]``; ``resolve`` finds BASE's source."""

    def __init__(self, resolve: Resolver):
        self._resolve = resolve

    def _base(self, arg: str, split: str) -> tuple[str, Source, str, str]:
        """(registry key, source, argument) of the base and the base's split expression."""
        base = arg or DEFAULT_BASE
        kind, source, base_arg = self._resolve(base)
        if kind == "fc100":
            raise ValueError(f"fc100:{base}: the base source cannot itself be fc100")
        parts = []
        for part in split_parts(split):
            if part not in SPLITS:
                raise unknown_split_error(f"fc100:{arg}" if arg else "fc100", split, list(SPLITS))
            parts.append(SPLITS[part])
        return kind, source, base_arg, "+".join(parts)

    def _class_ids(self, kind: str, info: SourceInfo) -> list[int]:
        # tfds labels are CIFAR-100's fine ids (an unprepared tfds cifar100 names its classes "0".."99");
        # another base is matched by class name.
        if kind == "tfds":
            return class_order()
        return class_ids_from_names(info, [FC100_TEST_CLASSES[i] for i in class_order()])

    def load(self, arg: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
        """The base split restricted to the 20 classes, labels 0..19 in :func:`class_order` (tfds: filtered on
        the label before any image is decoded, so 4 of every 5 CIFAR-100 images are never decoded)."""
        kind, source, base_arg, base_split = self._base(arg, split)
        if kind == "tfds":  # the registry's tfds source (augself_tf.data.tfds_source); no need to describe it first
            return source.load(base_arg, base_split, data_dir=data_dir, classes=class_order())
        ids = self._class_ids(kind, source.info(base_arg, base_split, data_dir=data_dir))
        return filter_classes(source.load(base_arg, base_split, data_dir=data_dir), ids)

    def info(self, arg: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
        """SourceInfo of the 20-class subset (tfds: a fifth of CIFAR-100's split size; other bases: counted)."""
        kind, source, base_arg, base_split = self._base(arg, split)
        info = source.info(base_arg, base_split, data_dir=data_dir)
        ids = self._class_ids(kind, info)
        names = [FC100_TEST_CLASSES[i] for i in class_order()]
        if kind == "folder":
            keep = set(ids)
            n: int | None = sum(1 for _, label in folder.files(base_arg, base_split, data_dir=data_dir)
                                if label in keep)
        else:
            n = None if info.num_examples is None else info.num_examples * len(ids) // CIFAR100_CLASSES
        return dataclasses.replace(
            info, name=f"fc100:{info.name}", split=split, num_examples=n, num_classes=len(ids), class_names=names,
            splits=tuple(SPLITS), notes=f"FC100 meta-test classes of {info.notes or info.name}",
        )
