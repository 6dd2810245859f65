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
* any registered tensorflow-datasets name, optionally ``tfds:`` prefixed and with config/version
  (``stl10``, ``cifar10``, ``caltech_birds2011``, ``imagenet2012_subset/10pct``, ...).

Splits: ``+`` joins splits of any source (``train+unlabelled``, STL10's tfds spelling); tfds also takes its own slicing
syntax (``train[:10%]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

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
    "'folder:PATH' (PATH/<class>/* or PATH/<split>/<class>/*; without split folders 'all' plus a "
    "stratified 70/10/20 'train'/'val'/'test' partition; optional PATH/boxes.csv); "
    "or a tensorflow-datasets name, e.g. " + ", ".join(TFDS_EXAMPLES) + " (prepared under data_dir; "
    "no download). Splits may be joined with '+', e.g. 'train+unlabelled'."
)

_UNKNOWN = "unknown dataset {spec!r}: use a tfds name (stl10, cifar10, ...), 'folder:PATH' or 'shapes'"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What a consumer needs to know about one split of a source.

    Attributes:
      name: canonical spec of the source (``shapes``, ``folder:/abs/path``, ``cifar10``).
      split: the split (expression) described.
      num_examples: examples in the split, or None when unknown (e.g. tfds metadata not available).
      num_classes: number of ``label`` classes (labels are 0..num_classes-1; -1 means unlabeled).
      class_names: names of the ``label`` classes, index = label, or None when unknown.
      has_bbox: whether examples carry ``bbox`` (ymin, xmin, ymax, xmax fractions).
      extra_labels: extra integer label keys in each example -> their class names (e.g. ``color``).
      image_size: native (height, width) when every image has it, else None.
      splits: the source's named splits.
      notes: free text (split partition rule, bbox convention, ...).
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

    @property
    def extra_label_keys(self) -> list[str]:
        """Keys of the extra integer labels carried by each example."""
        return list(self.extra_labels)


def split_parts(split: str) -> list[str]:
    """Split a ``+``-joined split expression into its stripped, non-empty parts."""
    parts = [p.strip() for p in str(split).split("+")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"invalid split {split!r}: expected names joined by '+', e.g. 'train+test'")
    return parts


def unknown_split_error(source: str, split: str, valid: Sequence[str]) -> ValueError:
    """The ValueError raised for a split a source does not have (one line, names the valid splits)."""
    return ValueError(f"unknown split {split!r} for dataset {source!r}: valid splits are {', '.join(valid)}")


def _kind(spec: str) -> tuple[str, str]:
    """Dispatch a spec to ('shapes'|'folder'|'tfds', argument)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(_UNKNOWN.format(spec=spec))
    spec = spec.strip()
    if spec == "shapes":
        return "shapes", ""
    if spec == "imagenet100" or spec.startswith("imagenet100:"):
        return "imagenet100", spec[len("imagenet100:") :] or "imagenet2012"
    if spec.startswith("folder:"):
        path = spec[len("folder:") :]
        if not path:
            raise ValueError("dataset spec 'folder:' needs a path, e.g. 'folder:/data/my_images'")
        return "folder", path
    if spec.startswith("tfds:"):
        return "tfds", spec[len("tfds:") :]
    return "tfds", spec


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
      FileNotFoundError: a tfds dataset that is not prepared under ``data_dir``.
    """
    kind, arg = _kind(spec)
    if kind == "shapes":
        from augself_tf.data import shapes

        return shapes.load(split)
    if kind == "imagenet100":
        ids = class_ids_from_names(_imagenet100_base_info(arg, split, data_dir), imagenet100_wnids())
        return filter_classes(load_source(arg, split, data_dir=data_dir), ids)
    if kind == "folder":
        from augself_tf.data import folder

        return folder.load(arg, split, data_dir=data_dir)
    from augself_tf.data import tfds_source

    return tfds_source.load(arg, split, data_dir=data_dir)


def source_info(spec: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
    """Describe one split of a source without reading its images (see :class:`SourceInfo`).

    Same arguments and errors as :func:`load_source`, except that an unprepared tfds dataset is
    described from its code-level metadata (``num_examples`` None) instead of raising.
    """
    kind, arg = _kind(spec)
    if kind == "shapes":
        from augself_tf.data import shapes

        return shapes.info(split)
    if kind == "imagenet100":
        return _imagenet100_info(arg, split, data_dir)
    if kind == "folder":
        from augself_tf.data import folder

        return folder.info(arg, split, data_dir=data_dir)
    from augself_tf.data import tfds_source

    return tfds_source.info(arg, split, data_dir=data_dir)


def unknown_dataset_error(spec: str) -> ValueError:
    """The ValueError raised for a spec no source recognises."""
    return ValueError(_UNKNOWN.format(spec=spec))


def filter_classes(ds: tf.data.Dataset, class_ids: Sequence[int]) -> tf.data.Dataset:
    """Keep only examples whose ``label`` is in ``class_ids`` and relabel them to their position in it.

    E.g. ImageNet-100: ``filter_classes(load_source("imagenet2012", "train"), ids)`` with the 100 ids
    in the reference label order gives labels 0..99. Other keys pass through unchanged.

    Args:
      ds: dataset of example dicts with an int ``label``.
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


# Images per split of the CMC ImageNet100 subset of ILSVRC-2012 (tfds ``imagenet2012`` split names).
IMAGENET100_SIZES: dict[str, int] = {"train": 126_689, "validation": 5_000}


def imagenet100_wnids() -> list[str]:
    """The 100 wnids of ImageNet100 (CMC split) in the reference label order (package data)."""
    from importlib import resources

    text = resources.files("augself_tf.data").joinpath("imagenet100.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def _imagenet100_base_info(base: str, split: str, data_dir: str | None) -> SourceInfo:
    if _kind(base)[0] == "imagenet100":
        raise ValueError(f"imagenet100:{base}: the base source cannot itself be imagenet100")
    if _kind(base)[0] == "tfds" and split not in IMAGENET100_SIZES:
        raise unknown_split_error(f"imagenet100:{base}", split, list(IMAGENET100_SIZES))
    info = source_info(base, split, data_dir=data_dir)
    if _kind(base)[0] == "tfds" and not info.num_examples:
        where = data_dir or "tfds' default data_dir (~/tensorflow_datasets or $TFDS_DATA_DIR)"
        raise FileNotFoundError(
            f"imagenet100 reads tfds {base!r}, which is not prepared in {where}: put ILSVRC2012_img_train.tar "
            f"and ILSVRC2012_img_val.tar in DIR/downloads/manual, run `tfds build {base} --data_dir DIR` and pass "
            f"--data_dir=DIR; or use an ImageNet folder tree: --dataset=imagenet100:folder:PATH"
        )
    return info


def _imagenet100_info(base: str, split: str, data_dir: str | None) -> SourceInfo:
    info = _imagenet100_base_info(base, split, data_dir)
    wnids = imagenet100_wnids()
    keep = set(class_ids_from_names(info, wnids))
    kind, arg = _kind(base)
    if kind == "folder":  # count the listed classes' files (already scanned by folder.info)
        from augself_tf.data import folder

        files = folder._good_files(folder._scan(folder._resolve(arg, data_dir)), split)
        n: int | None = sum(1 for _, label in files if label in keep)
    else:  # counting 1.28M tfds records would take minutes: the CMC split's known sizes
        n = IMAGENET100_SIZES[split]
    return dataclasses.replace(info, name=f"imagenet100:{info.name}", num_examples=n, num_classes=len(wnids),
                               class_names=wnids, notes=f"ImageNet100 (CMC split) of {info.notes or info.name}")
