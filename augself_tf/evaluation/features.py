"""Frozen features from exported SavedModels: loading, the eval preprocessing, batched extraction, cache.

Preprocessing is the paper's (appendix "Evaluation protocol"): resize the shorter side to S (bicubic,
antialiased, as torchvision's ``Resize(S, BICUBIC)``), centre-crop S×S, float32 in [0, 1]. Boxes
(``bbox``: ymin, xmin, ymax, xmax fractions of the original image) are re-expressed in the frame of the
crop the model sees (clipped to it) and also kept as ``bbox_original``.

Features are extracted once per (model, dataset, split, size, transform, max_examples) and cached in
memory for the run (:class:`FeatureExtractor`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.errors import EvalError, first_line

Log = Callable[[str], None]


def log_stderr(message: str) -> None:
    """Default progress sink: one line on stderr."""
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------
# SavedModel


@dataclasses.dataclass
class LoadedModel:
    """A SavedModel's ``serving_default`` signature wrapped as images -> features.

    Attributes:
      path: directory the SavedModel was loaded from.
      name: short display name (the model directory's name).
      input_name: keyword of the signature's image input.
      input_dtype: its dtype (float32 normally).
      output_key: the output used as features.
      fixed_size: (H, W) when the signature only accepts one image size, else None.
    """

    path: str
    name: str
    input_name: str
    input_dtype: tf.DType
    output_key: str
    fixed_size: tuple[int | None, int | None] | None
    _fn: Callable[..., dict] = dataclasses.field(repr=False)
    _module: object = dataclasses.field(repr=False, default=None)

    def check_size(self, size: int) -> None:
        """Raise :class:`EvalError` if the signature has a static image size other than ``size``."""
        if self.fixed_size is None:
            return
        h, w = self.fixed_size
        if (h is not None and h != size) or (w is not None and w != size):
            raise EvalError(
                f"model {self.name} only accepts {h}x{w} images but --image_size is {size}; "
                f"pass --image_size {h or w}"
            )

    def __call__(self, images: tf.Tensor) -> np.ndarray:
        """Features float32 [N, d] of float images [N, S, S, 3] in [0, 1]."""
        out = self._fn(**{self.input_name: tf.cast(images, self.input_dtype)})
        feats = out[self.output_key]
        if feats.shape.rank != 2:
            raise EvalError(
                f"model {self.name}: output {self.output_key!r} has shape {feats.shape}, expected [N, d]"
            )
        return feats.numpy().astype(np.float32, copy=False)


def model_display_name(path: str) -> str:
    """Short name of a model directory (``runs/simsiam/saved_model`` -> ``simsiam``)."""
    p = os.path.normpath(os.path.abspath(path))
    base = os.path.basename(p)
    if base in ("saved_model", "export", "model") and os.path.basename(os.path.dirname(p)):
        return os.path.basename(os.path.dirname(p))
    return base


def _resolve_saved_model_dir(path: str) -> str:
    if not path:
        raise EvalError("no SavedModel given: pass --saved_model PATH")
    if not os.path.exists(path):
        raise EvalError(f"SavedModel not found: {path}")
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "saved_model.pb")):
        nested = os.path.join(path, "saved_model")
        if os.path.exists(os.path.join(nested, "saved_model.pb")):
            return nested
        raise EvalError(f"not a SavedModel directory (no saved_model.pb): {path}")
    if not os.path.isdir(path):
        raise EvalError(f"not a SavedModel directory: {path}")
    return path


def load_model(path: str) -> LoadedModel:
    """Load an exported feature extractor.

    The SavedModel must have a ``serving_default`` signature with one floating-point image input
    ([N, H, W, 3], values in [0, 1]) and either a ``features`` output or exactly one output.

    Raises:
      EvalError: missing path, unloadable SavedModel, no usable signature.
    """
    path = _resolve_saved_model_dir(path)
    name = model_display_name(path)
    try:
        module = tf.saved_model.load(path)
    except Exception as e:  # noqa: BLE001 - any loader failure becomes one clear line
        raise EvalError(f"cannot load SavedModel {path}: {first_line(e)}") from None
    signatures = getattr(module, "signatures", {}) or {}
    if "serving_default" not in signatures:
        found = ", ".join(sorted(signatures)) or "none"
        raise EvalError(f"SavedModel {path} has no 'serving_default' signature (signatures: {found})")
    fn = signatures["serving_default"]
    args, kwargs = fn.structured_input_signature
    inputs = dict(kwargs)
    for i, spec in enumerate(args):
        inputs[getattr(spec, "name", None) or f"arg{i}"] = spec
    if len(inputs) != 1:
        raise EvalError(
            f"SavedModel {path}: serving_default must take exactly one image tensor, it takes {sorted(inputs)}"
        )
    (input_name, spec), = inputs.items()
    if not isinstance(spec, tf.TensorSpec) or not spec.dtype.is_floating:
        raise EvalError(
            f"SavedModel {path}: serving_default input {input_name!r} is {spec}, expected a float image "
            "tensor [N, H, W, 3]"
        )
    shape = spec.shape
    if shape.rank is not None and (shape.rank != 4 or shape[-1] not in (None, 3)):
        raise EvalError(
            f"SavedModel {path}: serving_default input {input_name!r} has shape {shape}, expected [N, H, W, 3]"
        )
    fixed = None
    if shape.rank == 4 and (shape[1] is not None or shape[2] is not None):
        fixed = (shape[1], shape[2])
    outputs = fn.structured_outputs
    if not isinstance(outputs, dict) or not outputs:
        raise EvalError(f"SavedModel {path}: serving_default returns no named outputs")
    if "features" in outputs:
        key = "features"
    elif len(outputs) == 1:
        key = next(iter(outputs))
    else:
        raise EvalError(
            f"SavedModel {path}: serving_default has outputs {sorted(outputs)}; expected 'features' or one output"
        )
    return LoadedModel(path, name, input_name, spec.dtype, key, fixed, _fn=fn, _module=module)


# ----------------------------------------------------------------------------------------------------
# Preprocessing


def to_float_rgb(image: tf.Tensor) -> tf.Tensor:
    """uint8/float image [H, W(, C)] -> float32 [H, W, 3] in [0, 1] (gray replicated, alpha dropped)."""
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., None]
    if image.dtype.is_integer:
        image = tf.cast(image, tf.float32) / 255.0
    else:
        image = tf.cast(image, tf.float32)
    channels = image.shape[-1]
    if channels == 1:
        image = tf.tile(image, [1, 1, 3])
    elif channels == 2:
        image = tf.tile(image[..., :1], [1, 1, 3])
    elif channels == 4:
        image = image[..., :3]
    elif channels is None:
        c = tf.shape(image)[-1]
        image = tf.cond(c >= 3, lambda: image[..., :3], lambda: tf.tile(image[..., :1], [1, 1, 3]))
    return image


def center_crop_geometry(height: tf.Tensor, width: tf.Tensor, size: int) -> tuple[tf.Tensor, ...]:
    """torchvision ``Resize(size)`` + ``CenterCrop(size)`` geometry.

    Returns:
      (new_h, new_w, top, left) — the resized shape (shorter side = size, longer side truncated as in
      torchvision) and the crop offset in the resized image.
    """
    h = tf.cast(height, tf.float64)
    w = tf.cast(width, tf.float64)
    s = tf.constant(float(size), tf.float64)
    new_h = tf.where(h <= w, s, tf.floor(s * h / w))
    new_w = tf.where(h <= w, tf.floor(s * w / h), s)
    new_h = tf.cast(tf.maximum(new_h, s), tf.int32)
    new_w = tf.cast(tf.maximum(new_w, s), tf.int32)
    top = tf.cast(tf.round(tf.cast(new_h - size, tf.float64) / 2.0), tf.int32)
    left = tf.cast(tf.round(tf.cast(new_w - size, tf.float64) / 2.0), tf.int32)
    return new_h, new_w, top, left


def preprocess(image: tf.Tensor, size: int) -> tf.Tensor:
    """The eval view: shorter side resized to ``size`` (bicubic, antialiased), centre crop size×size.

    Args:
      image: one image [H, W(, C)], uint8 or float in [0, 1].
      size: output side S.

    Returns:
      float32 [S, S, 3] in [0, 1].
    """
    image = to_float_rgb(image)
    shape = tf.shape(image)
    new_h, new_w, top, left = center_crop_geometry(shape[0], shape[1], size)
    same = tf.logical_and(tf.equal(new_h, shape[0]), tf.equal(new_w, shape[1]))
    resized = tf.cond(
        same,
        lambda: image,
        lambda: tf.image.resize(image, tf.stack([new_h, new_w]), method="bicubic", antialias=True),
    )
    crop = resized[top : top + size, left : left + size, :]
    crop = tf.ensure_shape(crop, [size, size, 3])
    return tf.clip_by_value(crop, 0.0, 1.0)


def bbox_to_crop_frame(bbox: tf.Tensor, height: tf.Tensor, width: tf.Tensor, size: int) -> tf.Tensor:
    """(ymin, xmin, ymax, xmax) fractions of the original image -> fractions of the centre crop, clipped.

    NaN coordinates (no box) stay NaN.
    """
    new_h, new_w, top, left = center_crop_geometry(height, width, size)
    bbox = tf.cast(bbox, tf.float32)
    nh, nw = tf.cast(new_h, tf.float32), tf.cast(new_w, tf.float32)
    top_f, left_f = tf.cast(top, tf.float32), tf.cast(left, tf.float32)
    s = float(size)
    ys = (bbox[0::2] * nh - top_f) / s
    xs = (bbox[1::2] * nw - left_f) / s
    out = tf.stack([ys[0], xs[0], ys[1], xs[1]])
    clipped = tf.clip_by_value(out, 0.0, 1.0)
    return tf.where(tf.math.is_nan(out), out, clipped)  # a missing box (NaN) stays missing


def rotate_image(image: tf.Tensor, k: int) -> tf.Tensor:
    """Rotate a square image [S, S, 3] by k·90° counter-clockwise."""
    return tf.image.rot90(image, k=k)


#: The six RGB channel orders of the colour-permutation probe, index = class.
CHANNEL_PERMUTATIONS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0),
)


def transform_fn(name: str | None) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """Image transforms applied after preprocessing: ``rot{k}`` (k·90°) and ``perm{i}`` (channel order i)."""
    if not name:
        return None
    if name.startswith("rot") and name[3:].isdigit():
        k = int(name[3:])
        return lambda img: rotate_image(img, k)
    if name.startswith("perm") and name[4:].isdigit():
        perm = list(CHANNEL_PERMUTATIONS[int(name[4:])])
        return lambda img: tf.gather(img, perm, axis=-1)
    raise ValueError(f"unknown image transform {name!r}")


# ----------------------------------------------------------------------------------------------------
# Extraction


@dataclasses.dataclass
class FeatureSet:
    """Features of one split with the per-example fields that came with the images.

    Attributes:
      features: float32 [n, d].
      fields: per-example arrays: integer labels (``label``, ``color``, ...), ``bbox`` (crop frame) and
        ``bbox_original``, ``index`` (position in the source split).
      images: uint8 thumbnails [n, t, t, 3] of the preprocessed views, if requested.
      source: "dataset/split[/transform]" description.
    """

    features: np.ndarray
    fields: dict[str, np.ndarray]
    images: np.ndarray | None = None
    source: str = ""

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def labels(self, key: str = "label") -> np.ndarray:
        """Integer labels under ``key``; :class:`EvalError` if the examples have none."""
        if key not in self.fields:
            have = sorted(k for k in self.fields if k not in ("bbox", "bbox_original", "index"))
            raise EvalError(f"{self.source}: examples have no {key!r} label (labels: {', '.join(have) or 'none'})")
        return self.fields[key].astype(np.int64)

    def subset(self, idx: np.ndarray) -> FeatureSet:
        """Rows ``idx`` of this set."""
        return FeatureSet(
            self.features[idx],
            {k: v[idx] for k, v in self.fields.items()},
            None if self.images is None else self.images[idx],
            self.source,
        )

    @staticmethod
    def concat(sets: list[FeatureSet], source: str = "") -> FeatureSet:
        """Row-wise concatenation (fields present in every set)."""
        keys = set.intersection(*(set(s.fields) for s in sets))
        images = None
        if all(s.images is not None for s in sets):
            images = np.concatenate([s.images for s in sets])
        return FeatureSet(
            np.concatenate([s.features for s in sets]),
            {k: np.concatenate([s.fields[k] for s in sets]) for k in keys},
            images,
            source or "+".join(s.source for s in sets),
        )


class FeatureExtractor:
    """Runs models over dataset splits, once per (model, dataset, split, size, transform) per run.

    Args:
      loader: ``loader(spec, split) -> tf.data.Dataset`` of example dicts (see
        :class:`augself_tf.evaluation.datasets.DataAccess`).
      image_size: eval resolution S.
      batch_size: images per model call.
      max_examples: keep at most this many examples per split (a fixed-seed random subset), None = all.
      seed: seed of that subset.
      log: progress sink (one line at most every ``log_every`` seconds per extraction).
      thumb_size: side of the kept thumbnails (``keep_images``).
    """

    def __init__(
        self,
        loader: Callable[[str, str], tf.data.Dataset],
        *,
        image_size: int = 96,
        batch_size: int = 128,
        max_examples: int | None = None,
        seed: int = 0,
        log: Log | None = log_stderr,
        log_every: float = 10.0,
        thumb_size: int = 64,
    ):
        if image_size < 8:
            raise EvalError(f"--image_size must be at least 8, got {image_size}")
        if batch_size < 1:
            raise EvalError(f"--batch_size must be positive, got {batch_size}")
        self.loader = loader
        self.image_size = int(image_size)
        self.batch_size = int(batch_size)
        self.max_examples = max_examples if max_examples and max_examples > 0 else None
        self.seed = int(seed)
        self.log = log or (lambda _m: None)
        self.log_every = log_every
        self.thumb_size = int(min(thumb_size, image_size))
        self._cache: dict[tuple, FeatureSet] = {}
        self._sources: dict[tuple[str, str], tf.data.Dataset] = {}
        self.seconds = 0.0

    # -- datasets --

    def examples(
        self,
        spec: str,
        split: str,
        transform: str | None = None,
        view: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
    ) -> tf.data.Dataset:
        """Preprocessed examples {"image": float32 [S,S,3], fields...} of one split (subset applied).

        Args:
          spec, split: the source split.
          transform: name of an image transform applied after preprocessing (:func:`transform_fn`).
          view: instead of the centre crop, ``view(raw_image, index) -> float32 [S, S, 3]`` (e.g. an
            augmented view); boxes are then still expressed in the centre-crop frame.
        """
        try:
            ds = self._sources.get((spec, split))
            if ds is None:  # one source pipeline per split, shared by every transform and view
                ds = self._sources[(spec, split)] = self.loader(spec, split)
        except EvalError:
            raise
        except Exception as e:  # noqa: BLE001 - data-layer errors become one line
            raise EvalError(f"cannot load dataset {spec!r} split {split!r}: {first_line(e)}") from None
        if not isinstance(ds.element_spec, dict) or "image" not in ds.element_spec:
            raise EvalError(f"dataset {spec!r} split {split!r} does not yield dicts with an 'image'")
        size = self.image_size
        tfn = transform_fn(transform)
        keep = [
            k for k, s in ds.element_spec.items()
            if k != "image" and isinstance(s, tf.TensorSpec) and (s.dtype.is_integer or k == "bbox")
            and (s.shape.rank == 0 or (k == "bbox" and s.shape.rank == 1))
        ]

        @tf.autograph.experimental.do_not_convert  # plain graph code: no conversion, faster tracing
        def prep(index: tf.Tensor, ex: dict) -> dict:
            image = ex["image"]
            pixels = preprocess(image, size) if view is None else tf.ensure_shape(view(image, index), [size, size, 3])
            out = {"image": pixels, "index": index}
            if tfn is not None:
                out["image"] = tfn(out["image"])
            shape = tf.shape(image)
            for k in keep:
                if k == "bbox":
                    out["bbox"] = bbox_to_crop_frame(ex["bbox"], shape[0], shape[1], size)
                    out["bbox_original"] = tf.cast(ex["bbox"], tf.float32)
                else:
                    out[k] = tf.cast(ex[k], tf.int64)
            return out

        ds = ds.enumerate()
        shuffle_after = False
        if self.max_examples is not None:
            total = int(ds.cardinality())
            if total >= 0:  # known size: an exact fixed-seed random subset, chosen before preprocessing
                if total > self.max_examples:
                    rng = np.random.default_rng(self.seed)
                    mask = np.zeros(total, bool)
                    mask[rng.choice(total, self.max_examples, replace=False)] = True
                    table = tf.constant(mask)
                    ds = ds.filter(lambda i, _ex: tf.gather(table, i))
            else:
                shuffle_after = True
        ds = ds.map(prep, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if shuffle_after:
            buffer = int(min(10000, max(1000, 4 * self.max_examples)))
            ds = ds.shuffle(buffer, seed=self.seed, reshuffle_each_iteration=False).take(self.max_examples)
        return ds

    # -- model runs --

    def run(
        self,
        model: LoadedModel,
        ds: tf.data.Dataset,
        *,
        description: str,
        keep_images: bool = False,
    ) -> FeatureSet:
        """Features of a dataset of dicts whose ``image`` is already a float32 [S, S, 3] view."""
        return self.run_many(model, ds, description=description, keep_images=keep_images)[0]

    def run_many(
        self,
        model: LoadedModel,
        ds: tf.data.Dataset,
        *,
        description: str,
        transforms: Sequence[str | None] = (None,),
        keep_images: bool = False,
    ) -> list[FeatureSet]:
        """One pass over ``ds``: features of every batch under each of ``transforms`` (see
        :func:`transform_fn`; None = as is), one :class:`FeatureSet` per transform."""
        model.check_size(self.image_size)
        fns = [transform_fn(t) for t in transforms]
        batched = ds.batch(self.batch_size).prefetch(tf.data.AUTOTUNE)
        feats: list[list[np.ndarray]] = [[] for _ in fns]
        thumbs: list[list[np.ndarray]] = [[] for _ in fns]
        fields: dict[str, list[np.ndarray]] = {}
        start = last = time.perf_counter()
        count = 0
        try:
            for batch in batched:
                for j, fn in enumerate(fns):
                    images = batch["image"] if fn is None else fn(batch["image"])
                    try:
                        feats[j].append(model(images))
                    except EvalError:
                        raise
                    except (tf.errors.OpError, ValueError, TypeError) as e:
                        raise EvalError(
                            f"model {model.name} rejected a batch of {self.image_size}x{self.image_size} images: "
                            f"{first_line(e)}"
                        ) from None
                    if keep_images:
                        t = self.thumb_size
                        small = images if t == self.image_size else tf.image.resize(images, [t, t], antialias=True)
                        thumbs[j].append(np.round(np.clip(small.numpy(), 0, 1) * 255).astype(np.uint8))
                for k, v in batch.items():
                    if k != "image":
                        fields.setdefault(k, []).append(v.numpy())
                count += int(batch["image"].shape[0])
                now = time.perf_counter()
                if now - last >= self.log_every:
                    self.log(f"[features] {model.name} {description}: {count} images ({count / (now - start):.0f}/s)")
                    last = now
        except tf.errors.OpError as e:
            raise EvalError(f"{description}: reading the data failed: {first_line(e)}") from None
        seconds = time.perf_counter() - start
        self.seconds += seconds
        if count == 0:
            raise EvalError(f"{description}: no examples")
        names = "" if transforms == (None,) else f" x {len(fns)} transforms"
        self.log(f"[features] {model.name} {description}: {count} images{names} in {seconds:.1f}s")
        merged = {k: np.concatenate(v) for k, v in fields.items()}
        return [
            FeatureSet(
                np.concatenate(feats[j]),
                dict(merged),
                np.concatenate(thumbs[j]) if keep_images else None,
                description + (f"/{t}" if t else ""),
            )
            for j, t in enumerate(transforms)
        ]

    def extract(
        self,
        model: LoadedModel,
        spec: str,
        split: str,
        *,
        transform: str | None = None,
        keep_images: bool = False,
        view: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
        view_name: str | None = None,
    ) -> FeatureSet:
        """Cached features of ``spec``/``split`` (optionally after an image ``transform``).

        ``view``/``view_name``: see :meth:`examples`; ``view_name`` identifies the view in the cache.
        """
        if view is not None and not view_name:
            raise ValueError("a custom view needs a view_name for the cache")
        key = (model.path, spec, split, self.image_size, transform, view_name, self.max_examples, self.seed)
        hit = self._cache.get(key)
        if hit is not None and (hit.images is not None or not keep_images):
            return hit
        desc = f"{spec}/{split}" + (f"/{transform}" if transform else "") + (f"/{view_name}" if view_name else "")
        examples = self.examples(spec, split, transform, view)
        result = self.run(model, examples, description=desc, keep_images=keep_images)
        self._cache[key] = result
        return result

    def extract_many(self, model: LoadedModel, spec: str, split: str, transforms: Sequence[str]) -> list[FeatureSet]:
        """Cached features of ``spec``/``split`` under each image transform, in one pass over the data."""
        keys = [(model.path, spec, split, self.image_size, t, None, self.max_examples, self.seed) for t in transforms]
        if all(k in self._cache for k in keys):
            return [self._cache[k] for k in keys]
        results = self.run_many(
            model, self.examples(spec, split), description=f"{spec}/{split}", transforms=tuple(transforms)
        )
        for k, r in zip(keys, results, strict=True):
            self._cache[k] = r
        return results
