"""What the paper (and this project) knows about each dataset, written once: the dataset catalog.

One :class:`DatasetFacts` per dataset: our key (the tfds name where tfds has the dataset), the names people
and the paper use for it, its splits, where its validation set comes from, the metric its linear protocol
reports and the feature of its class label. The numbers are the paper's dataset table
(``table:dataset_info`` of ``paper/augself-neurips2021.tex``): where a dataset has no validation split the
paper holds out a fixed number of training images (Pets: 740 of 3680), recorded here as
``(validation, train+validation)``; every other dataset without one holds out :data:`DEFAULT_VAL_FRACTION`.

Readers: evaluation's hold-out and linear metric, the paper columns of the results table, the monitors'
default query split, the tfds source's label feature. A spec is looked up by its key (:func:`spec_key`: the
tfds name without config or version, or a folder's base name), so ``folder:/data/pets`` gets Pets' facts, as
``oxford_iiit_pet`` does. Adding a dataset is one entry of :data:`CATALOG`.
"""

from __future__ import annotations

import dataclasses

DEFAULT_VAL_FRACTION = 0.1
METRICS: tuple[str, ...] = ("top1", "mean_per_class")
#: Split names that are a dataset's own validation split, in the order they are looked for.
VAL_SPLIT_NAMES: tuple[str, ...] = ("val", "validation")


@dataclasses.dataclass(frozen=True)
class DatasetFacts:
    """One dataset of the catalog.

    Attributes:
      key: our name of it (the tfds name when tfds has it; results records and paper entries use it).
      title: the paper's name.
      aliases: other names of it (the paper's, common folder names), lower case.
      splits: its named splits (tfds' for a tfds dataset; the usual folder layout otherwise).
      val_split: its own validation split, or None.
      test_split: the split the paper tests on (tfds ``food101`` calls it ``validation``).
      paper_val: ``(validation, train+validation)`` images of the paper's hold-out from ``train`` when it
        has no validation split, or None (then :data:`DEFAULT_VAL_FRACTION`).
      metric: the linear protocol's test metric (``top1`` or ``mean_per_class``).
      label_key: the feature holding the class label the protocols classify (a tfds dataset's ``label`` is
        read from it; every source then calls it ``label``).
      fewshot: a few-shot dataset of the paper (its episodes are drawn from every labelled split).
      in_tfds: ``key`` is a tensorflow-datasets name (else the dataset is a folder or one of our sources).
    """

    key: str
    title: str
    aliases: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("train", "test")
    val_split: str | None = None
    test_split: str = "test"
    paper_val: tuple[int, int] | None = None
    metric: str = "top1"
    label_key: str = "label"
    fewshot: bool = False
    in_tfds: bool = True

    @property
    def val_fraction(self) -> float:
        """Fraction of ``train`` held out for validation when the dataset has no validation split."""
        if self.paper_val is None:
            return DEFAULT_VAL_FRACTION
        val, total = self.paper_val
        return val / total


_MEAN = "mean_per_class"

