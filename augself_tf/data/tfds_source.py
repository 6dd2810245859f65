"""tensorflow-datasets sources, normalised to the common example dict.

Any registered tfds image-classification dataset works (``name``, ``name/config``, ``name:1.2.3``):
its image feature (the supervised input, else ``image``) becomes ``image`` uint8 RGB with 3 channels
(grayscale replicated, alpha dropped), its label (the supervised target, else ``label``) becomes
``label`` int64 (STL10's ``unlabelled`` split keeps its -1; a dataset with no label gets -1), and a
top-level ``bbox`` BBoxFeature (caltech_birds2011, cars196: ymin, xmin, ymax, xmax fractions) becomes
``bbox`` float32 [4]. Other features are neither decoded nor kept (``tfds.decode.PartialDecoding``), and the
image is decoded last, after a class filter (:func:`load`'s ``classes``) or a resume's skip (:func:`records`).

Nothing is downloaded: the data must already be prepared under ``data_dir`` (tfds' default
``~/tensorflow_datasets`` or ``$TFDS_DATA_DIR`` when None); otherwise :func:`load` and :func:`info` raise a
one-line :class:`~augself_tf.data.source_base.DatasetNotPreparedError` naming the directory searched and how to
prepare it. Under ``tfds.testing.mock_data`` nothing is prepared and both work (``num_examples`` None).
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import tensorflow as tf

from augself_tf.data import catalog
from augself_tf.data.classes import class_lookup
from augself_tf.data.source_base import (
    STL10_MEAN,
    STL10_STD,
    DatasetNotPreparedError,
    SourceInfo,
    unknown_dataset_error,
    unknown_split_error,
)
from augself_tf.data.tfds_records import TfdsRecords

# The input statistics the paper's code uses for a tfds dataset it pretrains on (others: ImageNet's).
_STATISTICS = {"stl10": {"mean": STL10_MEAN, "std": STL10_STD}}


def _tfds() -> Any:
    import tensorflow_datasets as tfds  # slow import (~3 s): only when a tfds source is used

    return tfds


def _builder(name: str, data_dir: str | None) -> Any:
    if not name:  # the spec was a bare 'tfds' or 'tfds:'
        raise unknown_dataset_error("tfds:")
    tfds = _tfds()
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise unknown_dataset_error(name) from None
    except ValueError as e:  # e.g. a malformed name/config/version
        raise ValueError(f"{unknown_dataset_error(name)} ({str(e).splitlines()[0]})") from None


def _keys(builder: Any) -> tuple[str, str | None, bool]:
    """(image key, label key or None, has bbox) of a builder's features."""
    tfds = _tfds()
    features = builder.info.features
    name = builder.info.full_name
    sup = builder.info.supervised_keys
    image_key = label_key = None
    if isinstance(sup, tuple) and len(sup) == 2 and all(isinstance(k, str) for k in sup):
        if sup[0] in features and isinstance(features[sup[0]], tfds.features.Image):
            image_key, label_key = sup
    if image_key is None:
        if "image" not in features or not isinstance(features["image"], tfds.features.Image):
            raise ValueError(f"tfds dataset {name!r} has no 'image' feature: not an image dataset")
        image_key = "image"
        label_key = "label" if "label" in features else None
    facts = catalog.lookup(builder.info.name)
    if facts is not None and facts.in_tfds and facts.label_key in features:
        label_key = facts.label_key  # the class label the paper's protocols classify (the catalog's)
    if label_key is not None:
        lab = features[label_key]
        if not isinstance(lab, tfds.features.ClassLabel):
            raise ValueError(f"tfds dataset {name!r}: label feature {label_key!r} is not a ClassLabel")
    has_bbox = "bbox" in features and isinstance(features["bbox"], tfds.features.BBoxFeature)
    return image_key, label_key, has_bbox


# tfds.Split constants as they appear in builder code.
_SPLIT_CONSTANTS = {"TRAIN": "train", "TEST": "test", "VALIDATION": "validation"}
_SPLIT_PART = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(\[[^\]]*\])?\s*$")


def declared_splits(builder: Any) -> tuple[str, ...]:
    """The split names a tfds builder declares, known before any data is downloaded or prepared.

    A prepared dataset's metadata is authoritative. Otherwise the names are read from the builder's own
    ``_split_generators`` source: tfds ships no offline split list, and ``tfds.testing.mock_data``
    accepts any split name, so without this a misspelt split passes every mocked test and fails only
    on real data. Returns () when neither gives names (validation is then left to tfds).
    """
    if builder.info.splits:
        return tuple(sorted(builder.info.splits))
    fn = getattr(type(builder), "_split_generators", None)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ()
    module = vars(sys.modules[fn.__module__])

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Attribute) and node.attr in _SPLIT_CONSTANTS:
            return _SPLIT_CONSTANTS[node.attr]
        if isinstance(node, ast.Name) and isinstance(module.get(node.id), str):
            return str(module[node.id])  # a module constant such as stl10's UNLABELLED
        return None

    names: set[str] = set()
    for node in ast.walk(tree):
        candidates: list[ast.AST] = []
        if isinstance(node, ast.Attribute) and node.attr in _SPLIT_CONSTANTS:
            candidates.append(node)  # tfds.Split.TRAIN passed anywhere (imagenet2012's helper calls)
        elif isinstance(node, ast.Call):
            candidates += [kw.value for kw in node.keywords if kw.arg in ("name", "split")]
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            candidates += [k for k in node.value.keys if k is not None]  # {"train": gen, ...}
        names.update(n for n in map(name_of, candidates) if n)
    return tuple(sorted(names))


