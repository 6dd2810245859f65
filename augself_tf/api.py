"""The Python API's own functions: evaluation without the command line, and a model ready for Keras ``fit()``.

Everything else the package exports (``augself_tf.__all__``) is the library's function or class itself; these
three fill the gaps between them: the evaluation program reads its settings from absl flags, and the training
loop's model builder wants the strategy and the data's size, which a Python user rarely has at hand.
docs/python-api.md shows them at work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import pair_source, source_info
from augself_tf.methods import AugSelfModel, PretrainData
from augself_tf.training.loop import build_model as _build_model
from augself_tf.training.train_config import TrainConfig

__all__ = ["build_model", "evaluate_backbone", "pair_dataset"]


def evaluate_backbone(saved_model: str, protocol: str = "linear", dataset: str = "shapes", *,
                      split_size: int | None = None, image_size: int = 96, label_key: str = "label",
                      data_dir: str | None = None, options: Any = None,
                      log: Callable[[str], None] | None = None) -> list[dict]:
    """Evaluates an exported backbone with one protocol, as ``augself-eval --protocol=PROTOCOL`` does.

    Args:
      saved_model: a SavedModel directory (``TrainResult.saved_model_dir``).
      protocol: a name of ``augself_tf.evaluation.protocols.PROTOCOLS`` (``linear``, ``knn``, ``fewshot``, ...).
      dataset: a data source spec (``shapes``, a tfds name, ``folder:PATH``).
      split_size: at most this many examples per split (a fixed-seed subset); None: all.
      image_size: the evaluation resolution (shorter side resized, then a centre crop).
      label_key: the integer label to classify (``color`` for shapes' colour).
      data_dir: where tfds data is prepared.
      options: the protocol's options dataclass (``PROTOCOLS[protocol].options(...)``); None: its defaults.
      log: progress lines (None: quiet).

    Returns:
      The protocol's records: dicts with ``protocol``, ``dataset``, ``metric``, ``value``, ``ci95``,
      ``n_train``, ``n_test``, ``settings``, ``seconds`` (``augself_tf.evaluation.report``).
    """
    from augself_tf.evaluation.context import EvalContext, EvalSettings
    from augself_tf.evaluation.datasets import DataAccess
    from augself_tf.evaluation.loading import load_model
    from augself_tf.evaluation.protocols import run_protocol

    settings = EvalSettings(image_size=image_size, max_examples=split_size, label_key=label_key)
    context = EvalContext(settings, DataAccess(data_dir), log=log)
    return run_protocol(context, load_model(saved_model), protocol, dataset, options)


def build_model(cfg: TrainConfig, strategy: tf.distribute.Strategy | None = None) -> AugSelfModel:
    """The model ``train(cfg)`` trains, compiled with its optimizer and built, ready for ``model.fit``.

    ``strategy`` defaults to one device; pass a ``MirroredStrategy`` for several. The learning-rate schedule
    spans ``cfg.epochs`` of ``cfg.dataset``'s ``cfg.split`` at ``cfg.batch_size`` (or ``cfg.max_steps``).
    """
    import keras

    strategy = strategy or tf.distribute.OneDeviceStrategy("/gpu:0" if tf.config.list_logical_devices("GPU")
                                                           else "/cpu:0")
    info = source_info(cfg.dataset, cfg.split, data_dir=cfg.data_dir)
    steps_per_epoch = max(1, info.num_examples // cfg.batch_size)  # as train(): its schedule and MoCo's queue
    total = steps_per_epoch * cfg.epochs
    total = min(total, cfg.max_steps) if cfg.max_steps else total
    data = PretrainData(cfg.dataset, info.num_examples, info.num_classes or 0, cfg.batch_size, max(1, total),
                        steps_per_epoch)
    keras.utils.set_random_seed(cfg.seed)
    input_mean, input_std = cfg.model.input_statistics(info.mean, info.std)
    model = _build_model(cfg, strategy, data, input_mean, input_std)
    # build_all created every variable, but Keras' fit also checks each layer's `built` flag, which a container
    # whose variables live in its sublayers (an objective holding its heads) never sets: fit would then try to
    # build the model by calling it, and a pretraining model has no call().
    for layer in model._flatten_layers():
        layer.built = True
    return model


def pair_dataset(cfg: TrainConfig, *, seed: int | None = None, batch_size: int | None = None) -> tf.data.Dataset:
    """``cfg``'s two-view pair stream, endless, in global batches of ``batch_size`` (default ``cfg.batch_size``):
    each element a dict of ``view1``, ``view2``, their ω ``omega1``, ``omega2``, and ``label``, augmented on the
    host (``make_pair_dataset`` over ``cfg``'s data source, held in memory when the loop would hold it)."""
    cache = cfg.cache_source if cfg.cache_source is not None else cfg.dataset == "shapes"
    source = pair_source(cfg.dataset, cfg.split, data_dir=cfg.data_dir, cache=cache)
    return make_pair_dataset(source, cfg.augment, seed=cfg.seed if seed is None else seed,
                             batch_size=batch_size or cfg.batch_size, cache=cache, shuffle_buffer=cfg.shuffle_buffer)
