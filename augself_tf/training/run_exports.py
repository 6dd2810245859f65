"""What a finished run exports: the backbone as trained (``saved_model/``; the method's ``evaluated_backbone``, DINO's
teacher) and, when asked, a copy whose BN statistics are recomputed on the pretraining images
(``saved_model_precise_bn/``, augself_tf/export/precise_bn.py)."""

from __future__ import annotations

import os
from collections.abc import Callable

import tensorflow as tf

from augself_tf.data.eval_view import preprocess
from augself_tf.data.sources import load_source
from augself_tf.export.precise_bn import recompute_bn_statistics, single_device_copy
from augself_tf.export.saved_model import export_backbone
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.training.train_config import TrainConfig


def export_run(cfg: TrainConfig, model: AugSelfModel, model_dir: str, log: Callable[[str], None]) -> str:
    """Writes ``model_dir/saved_model`` (and ``saved_model_precise_bn`` with ``--precise_bn_images``); returns the
    first's path."""
    path = export_backbone(model.evaluated_backbone, os.path.join(model_dir, "saved_model"), model.exported_features())
    if cfg.precise_bn_images:
        export_precise_bn(cfg, model, os.path.join(model_dir, "saved_model_precise_bn"), log)
    return path


def export_precise_bn(cfg: TrainConfig, model: AugSelfModel, path: str, log: Callable[[str], None]) -> None:
    """Exports a single-device copy of the backbone whose BN statistics are recomputed on the first
    ``cfg.precise_bn_images`` images of the pretraining split, eval-preprocessed at the run's size; the run's model
    and its own export keep the running statistics.

    Raises:
      ValueError: the split has fewer images than one batch.
    """
    size = cfg.augment.image_size
    images = load_source(cfg.dataset, cfg.split, data_dir=cfg.data_dir).take(cfg.precise_bn_images)
    images = images.map(lambda ex: preprocess(ex["image"], size), num_parallel_calls=tf.data.AUTOTUNE)
    # Whole batches only, as fvcore's update_bn_stats, unless the images do not fill one.
    batch = min(cfg.batch_size, cfg.precise_bn_images)
    backbone = single_device_copy(model.evaluated_backbone)
    batches = recompute_bn_statistics(backbone, images.batch(batch, drop_remainder=True))
    if not batches:
        raise ValueError(f"--precise_bn_images: '{cfg.dataset}' split '{cfg.split}' has fewer than {batch} images")
    export_backbone(backbone, path, model.exported_features())
    log(f"SavedModel with BN statistics of {batches} batches of {batch} images: {path}")