def _check_split(builder: Any, split: str) -> int | None:
    """Validate ``split`` against the builder's declared splits; return its example count if known."""
    declared = declared_splits(builder)
    valid = [*declared, "(or tfds expressions such as 'train[:10%]+test')"]
    if declared:
        for part in str(split).split("+"):
            match = _SPLIT_PART.match(part)
            if not match or match.group(1) not in (*declared, "all"):
                raise unknown_split_error(builder.info.name, split, valid)
    splits = builder.info.splits
    if not splits:  # not prepared: the names are checked, the size is unknown
        return None
    try:
        return int(splits[split].num_examples)
    except Exception:  # tfds raises KeyError, ValueError or AssertionError here
        raise unknown_split_error(builder.info.name, split, valid) from None


def searched_data_dir(builder: Any) -> str:
    """The data_dir a builder reads from, tfds' default resolved when none was given."""
    path = os.fspath(builder.data_dir)  # DIR/name[/config]/version
    suffix = "/" + builder.info.full_name
    return path[: -len(suffix)] if path.endswith(suffix) else path


def not_prepared_error(name: str, builder: Any, data_dir: str | None) -> DatasetNotPreparedError:
    """The one-line error for a dataset tfds knows but whose data is not under the data_dir searched."""
    searched = searched_data_dir(builder)
    where = searched if data_dir is not None else f"{searched} (the default data_dir)"
    # Kept under ~250 characters: eval_main shortens error lines to 300.
    needs_archives = getattr(builder, "MANUAL_DOWNLOAD_INSTRUCTIONS", None)
    manual = " (manual download: archives in DIR/downloads/manual)" if needs_archives else ""
    return DatasetNotPreparedError(
        f"tfds dataset {name!r} is not prepared in {where}: build it with `tfds build {name} --data_dir DIR`"
        f"{manual} on a machine with network, copy DIR here and pass --data_dir=DIR; "
        "or use --dataset=folder:PATH for an image folder",
        name=name,
        data_dir=searched,
    )


def _as_dataset(builder: Any, name: str, split: str, data_dir: str | None, decoders: Any = None) -> tf.data.Dataset:
    """``builder.as_dataset(split)``, or the not-prepared error when tfds finds no data."""
    try:
        return builder.as_dataset(split=split, decoders=decoders)
    except AssertionError as e:  # tfds' own "could not find data in DIR" is an assertion
        if "could not find data" not in str(e) and "download_and_prepare" not in str(e):
            raise
        raise not_prepared_error(name, builder, data_dir) from None


def info(name: str, split: str, *, data_dir: str | None = None, require_prepared: bool = True) -> SourceInfo:
    """SourceInfo of a tfds dataset split.

    Args:
      name: tfds name (``name``, ``name/config``, ``name:1.2.3``).
      split: split name or tfds expression; the names are checked against the builder's declared splits.
      data_dir: tfds data directory (None: tfds' default).
      require_prepared: raise :class:`~augself_tf.data.source_base.DatasetNotPreparedError` when the data is not
        prepared; False describes it from code-level metadata instead (``num_examples`` None).
    """
    builder = _builder(name, data_dir)
    image_key, label_key, has_bbox = _keys(builder)
    num_examples = _check_split(builder, split)
    if require_prepared and num_examples is None:
        # No split metadata: either not prepared (raises) or tfds.testing.mock_data (builds a fake dataset).
        _as_dataset(builder, name, split, data_dir)
    features = builder.info.features
    if label_key is None:
        num_classes, class_names = 0, None
    else:
        lab = features[label_key]
        num_classes = int(lab.num_classes)
        names = list(lab.names)
        class_names = names if names and len(names) == num_classes else None
    shape = features[image_key].shape
    image_size = (int(shape[0]), int(shape[1])) if shape[0] is not None and shape[1] is not None else None
    return SourceInfo(
        name=name,
        split=split,
        num_examples=num_examples,
        num_classes=num_classes,
        class_names=class_names,
        has_bbox=has_bbox,
        image_size=image_size,
        splits=declared_splits(builder),
        notes=f"tfds {builder.info.full_name}" + (", bbox = tfds BBoxFeature" if has_bbox else ""),
        **_STATISTICS.get(name.split(":")[0].split("/")[0], {}),
    )


