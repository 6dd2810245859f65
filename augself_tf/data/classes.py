"""Class subsets of a source: keep some classes of a dataset and relabel them 0..K-1 (e.g. ImageNet-100)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from augself_tf.data.source_base import SourceInfo


def class_lookup(class_ids: Sequence[int]) -> Callable[[tf.Tensor], tf.Tensor]:
    """The function mapping an original label to its position in ``class_ids`` (int64), or -1 for a label not there.

    Args:
      class_ids: distinct non-negative original labels, in the new label order.
    """
    ids = [int(c) for c in class_ids]
    if not ids:
        raise ValueError("filter_classes: class_ids is empty")
    if len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError("filter_classes: class_ids must be distinct non-negative integers")
    lookup = [-1] * (max(ids) + 1)
    for new, old in enumerate(ids):
        lookup[old] = new
    table = tf.constant(lookup, tf.int64)
    size = tf.constant(len(lookup), tf.int64)

    def new_label(label: tf.Tensor) -> tf.Tensor:
        label = tf.cast(label, tf.int64)
        ok = (label >= 0) & (label < size)
        return tf.where(ok, tf.gather(table, tf.clip_by_value(label, 0, size - 1)), tf.constant(-1, tf.int64))

    return new_label


def filter_classes(ds: tf.data.Dataset, class_ids: Sequence[int]) -> tf.data.Dataset:
    """Keep only examples whose ``label`` is in ``class_ids`` and relabel them to their position in it.

    E.g. ImageNet-100: ``filter_classes(load_source("imagenet2012", "train"), ids)`` with the 100 ids
    in the reference label order gives labels 0..99. Other keys pass through unchanged.

    Args:
      ds: dataset of example dicts with an int ``label``.
      class_ids: distinct non-negative original labels, in the new label order.
    """
    new_label = class_lookup(class_ids)

    def relabel(ex: dict) -> dict:
        return {**ex, "label": new_label(ex["label"])}

    return ds.filter(lambda ex: new_label(ex["label"]) >= 0).map(relabel, num_parallel_calls=tf.data.AUTOTUNE)


def class_ids_from_names(info: SourceInfo, names: Sequence[str]) -> list[int]:
    """Map class names (e.g. ImageNet wnids) to the source's label ids, for :func:`filter_classes`."""
    if info.class_names is None:
        raise ValueError(f"dataset {info.name!r} has no class names")
    index = {n: i for i, n in enumerate(info.class_names)}
    missing = [n for n in names if n not in index]
    if missing:
        raise ValueError(f"{len(missing)} class name(s) not in {info.name!r}, e.g. {', '.join(missing[:5])}")
    return [index[n] for n in names]
