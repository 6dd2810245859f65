"""Which splits each protocol reads, on top of the data layer (``augself_tf.data.sources``).

* linear / probes: ``train``, the dataset's own validation split if it has one (``val`` or
  ``validation``), else a fixed-seed random part of ``train`` of the paper's size (the dataset catalog,
  :mod:`augself_tf.data.catalog`: 5000/50000 for CIFAR, 740/3680 for Pets, ...; 10% otherwise), and the
  test split (``test``; the catalog names another where the paper tests on one, tfds ``food101``'s
  ``validation``).
* few-shot: the whole pool — ``all`` when the source has it (folders, ``fc100``), else every named split
  joined (``train+test`` for caltech_birds2011, ``train`` for plant_village).

:class:`DataAccess` is the seam between evaluation and the data layer; tests plug in in-memory
sources instead (``tests/eval_fakes.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from augself_tf.data import catalog
from augself_tf.evaluation.estimators.errors import EvalError, first_line


def split_train_val(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-seed random (train, val) index split of ``n`` items; val gets round(fraction·n), at least 1."""
    if n < 2:
        raise EvalError(f"need at least 2 training examples to hold out a validation split, got {n}")
    n_val = int(min(n - 1, max(1, round(fraction * n))))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


class DataAccess:
    """Data-layer access used by evaluation: load a split, list a source's splits.

    Default: :func:`augself_tf.data.sources.load_source` / ``source_info``.
    """

    def __init__(self, data_dir: str | None = None):
        self.data_dir = data_dir

    def load(self, spec: str, split: str) -> tf.data.Dataset:
        """Example dicts of one split."""
        from augself_tf.data import sources

        return sources.load_source(spec, split, data_dir=self.data_dir)

    def splits(self, spec: str) -> tuple[str, ...]:
        """Named splits of a source ('all' included when the source offers it)."""
        from augself_tf.data import sources

        for probe in ("train", "test", "all"):
            try:
                info = sources.source_info(spec, probe, data_dir=self.data_dir)
                return tuple(info.splits)
            except Exception:  # noqa: BLE001, S112 - try the next split name
                continue
        try:
            sources.source_info(spec, "train", data_dir=self.data_dir)
        except Exception as e:  # noqa: BLE001
            raise EvalError(f"dataset {spec!r}: {first_line(e)}") from None
        return ()


@dataclasses.dataclass(frozen=True)
class LinearSplits:
    """Where train/val/test come from for a linear protocol.

    Attributes:
      train, test: split names.
      val: the dataset's own validation split name, or None (then ``val_fraction`` of train is held out).
      val_fraction: fraction of train held out when ``val`` is None.
    """

    train: str
    val: str | None
    test: str
    val_fraction: float


def linear_splits(access: DataAccess, spec: str) -> LinearSplits:
    """The train/val/test plan of ``spec`` (see the module docstring)."""
    names = access.splits(spec)
    facts = catalog.lookup(spec)
    test = "test"
    if facts is not None and "test" not in names and facts.test_split in names:
        test = facts.test_split  # e.g. tfds food101: its 'validation' is the paper's test set
    if names and "train" not in names:
        raise EvalError(f"dataset {spec!r} has no 'train' split (splits: {', '.join(names)})")
    if names and test not in names:
        raise EvalError(f"dataset {spec!r} has no 'test' split (splits: {', '.join(names)})")
    val = next((v for v in catalog.VAL_SPLIT_NAMES if v in names and v != test), None)
    return LinearSplits("train", val, test, catalog.val_fraction(spec))


def fewshot_split(access: DataAccess, spec: str) -> str:
    """The pool split expression for few-shot episodes (see the module docstring)."""
    names = access.splits(spec)
    if not names or "all" in names:
        return "all"
    usable = [n for n in names if n not in ("unlabeled", "unlabelled")]
    if not usable:
        raise EvalError(f"dataset {spec!r} has no labelled split for few-shot episodes")
    return "+".join(usable)

