"""Test fakes of the evaluation code: tiny SavedModels, in-memory data sources, synthetic images.

* :func:`save_random_conv_model` — a fixed random 3×3 conv + ReLU + global mean/max pooling.
* :func:`save_oracle_color_model` — per-channel mean and std of the image (knows colour and channel order).
* :func:`save_oracle_box_model` — the bounding box of the bright pixels (knows where the object is).
* :func:`rectangle_images` — black images with one bright rectangle and its box, for the box oracle.
* :class:`MemorySources` — in-memory arrays served as dataset splits.

All models follow the export contract: ``serving_default(images: float32 [N, H, W, 3]) -> {"features"}``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.datasets import DataAccess
from augself_tf.evaluation.estimators.errors import EvalError

_SIG = [tf.TensorSpec([None, None, None, 3], tf.float32, name="images")]


class _RandomConv(tf.Module):
    def __init__(self, channels: int, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.kernel = tf.Variable(rng.normal(size=(3, 3, 3, channels)).astype(np.float32) / 3.0, trainable=False)

    @tf.function(input_signature=_SIG)
    def serve(self, images: tf.Tensor) -> dict:
        h = tf.nn.relu(tf.nn.conv2d(images, self.kernel, strides=2, padding="SAME"))
        return {"features": tf.concat([tf.reduce_mean(h, [1, 2]), tf.reduce_max(h, [1, 2])], axis=1)}


class _OracleColor(tf.Module):
    @tf.function(input_signature=_SIG)
    def serve(self, images: tf.Tensor) -> dict:
        mean = tf.reduce_mean(images, [1, 2])
        std = tf.math.reduce_std(images, [1, 2])
        return {"features": tf.concat([mean, std, mean * mean], axis=1)}


class _OracleBox(tf.Module):
    @tf.function(input_signature=_SIG)
    def serve(self, images: tf.Tensor) -> dict:
        mask = tf.reduce_mean(images, axis=-1) > 0.5  # [N, H, W]
        size = tf.cast(tf.shape(images)[1], tf.float32)
        rows = tf.cast(tf.reduce_any(mask, axis=2), tf.int32)
        cols = tf.cast(tf.reduce_any(mask, axis=1), tf.int32)
        ymin = tf.cast(tf.argmax(rows, axis=1), tf.float32)
        ymax = size - tf.cast(tf.argmax(tf.reverse(rows, [1]), axis=1), tf.float32)
        xmin = tf.cast(tf.argmax(cols, axis=1), tf.float32)
        xmax = size - tf.cast(tf.argmax(tf.reverse(cols, [1]), axis=1), tf.float32)
        return {"features": tf.stack([ymin, xmin, ymax, xmax], axis=1) / size}


def _save(module: tf.Module, path: str) -> str:
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def save_random_conv_model(path: str, channels: int = 16, seed: int = 0) -> str:
    """Save the random-conv feature extractor (2·channels features) at ``path``."""
    return _save(_RandomConv(channels, seed), path)


def save_oracle_color_model(path: str) -> str:
    """Save the colour oracle (9 features: channel means, stds, squared means) at ``path``."""
    return _save(_OracleColor(), path)


def save_oracle_box_model(path: str) -> str:
    """Save the box oracle (features = ymin, xmin, ymax, xmax of the bright pixels) at ``path``."""
    return _save(_OracleBox(), path)


def rectangle_images(n: int, size: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` black uint8 images with one bright rectangle; ``bbox`` (ymin, xmin, ymax, xmax) fractions.

    ``label`` is the rectangle's quadrant-of-centre class (0..3), ``color`` its dominant channel (0..2).
    """
    rng = np.random.default_rng(seed)
    images = np.zeros((n, size, size, 3), np.uint8)
    boxes = np.zeros((n, 4), np.float32)
    labels = np.zeros(n, np.int64)
    colors = np.zeros(n, np.int64)
    for i in range(n):
        h, w = rng.integers(size // 6, size // 2, size=2)
        y0, x0 = rng.integers(0, size - h), rng.integers(0, size - w)
        c = int(rng.integers(0, 3))
        pixel = np.full(3, 170, np.uint8)
        pixel[c] = 255
        images[i, y0 : y0 + h, x0 : x0 + w] = pixel
        boxes[i] = (y0 / size, x0 / size, (y0 + h) / size, (x0 + w) / size)
        labels[i] = 2 * int(y0 + h / 2 >= size / 2) + int(x0 + w / 2 >= size / 2)
        colors[i] = c
    return {"image": images, "bbox": boxes, "label": labels, "color": colors}


class MemorySources(DataAccess):
    """In-memory sources for tests and small experiments: ``{spec: {split: {key: array}}}``."""

    def __init__(self, data: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]]):
        super().__init__(None)
        self.data = data

    def load(self, spec: str, split: str) -> tf.data.Dataset:
        """Example dicts of one split; ``a+b`` joins splits."""
        if spec not in self.data:
            raise EvalError(f"unknown dataset {spec!r}")
        parts = [p.strip() for p in split.split("+")]
        arrays = []
        for p in parts:
            if p == "all" and "all" not in self.data[spec]:
                arrays.extend(self.data[spec].values())
            elif p in self.data[spec]:
                arrays.append(self.data[spec][p])
            else:
                raise EvalError(f"unknown split {p!r} for dataset {spec!r}")
        keys = arrays[0].keys()
        merged = {k: np.concatenate([a[k] for a in arrays]) for k in keys}
        return tf.data.Dataset.from_tensor_slices(merged)

    def splits(self, spec: str) -> tuple[str, ...]:
        """The split names given for ``spec``."""
        if spec not in self.data:
            raise EvalError(f"unknown dataset {spec!r}")
        return tuple(self.data[spec])
