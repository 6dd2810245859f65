"""Dataset sources: one entry point from a spec string to a ``tf.data.Dataset`` of examples.

Every source yields dicts ``{"image": uint8 [H, W, 3], "label": int64 []}`` plus, when the source has
them, ``"bbox": float32 [4]`` (ymin, xmin, ymax, xmax as fractions of the image) and extra integer
labels such as ``"color": int64 []`` (listed in :attr:`SourceInfo.extra_labels`). Images keep their
native size (resizing is the consumer's business); the order is deterministic and NOT shuffled
per epoch (folders come in a fixed pseudo-random order, tfds in its stored order).

Specs (:data:`SOURCE_HELP`):

* ``shapes`` — embedded synthetic dataset (see :mod:`augself_tf.data.shapes`), no files needed;
* ``folder:PATH`` — an image tree (see :mod:`augself_tf.data.folder`);
* ``imagenet100`` / ``imagenet100:SPEC`` — the paper's 100 ImageNet classes (CMC split, wnids in
  ``imagenet100.txt``, labels 0..99 in that order) taken from tfds ``imagenet2012`` (manual download) or
  from another source SPEC with wnid class names, e.g. ``imagenet100:folder:/data/imagenet``;
* ``fc100`` / ``fc100:SPEC`` — FC100's meta-test set: the 20 CIFAR-100 classes of its 4 test superclasses
  (see :mod:`augself_tf.data.fc100`), from tfds ``cifar100`` or another source SPEC;
* any registered tensorflow-datasets name, optionally ``tfds:`` prefixed and with config/version
  (``stl10``, ``cifar10``, ``caltech_birds2011``, ``imagenet2012_subset/10pct``, ...).

Splits: ``+`` joins splits of any source (``train+unlabelled``, STL10's tfds spelling); tfds also takes its own slicing
syntax (``train[:10%]``).

Dispatch: a spec ``NAME`` or ``NAME:ARG`` goes to ``SOURCES[NAME]`` with ARG (``""`` for a bare NAME); a spec whose
NAME is not registered goes whole to tfds. A source is a module or object with ``load(arg, split, *, data_dir)`` and
``info(arg, split, *, data_dir)`` (:class:`~augself_tf.data.source_base.Source`), so adding one is one file plus
one line in :data:`SOURCES` (docs/architecture.md, "Data sources").
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from augself_tf.data import fc100, folder, imagenet100, shapes, tfds_source
from augself_tf.data.classes import class_ids_from_names, filter_classes
from augself_tf.data.imagenet100 import IMAGENET100_SIZES
from augself_tf.data.imagenet100 import wnids as imagenet100_wnids
from augself_tf.data.source_base import (
    DatasetNotPreparedError,
    Source,
    SourceInfo,
    split_parts,
    unknown_dataset_error,
    unknown_split_error,
)
from augself_tf.registries import Registry

__all__ = [
    "IMAGENET100_SIZES",
    "SOURCES",
    "SOURCE_HELP",
    "TFDS_EXAMPLES",
    "DatasetNotPreparedError",
    "Source",
    "SourceInfo",
    "class_ids_from_names",
    "filter_classes",
    "imagenet100_wnids",
    "load_source",
    "pair_records",
    "pair_source",
    "resolve",
    "source_info",
    "split_parts",
    "unknown_dataset_error",
    "unknown_split_error",
]

TFDS_EXAMPLES: tuple[str, ...] = (
    "stl10",
    "cifar10",
    "cifar100",
    "oxford_flowers102",
    "oxford_iiit_pet",
    "food101",
    "caltech101",
    "cars196",
    "dtd",
    "sun397",
    "caltech_birds2011",
    "plant_village",
    "imagenet2012_subset",
)

SOURCE_HELP = (
    "dataset specs: 'shapes' (embedded synthetic dataset, splits train/test, labels shape + color, bbox); "
    "'imagenet100' or 'imagenet100:SPEC' (the paper's 100 ImageNet classes, labels 0..99, from tfds imagenet2012 "
    "or from SPEC, e.g. 'imagenet100:folder:/data/imagenet'); "
    "'fc100' or 'fc100:SPEC' (FC100's 20 meta-test classes of CIFAR-100, splits train/test/all); "
    "'folder:PATH' (PATH/<class>/* or PATH/<split>/<class>/*; without split folders 'all' plus a "
    "stratified 70/10/20 'train'/'val'/'test' partition; optional PATH/boxes.csv); "
    "or a tensorflow-datasets name, e.g. " + ", ".join(TFDS_EXAMPLES) + " (prepared under data_dir; "
    "no download). Splits may be joined with '+', e.g. 'train+unlabelled'."
)

DEFAULT_SOURCE = "tfds"  # where a spec whose NAME is not registered goes, whole


def resolve(spec: str) -> tuple[str, Source, str]:
    """The registry entry of a spec: (registry key, source, argument passed to it).

    ``NAME:ARG`` or ``NAME`` with NAME registered -> ``(NAME, SOURCES[NAME], ARG or "")``; anything else is a
    tfds name (``cifar10``, ``imagenet2012_subset/10pct``, ``cifar10:3.0.2``) -> ``("tfds", ..., spec)``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise unknown_dataset_error(spec)
    spec = spec.strip()
    name, _, arg = spec.partition(":")
    if name in SOURCES:
        return name, SOURCES[name], arg
    return DEFAULT_SOURCE, SOURCES[DEFAULT_SOURCE], spec