def _to_rgb_uint8(img: tf.Tensor) -> tf.Tensor:
    if img.dtype != tf.uint8:
        img = tf.image.convert_image_dtype(img, tf.uint8, saturate=True)
    channels = img.shape[-1]
    if channels == 3:
        return img
    if channels == 1:
        return tf.image.grayscale_to_rgb(img)
    if channels == 4:
        return img[..., :3]
    # Unknown channel count: decide per example (1 -> replicate, 2/4 -> drop alpha).
    img = tf.cond(tf.shape(img)[-1] < 3, lambda: tf.tile(img[..., :1], [1, 1, 3]), lambda: img[..., :3])
    img.set_shape([None, None, 3])
    return img


def _reading(builder: Any, image_key: str, label_key: str | None, has_bbox: bool, prepared: bool
             ) -> tuple[Any, Callable]:
    """tfds decoders parsing only the features used, the image left encoded; and the image's decoder to RGB.

    ``tfds.testing.mock_data`` cannot encode its random boxes (ymin > ymax fails), so a mocked bbox dataset is
    decoded by tfds (decoders None; the image then only needs its channels fixed).
    """
    if has_bbox and not prepared:
        return None, _to_rgb_uint8
    tfds = _tfds()
    keep = {image_key: True, **({label_key: True} if label_key else {}), **({"bbox": True} if has_bbox else {})}
    decoders = tfds.decode.PartialDecoding(keep, decoders={image_key: tfds.decode.SkipDecoding()})
    image = builder.info.features[image_key]
    return decoders, lambda encoded: _to_rgb_uint8(image.decode_example(encoded))


def load(name: str, split: str, *, data_dir: str | None = None, classes: Sequence[int] | None = None
         ) -> tf.data.Dataset:
    """``tf.data.Dataset`` of ``{"image", "label"[, "bbox"]}`` for a prepared tfds dataset split.

    ``classes``: keep only these labels, relabelled to their position in it, filtered before any image is
    decoded (ImageNet-100 of imagenet2012).
    """
    builder = _builder(name, data_dir)
    image_key, label_key, has_bbox = _keys(builder)
    prepared = _check_split(builder, split) is not None
    decoders, decode_image = _reading(builder, image_key, label_key, has_bbox, prepared)
    ds = _as_dataset(builder, name, split, data_dir, decoders)  # what tfds.load(..., download=False) does
    if ds.element_spec[image_key].dtype != tf.string:  # an as_dataset that decoded anyway (a test's mock)
        decode_image = _to_rgb_uint8
    relabel = class_lookup(classes) if classes is not None else None

    def label_of(ex: dict[str, tf.Tensor]) -> tf.Tensor:
        label = tf.cast(ex[label_key], tf.int64) if label_key else tf.constant(-1, tf.int64)
        return label if relabel is None else relabel(label)

    if relabel is not None:
        ds = ds.filter(lambda ex: label_of(ex) >= 0)

    def normalise(ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = {"image": decode_image(ex[image_key]), "label": label_of(ex)}
        if has_bbox:
            out["bbox"] = tf.cast(ex["bbox"], tf.float32)
        return out

    return ds.map(normalise, num_parallel_calls=tf.data.AUTOTUNE)


def _file_format(builder: Any) -> str:
    fmt = builder.info.file_format
    return str(getattr(fmt, "value", fmt) or "tfrecord")  # tfds' default format when none is recorded


def records(name: str, split: str, *, data_dir: str | None = None, classes: Sequence[int] | None = None
            ) -> TfdsRecords:
    """A tfds split for the pair stream (:class:`~augself_tf.data.tfds_records.TfdsRecords`): its files permuted
    per epoch and sharded by file across input pipelines, images decoded after the class filter and a skip."""
    builder = _builder(name, data_dir)
    image_key, label_key, has_bbox = _keys(builder)
    num_examples = _check_split(builder, split)
    decoders, decode_image = _reading(builder, image_key, label_key, has_bbox, num_examples is not None)
    files = stream = None
    if decoders is not None and num_examples is not None and _file_format(builder) == "tfrecord":
        files = [(str(f.filename), int(f.skip), int(f.take)) for f in builder.info.splits[split].file_instructions]
        features = decoders.extract_features(builder.info.features)
        parse = partial(features.deserialize_example, decoders=decoders.decoders)
    else:  # no record files to read ourselves (tfds.testing.mock_data, another file format)
        stream = _as_dataset(builder, name, split, data_dir, decoders)
        parse = None
    return TfdsRecords(files=files, stream=stream, parse=parse, image_key=image_key, label_key=label_key,
                       decode_image=decode_image, classes=classes, extra=("bbox",) if has_bbox else ())
