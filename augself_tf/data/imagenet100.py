"""``imagenet100`` / ``imagenet100:SPEC``: the paper's 100 ImageNet classes (CMC split) of another source.

The classes are the wnids in ``imagenet100.txt`` (package data), labelled 0..99 in that order, taken from
tfds ``imagenet2012`` (manual download) or from any other source SPEC whose class names are wnids, e.g.
``imagenet100:folder:/data/imagenet``. It reads its base source through the registry it is given, so it
never imports :mod:`augself_tf.data.sources`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np
import tensorflow as tf

from augself_tf.data import folder
from augself_tf.data.classes import class_ids_from_names, filter_classes
from augself_tf.data.source_base import DatasetNotPreparedError, Source, SourceInfo, unknown_split_error

# Images per split of the CMC ImageNet100 subset of ILSVRC-2012 (tfds ``imagenet2012`` split names).
IMAGENET100_SIZES: dict[str, int] = {"train": 126_689, "validation": 5_000}
DEFAULT_BASE = "imagenet2012"
_TFDS_DEFAULT_DIR = "tfds' default data_dir (~/tensorflow_datasets or $TFDS_DATA_DIR)"

# spec -> (registry key, source, argument): how the registry resolves the base spec.
Resolver = Callable[[str], tuple[str, Source, str]]


def wnids() -> list[str]:
    """The 100 wnids of ImageNet100 (CMC split) in the reference label order (package data)."""
    text = resources.files("augself_tf.data").joinpath("imagenet100.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


class ImageNet100:
    """The :class:`~augself_tf.data.source_base.Source` of ``imagenet100[:BASE]``; ``resolve`` finds BASE's source."""

    def __init__(self, resolve: Resolver):
        self._resolve = resolve

    def load(self, arg: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
        """The base split restricted to the 100 classes, labels 0..99 in :func:`wnids` order (tfds: filtered on
        the label before any image is decoded)."""
        kind, source, base_arg, ids = self._base(arg, split, data_dir)
        if kind == "tfds":  # the registry's tfds source: augself_tf.data.tfds_source
            return source.load(base_arg, split, data_dir=data_dir, classes=ids)
        return filter_classes(source.load(base_arg, split, data_dir=data_dir), ids)

    def records(self, arg: str, split: str, *, data_dir: str | None = None) -> Any:
        """The 100 classes for the pair stream (see ``augself_tf.data.sources.pair_records``): of tfds, its
        records filtered before decoding; of a folder, its file records; None for another base."""
        kind, source, base_arg, ids = self._base(arg, split, data_dir)
        if kind == "tfds":
            return source.records(base_arg, split, data_dir=data_dir, classes=ids)
        if kind != "folder":
            return None
        rows, decode = folder.records(base_arg, split, data_dir=data_dir)
        new_label = {old: new for new, old in enumerate(ids)}
        keep = np.array([int(label) in new_label for label in rows["label"]], bool)
        rows = {k: v[keep] for k, v in rows.items()}
        rows["label"] = np.array([new_label[int(label)] for label in rows["label"]], np.int64)
        return rows, decode

    def _base(self, arg: str, split: str, data_dir: str | None) -> tuple[str, Source, str, list[int]]:
        """(kind, source, argument, class ids) of the base spec. The base's size is not needed to read it (nor
        known under tfds.testing.mock_data)."""
        base = arg or DEFAULT_BASE
        ids = class_ids_from_names(self._base_info(base, split, data_dir, need_size=False), wnids())
        kind, source, base_arg = self._resolve(base)
        return kind, source, base_arg, ids

    def info(self, arg: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
        """SourceInfo of the 100-class subset (tfds: the CMC split's known sizes; folder: counted)."""
        base = arg or DEFAULT_BASE
        info = self._base_info(base, split, data_dir)
        names = wnids()
        keep = set(class_ids_from_names(info, names))
        kind, _, base_arg = self._resolve(base)
        if kind == "folder":  # count the listed classes' files (already scanned by folder.info)
            n: int | None = sum(1 for _, label in folder.files(base_arg, split, data_dir=data_dir) if label in keep)
        else:  # counting 1.28M tfds records would take minutes: the CMC split's known sizes
            n = IMAGENET100_SIZES[split]
        return dataclasses.replace(info, name=f"imagenet100:{info.name}", num_examples=n, num_classes=len(names),
                                   class_names=names, notes=f"ImageNet100 (CMC split) of {info.notes or info.name}")

    def _base_info(self, base: str, split: str, data_dir: str | None, need_size: bool = True) -> SourceInfo:
        kind, source, base_arg = self._resolve(base)
        if kind == "imagenet100":
            raise ValueError(f"imagenet100:{base}: the base source cannot itself be imagenet100")
        if kind == "tfds" and split not in IMAGENET100_SIZES:
            raise unknown_split_error(f"imagenet100:{base}", split, list(IMAGENET100_SIZES))
        try:
            info = source.info(base_arg, split, data_dir=data_dir)
        except DatasetNotPreparedError as e:
            if kind != "tfds":
                raise
            raise _not_prepared(base_arg, e.data_dir) from None
        if kind == "tfds" and need_size and not info.num_examples:  # no split sizes: mock_data, never real ImageNet
            raise _not_prepared(base_arg, data_dir or _TFDS_DEFAULT_DIR)
        return info


def _not_prepared(base: str, where: str) -> DatasetNotPreparedError:
    # ImageNet cannot be built from the network: say what the manual download needs.
    return DatasetNotPreparedError(
        f"imagenet100 reads tfds {base!r}, which is not prepared in {where}: put ILSVRC2012_img_train.tar "
        f"and ILSVRC2012_img_val.tar in DIR/downloads/manual, run `tfds build {base} --data_dir DIR` and "
        f"pass --data_dir=DIR; or use an ImageNet folder tree: --dataset=imagenet100:folder:PATH",
        name=base,
        data_dir=where,
    )