# Spec prefix -> source. Adding a source: one module with load/info, one line here.
SOURCES: Registry[Source] = Registry("data source", {
    "shapes": shapes,
    "folder": folder,
    "tfds": tfds_source,
    "imagenet100": imagenet100.ImageNet100(resolve),
    "fc100": fc100.FC100(resolve),
})


def load_source(spec: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
    """Load one split of a source as a ``tf.data.Dataset`` of example dicts.

    Args:
      spec: ``shapes``, ``folder:PATH`` or a tfds name (see :data:`SOURCE_HELP`).
      split: split name or expression (``train``, ``test``, ``train+unlabelled``, tfds ``train[:10%]``).
      data_dir: tfds data directory (default: tfds' own, ``~/tensorflow_datasets``); for
        ``folder:PATH`` with a relative PATH, the directory PATH is looked up in first.

    Returns:
      Dataset of ``{"image": uint8 [H,W,3], "label": int64 [][, "bbox": float32 [4]][, extra labels]}``.

    Raises:
      ValueError: unknown dataset, unknown split, empty or missing folder.
      DatasetNotPreparedError: (a FileNotFoundError) a tfds dataset that is not prepared under ``data_dir``.
    """
    _, source, arg = resolve(spec)
    return source.load(arg, split, data_dir=data_dir)


def source_info(spec: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
    """Describe one split of a source without reading its images (see :class:`SourceInfo`).

    Same arguments and errors as :func:`load_source` (a tfds dataset not prepared under ``data_dir`` raises
    DatasetNotPreparedError here too, after its split names were checked).
    """
    _, source, arg = resolve(spec)
    return source.info(arg, split, data_dir=data_dir)


def pair_records(spec: str, split: str, *, data_dir: str | None = None) -> Any:
    """What the pair stream (``augself_tf.data.pretrain.make_pair_dataset``) reads of a split when the source
    offers cheaper than its decoded examples, else None (read the dataset of :func:`load_source`).

    A source offers it with a ``records(arg, split, *, data_dir)`` function: ``folder`` its file names and labels
    (fully permuted every epoch, decoded after); ``tfds`` (and ``imagenet100`` of it) its encoded records, files
    permuted per epoch and sharded by file across workers, class-filtered and skipped before decoding.
    """
    _, source, arg = resolve(spec)
    records = getattr(source, "records", None)
    return None if records is None else records(arg, split, data_dir=data_dir)


def pair_source(spec: str, split: str, *, data_dir: str | None = None, cache: bool = False) -> Any:
    """What the pair stream (``augself_tf.data.pretrain.make_pair_dataset``) reads of a split: the source's own
    records where it has them (:func:`pair_records`: folder file names, tfds encoded records), for a ``cache``d
    source of one image size its examples held in memory (fully permuted every epoch), else the tf.data source
    itself (:func:`load_source`, shuffled in the stream's buffer)."""
    records = None if cache else pair_records(spec, split, data_dir=data_dir)
    if records is not None:
        return records
    source = load_source(spec, split, data_dir=data_dir)
    if cache and all(s.shape.is_fully_defined() for s in tf.nest.flatten(source.element_spec)):
        rows = source.batch(1 << 30).get_single_element()
        return {k: v.numpy() for k, v in rows.items()}, lambda example: example
    return source
