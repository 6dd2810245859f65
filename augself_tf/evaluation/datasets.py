"""Which splits each protocol reads, on top of the data layer (``augself_tf.data.sources``).

* linear / probes: ``train``, the dataset's own validation split if it has one (``val`` or
  ``validation``), else a fixed-seed random part of ``train`` of the paper's size (its dataset table:
  5000/50000 for CIFAR, 500/5000 for STL10, ...; 10% otherwise), and ``test``.
* few-shot: the whole pool — ``all`` when the source has it (folders), else every named split joined
  (``train+test`` for caltech_birds2011, ``train`` for plant_village); ``fc100`` is the FC100
  meta-test set: the 20 CIFAR-100 fine classes of FC100's 4 test superclasses (aquatic mammals,
  insects, medium mammals, people), train+test images (12,000, the paper's count).

:class:`DataAccess` is the seam between evaluation and the data layer; tests plug in in-memory
sources instead (``tests/eval_fakes.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.errors import EvalError, first_line

#: FC100 meta-test classes (Oreshkin et al. 2018): CIFAR-100 fine label -> name, superclass order.
FC100_TEST_CLASSES: dict[int, str] = {
    4: "beaver", 30: "dolphin", 55: "otter", 72: "seal", 95: "whale",  # aquatic_mammals
    6: "bee", 7: "beetle", 14: "butterfly", 18: "caterpillar", 24: "cockroach",  # insects
    34: "fox", 63: "porcupine", 64: "possum", 66: "raccoon", 75: "skunk",  # medium_mammals
    2: "baby", 11: "boy", 35: "girl", 46: "man", 98: "woman",  # people
}

#: (validation, train+validation) sizes of the paper's dataset table for datasets without a val split.
PAPER_VAL_SPLITS: dict[str, tuple[int, int]] = {
    "stl10": (500, 5000),
    "cifar10": (5000, 50000),
    "cifar100": (5000, 50000),
    "food101": (7575, 75750),
    "mit67": (670, 5360),
    "oxford_iiit_pet": (740, 3680),
    "caltech101": (505, 3030),
    "cars196": (1650, 8144),
    "sun397": (3970, 19850),
}
DEFAULT_VAL_FRACTION = 0.1
VAL_SPLIT_NAMES: tuple[str, ...] = ("val", "validation")


def dataset_key(spec: str) -> str:
    """Canonical short name of a spec: tfds name without config/version, folder base name, lower case."""
    s = spec.strip()
    if s.startswith("folder:"):
        return s[len("folder:") :].rstrip("/").split("/")[-1].lower()
    if s.startswith("tfds:"):
        s = s[len("tfds:") :]
    return s.split("/")[0].split(":")[0].lower()


def val_fraction(spec: str) -> float:
    """Fraction of ``train`` held out for validation when the dataset has no val split (paper's table)."""
    val, total = PAPER_VAL_SPLITS.get(dataset_key(spec), (0, 0))
    return val / total if total else DEFAULT_VAL_FRACTION


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
        """Example dicts of one split (``fc100`` handled here)."""
        from augself_tf.data import sources

        if dataset_key(spec) == "fc100" and not spec.startswith("folder:"):
            ds = sources.load_source("cifar100", "train+test" if split in ("all", "test") else split,
                                     data_dir=self.data_dir)
            return sources.filter_classes(ds, sorted(FC100_TEST_CLASSES))
        return sources.load_source(spec, split, data_dir=self.data_dir)

    def splits(self, spec: str) -> tuple[str, ...]:
        """Named splits of a source ('all' included when the source offers it)."""
        from augself_tf.data import sources

        if dataset_key(spec) == "fc100" and not spec.startswith("folder:"):
            return ("all",)
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
    if names and "train" not in names:
        raise EvalError(f"dataset {spec!r} has no 'train' split (splits: {', '.join(names)})")
    if names and "test" not in names:
        raise EvalError(f"dataset {spec!r} has no 'test' split (splits: {', '.join(names)})")
    val = next((v for v in VAL_SPLIT_NAMES if v in names), None)
    return LinearSplits("train", val, "test", val_fraction(spec))


def fewshot_split(access: DataAccess, spec: str) -> str:
    """The pool split expression for few-shot episodes (see the module docstring)."""
    names = access.splits(spec)
    if not names or "all" in names:
        return "all"
    usable = [n for n in names if n not in ("unlabeled", "unlabelled")]
    if not usable:
        raise EvalError(f"dataset {spec!r} has no labelled split for few-shot episodes")
    return "+".join(usable)

