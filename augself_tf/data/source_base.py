"""What every data source shares: the :class:`Source` protocol, :class:`SourceInfo`, split parsing, errors.

Backends (``shapes``, ``folder``, ``tfds_source``, ``imagenet100``) import this module and nothing of
:mod:`augself_tf.data.sources`, which imports them to fill its registry: the dependency points one way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import tensorflow as tf

# Re-exported: every source reports its pair of these (SourceInfo.mean/std).
from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD, STL10_MEAN, STL10_STD  # noqa: F401

_UNKNOWN = "unknown dataset {spec!r}: use a tfds name (stl10, cifar10, ...), 'folder:PATH' or 'shapes'"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What a consumer needs to know about one split of a source.

    Attributes:
      name: canonical spec of the source (``shapes``, ``folder:/abs/path``, ``cifar10``).
      split: the split (expression) described.
      num_examples: examples in the split, or None when unknown (e.g. under ``tfds.testing.mock_data``).
      num_classes: number of ``label`` classes (labels are 0..num_classes-1; -1 means unlabeled).
      class_names: names of the ``label`` classes, index = label, or None when unknown.
      has_bbox: whether examples carry ``bbox`` (ymin, xmin, ymax, xmax fractions).
      extra_labels: extra integer label keys in each example -> their class names (e.g. ``color``).
      image_size: native (height, width) when every image has it, else None.
      splits: the source's named splits.
      notes: free text (split partition rule, bbox convention, ...).
      mean, std: per-channel statistics a model pretrained on this source normalises its input with.
    """

    name: str
    split: str
    num_examples: int | None
    num_classes: int
    class_names: list[str] | None = None
    has_bbox: bool = False
    extra_labels: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    image_size: tuple[int, int] | None = None
    splits: tuple[str, ...] = ()
    notes: str = ""
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    @property
    def extra_label_keys(self) -> list[str]:
        """Keys of the extra integer labels carried by each example."""
        return list(self.extra_labels)


class Source(Protocol):
    """One kind of data source, registered under a spec prefix in :data:`augself_tf.data.sources.SOURCES`.

    ``arg`` is the text after ``NAME:`` in the spec (``""`` for a bare ``NAME``). A module with these two
    functions is a Source.
    """

    def load(self, arg: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
        """Example dicts ``{"image": uint8 [H,W,3], "label": int64 [][, "bbox"][, extra labels]}`` of a split."""
        ...

    def info(self, arg: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
        """:class:`SourceInfo` of a split, without reading the images when the source can avoid it."""
        ...


def split_parts(split: str) -> list[str]:
    """Split a ``+``-joined split expression into its stripped, non-empty parts."""
    parts = [p.strip() for p in str(split).split("+")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"invalid split {split!r}: expected names joined by '+', e.g. 'train+test'")
    return parts


def unknown_split_error(source: str, split: str, valid: Sequence[str]) -> ValueError:
    """The ValueError raised for a split a source does not have (one line, names the valid splits)."""
    return ValueError(f"unknown split {split!r} for dataset {source!r}: valid splits are {', '.join(valid)}")


def unknown_dataset_error(spec: object) -> ValueError:
    """The ValueError raised for a spec no source recognises."""
    return ValueError(_UNKNOWN.format(spec=spec))


class DatasetNotPreparedError(FileNotFoundError):
    """A known dataset whose data is not in the data_dir searched (nothing is ever downloaded here).

    A FileNotFoundError, so the command-line tools report it as their one ``error:`` line.

    Attributes:
      name: the dataset (as the user spelt it).
      data_dir: the directory that was searched (tfds' default resolved when none was given).
    """

    def __init__(self, message: str, *, name: str, data_dir: str):
        super().__init__(message)
        self.name = name
        self.data_dir = data_dir