#: Every dataset the project knows, by key. The paper's table: validation and metric of (b), (c) few-shot.
CATALOG: dict[str, DatasetFacts] = {
    facts.key: facts
    for facts in (
        # Pretraining.
        DatasetFacts("shapes", "shapes (embedded synthetic)", in_tfds=False),
        DatasetFacts("imagenet100", "ImageNet100", ("in100",), ("train", "validation"), test_split="validation",
                     in_tfds=False),
        # Linear evaluation (b); STL10 is also the small pretraining set.
        DatasetFacts("stl10", "STL10", (), ("train", "test", "unlabelled"), paper_val=(500, 5000)),
        DatasetFacts("cifar10", "CIFAR10", ("cifar-10",), paper_val=(5000, 50000)),
        DatasetFacts("cifar100", "CIFAR100", ("cifar-100",), paper_val=(5000, 50000)),
        # tfds food101's 'validation' is the paper's test set (25250 images): its validation is held out of train.
        DatasetFacts("food101", "Food", ("food",), ("train", "validation"), test_split="validation",
                     paper_val=(7575, 75750)),
        DatasetFacts("mit67", "MIT67", ("mit_indoor67", "indoor67"), paper_val=(670, 5360), in_tfds=False),
        DatasetFacts("oxford_iiit_pet", "Pets", ("pets",), paper_val=(740, 3680), metric=_MEAN),
        DatasetFacts("oxford_flowers102", "Flowers", ("flowers", "flowers102"), ("train", "validation", "test"),
                     val_split="validation", metric=_MEAN),
        DatasetFacts("caltech101", "Caltech101", (), paper_val=(505, 3030), metric=_MEAN),
        DatasetFacts("cars196", "Cars", ("cars",), paper_val=(1650, 8144)),
        DatasetFacts("aircraft", "Aircraft", ("fgvc_aircraft",), ("train", "val", "test"), val_split="val",
                     metric=_MEAN, in_tfds=False),
        DatasetFacts("dtd", "DTD (split 1)", (), ("train", "validation", "test"), val_split="validation"),
        # tfds sun397 has a validation split; a SUN397 folder without one holds out the paper's count.
        DatasetFacts("sun397", "SUN397 (split 1)", (), ("train", "validation", "test"), val_split="validation",
                     paper_val=(3970, 19850)),
        # Few-shot (c).
        DatasetFacts("fc100", "FC100", (), ("train", "test", "all"), fewshot=True, in_tfds=False),
        DatasetFacts("caltech_birds2011", "CUB200", ("cub200", "cub", "cub_200_2011"), fewshot=True),
        DatasetFacts("plant_village", "Plant Disease", ("plant_disease", "plantvillage"), ("train",), fewshot=True),
    )
}

_BY_NAME: dict[str, DatasetFacts] = {
    name: facts for facts in CATALOG.values() for name in (facts.key, *facts.aliases)
}


def spec_key(spec: str) -> str:
    """The name a spec is looked up by: tfds name without config/version, folder base name, lower case.

    ``folder:/data/MIT67/`` -> ``mit67``; ``tfds:cifar10:3.0.2`` -> ``cifar10``; ``imagenet2012_subset/10pct``
    -> ``imagenet2012_subset``; ``imagenet100:folder:/x`` -> ``imagenet100``.
    """
    s = spec.strip()
    if s.startswith("folder:"):
        return s[len("folder:") :].rstrip("/").split("/")[-1].lower()
    if s.startswith("tfds:"):
        s = s[len("tfds:") :]
    return s.split("/")[0].split(":")[0].lower()


def lookup(spec: str) -> DatasetFacts | None:
    """The catalog entry of a spec or a name (key or alias), or None for a dataset the catalog lacks."""
    return _BY_NAME.get(spec_key(spec))


def canonical_key(spec: str) -> str:
    """Our key of a spec or name: the catalog key when known (``folder:/x/CUB200`` -> ``caltech_birds2011``),
    else :func:`spec_key`."""
    facts = lookup(spec)
    return facts.key if facts else spec_key(spec)


def val_fraction(spec: str) -> float:
    """Fraction of ``train`` held out for validation when the dataset has no validation split."""
    facts = lookup(spec)
    return facts.val_fraction if facts else DEFAULT_VAL_FRACTION


def linear_metric(spec: str, requested: str = "auto") -> str:
    """The linear protocol's metric of a dataset (``top1`` or ``mean_per_class``) unless ``requested`` names one.

    Raises:
      ValueError: ``requested`` is neither ``auto`` nor a metric.
    """
    if requested != "auto":
        if requested not in METRICS:
            raise ValueError(f"unknown linear metric {requested!r}: use auto, {', '.join(METRICS)}")
        return requested
    facts = lookup(spec) if spec else None
    return facts.metric if facts else "top1"


def label_key(spec: str) -> str:
    """The example key of a dataset's class label (``label`` for a dataset the catalog lacks)."""
    facts = lookup(spec)
    return facts.label_key if facts else "label"
