"""Frozen features of dataset splits: batched model runs over preprocessed examples, cached per run.

Features are extracted once per (model, dataset, split, size, transform, view, max_examples, seed) and
kept in memory for the run (:class:`FeatureExtractor`), whichever protocols ask for them.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

import numpy as np
import tensorflow as tf

from augself_tf.data.eval_view import bbox_to_crop_frame, preprocess
from augself_tf.evaluation.estimators.errors import EvalError, first_line
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.transforms import ImageTransform
from augself_tf.progress import Progress


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


class FeatureExtractor:
    """Runs models over dataset splits, once per (model, dataset, split, size, transform) per run.

    Args:
      loader: ``loader(spec, split) -> tf.data.Dataset`` of example dicts (see
        :class:`augself_tf.evaluation.datasets.DataAccess`).
      image_size: eval resolution S.
      batch_size: images per model call.
      max_examples: keep at most this many examples per split (a fixed-seed random subset), None = all.
      seed: seed of that subset.
      log: progress lines (one per finished extraction), None = silent.
      progress_stream: where a long extraction draws its progress bar (None = no bar).
      bar_after: seconds an extraction runs before its bar appears (short ones print only their line).
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
        log: Callable[[str], None] | None = None,
        progress_stream: TextIO | None = None,
        bar_after: float = 10.0,
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
        self.progress_stream = progress_stream
        self.bar_after = bar_after
        self.thumb_size = int(min(thumb_size, image_size))
        self._cache: dict[tuple, FeatureSet] = {}
        self._sources: dict[tuple[str, str], tf.data.Dataset] = {}
        self.seconds = 0.0

    # -- datasets --

    def examples(
        self,
        spec: str,
        split: str,
        transform: ImageTransform | None = None,
        view: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
    ) -> tf.data.Dataset:
        """Preprocessed examples {"image": float32 [S,S,3], fields...} of one split (subset applied).

        Args:
          spec, split: the source split.
          transform: an image transform applied after preprocessing.
          view: instead of the centre crop, ``view(raw_image, index) -> float32 [S, S, 3]`` (e.g. an
            augmented view), or ``-> (pixels, {name: tensor})`` whose extra entries become per-example fields
            (an augmented view's ω); boxes are then still expressed in the centre-crop frame.
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
        keep = [
            k for k, s in ds.element_spec.items()
            if k != "image" and isinstance(s, tf.TensorSpec) and (s.dtype.is_integer or k == "bbox")
            and (s.shape.rank == 0 or (k == "bbox" and s.shape.rank == 1))
        ]

        @tf.autograph.experimental.do_not_convert  # plain graph code: no conversion, faster tracing
        def prep(index: tf.Tensor, ex: dict) -> dict:
            image = ex["image"]
            extra: dict = {}
            if view is None:
                pixels = preprocess(image, size)
            else:
                pixels = view(image, index)
                if isinstance(pixels, tuple):  # (pixels, extra per-example fields)
                    pixels, extra = pixels
                pixels = tf.ensure_shape(pixels, [size, size, 3])
            out = {"image": pixels, "index": index, **extra}
            if transform is not None:
                out["image"] = transform(out["image"])
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
                    # The subset's size is exact: declared, it sizes the progress bar.
                    ds = ds.apply(tf.data.experimental.assert_cardinality(self.max_examples))
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
        transforms: Sequence[ImageTransform | None] = (None,),
        keep_images: bool = False,
    ) -> list[FeatureSet]:
        """One pass over ``ds``: features of every batch under each of ``transforms`` (None = as is),
        one :class:`FeatureSet` per transform."""
        model.check_size(self.image_size)
        fns = list(transforms)
        total = int(ds.cardinality())
        bar = Progress(
            total if total >= 0 else None, f"[features] {model.name} {description}", unit="img",
            stream=self.progress_stream or sys.stderr, enabled=self.progress_stream is not None,
        )
        batched = ds.batch(self.batch_size).prefetch(tf.data.AUTOTUNE)
        feats: list[list[np.ndarray]] = [[] for _ in fns]
        thumbs: list[list[np.ndarray]] = [[] for _ in fns]
        fields: dict[str, list[np.ndarray]] = {}
        start = time.perf_counter()
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
                if time.perf_counter() - start >= self.bar_after:
                    bar.update(count)
        except tf.errors.OpError as e:
            raise EvalError(f"{description}: reading the data failed: {first_line(e)}") from None
        finally:
            bar.close()
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
                description + (f"/{t.name}" if t else ""),
            )
            for j, t in enumerate(transforms)
        ]

    def extract(
        self,
        model: LoadedModel,
        spec: str,
        split: str,
        *,
        transform: ImageTransform | None = None,
        keep_images: bool = False,
        view: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
        view_name: str | None = None,
    ) -> FeatureSet:
        """Cached features of ``spec``/``split`` (optionally after an image ``transform``).

        ``view``/``view_name``: see :meth:`examples`; ``view_name`` identifies the view in the cache.
        """
        if view is not None and not view_name:
            raise ValueError("a custom view needs a view_name for the cache")
        name = transform.name if transform else None
        key = (model.path, spec, split, self.image_size, name, view_name, self.max_examples, self.seed)
        hit = self._cache.get(key)
        if hit is not None and (hit.images is not None or not keep_images):
            return hit
        desc = f"{spec}/{split}" + (f"/{name}" if name else "") + (f"/{view_name}" if view_name else "")
        examples = self.examples(spec, split, transform, view)
        result = self.run(model, examples, description=desc, keep_images=keep_images)
        self._cache[key] = result
        return result

    def extract_many(
        self, model: LoadedModel, spec: str, split: str, transforms: Sequence[ImageTransform | None]
    ) -> list[FeatureSet]:
        """Cached features of ``spec``/``split`` under each image transform, in one pass over the data."""
        keys = [
            (model.path, spec, split, self.image_size, t.name if t else None, None, self.max_examples, self.seed)
            for t in transforms
        ]
        if all(k in self._cache for k in keys):
            return [self._cache[k] for k in keys]
        results = self.run_many(
            model, self.examples(spec, split), description=f"{spec}/{split}", transforms=tuple(transforms)
        )
        for k, r in zip(keys, results, strict=True):
            self._cache[k] = r
        return results
