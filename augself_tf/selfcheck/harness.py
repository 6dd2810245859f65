"""What every check builds on: the run's own model (``training.loop.build_model``) for a small setting, one real
batch of the run's own input pipeline (the embedded ``shapes`` data, held in memory), split over the replicas,
and the run's own distributed step (``training.distributed_step.make_distributed_step``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import pair_source, source_info
from augself_tf.methods.augself_model import AugSelfModel, PretrainData
from augself_tf.methods.model_config import ModelConfig
from augself_tf.training.loop import build_model
from augself_tf.training.train_config import TrainConfig

#: The pretraining data of every check: embedded, so the check needs no download and no data on disk.
DATASET = "shapes"
#: The split the checks draw their batches from: the smaller one, its images drawn in a second or two.
SPLIT = "test"
#: Changes a model before its step is built: how a test plants a per-replica difference or a host op.
Tamper = Callable[[AugSelfModel], None]
#: Builds the model of a setting under a strategy (`build`; a test gives a cheaper one).
Builder = Callable[["Setup", tf.distribute.Strategy], AugSelfModel]


@dataclasses.dataclass(frozen=True)
class Setup:
    """One model and step setting: the `TrainConfig` fields that matter here (the rest keep its defaults)."""

    method: str
    backbone: str = "resnet18_cifar"
    width: float = 0.0625
    image_size: int = 16
    batch_size: int = 8  # global
    mixed_precision: str | None = None
    photometric: str = "host"
    jit_compile: bool = False
    seed: int = 0

    @property
    def label(self) -> str:
        """e.g. ``simsiam resnet18_cifar w0.0625 16px b8 float32 host``."""
        extra = " jit" if self.jit_compile else ""
        return (f"{self.method} {self.backbone} w{self.width:g} {self.image_size}px b{self.batch_size} "
                f"{self.mixed_precision or 'float32'} {self.photometric}{extra}")

    def config(self) -> TrainConfig:
        """The run settings of this setup: TrainConfig's defaults with its fields."""
        model = ModelConfig(method=self.method, backbone=self.backbone, width=self.width)
        return TrainConfig(dataset=DATASET, split=SPLIT, model=model, augment=AugmentConfig(image_size=self.image_size),
                           batch_size=self.batch_size, mixed_precision=self.mixed_precision,
                           jit_compile=self.jit_compile, photometric=self.photometric, seed=self.seed, verbose=0)


def pretrain_data(cfg: TrainConfig) -> PretrainData:
    """What the methods complete their options from (MoCo's queue): the embedded data at this batch."""
    info = source_info(DATASET, cfg.split)
    steps_per_epoch = max(1, info.num_examples // cfg.batch_size)
    return PretrainData(DATASET, info.num_examples, info.num_classes or 0, cfg.batch_size, 1000, steps_per_epoch)


def build(setup: Setup, strategy: tf.distribute.Strategy) -> AugSelfModel:
    """The run's model for ``setup`` under ``strategy``, seeded by ``setup.seed``; the mixed-precision policy is
    set while it is built, then restored (a check builds several settings in one process)."""
    cfg = setup.config()
    previous = keras.mixed_precision.global_policy().name
    if setup.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{setup.mixed_precision}")
    try:
        keras.utils.set_random_seed(setup.seed)
        return build_model(cfg, strategy, pretrain_data(cfg))
    finally:
        keras.mixed_precision.set_global_policy(previous)


@functools.cache
def _source(split: str):
    return pair_source(DATASET, split, cache=True)


def real_batches(setup: Setup, count: int, seed: int = 0) -> tuple[dict[str, Any], ...]:
    """``count`` consecutive global batches of the run's pair stream for ``setup`` (its method's views, its
    photometric mode), as NumPy arrays held in memory, so a timed step does not wait for the input pipeline.
    Cached: building the stream costs seconds, and the checks ask for the same batches again."""
    return _batches(setup.method, setup.image_size, setup.photometric, setup.batch_size, seed, count)


@functools.lru_cache(maxsize=64)
def _batches(method: str, image_size: int, photometric: str, batch_size: int, seed: int, count: int) -> tuple:
    cfg = Setup(method, image_size=image_size, photometric=photometric, batch_size=batch_size).config()
    views = cfg.model.views()
    ds = make_pair_dataset(_source(cfg.split), cfg.augment, seed=seed, batch_size=batch_size, cache=True,
                           photometric=photometric, views=views)
    it = iter(ds)
    return tuple(tf.nest.map_structure(lambda t: t.numpy(), next(it)) for _ in range(count))


def real_batch(setup: Setup, seed: int = 0) -> dict[str, Any]:
    """The first of `real_batches`."""
    return real_batches(setup, 1, seed)[0]


def pipeline(setup: Setup, replicas: int, seed: int = 0) -> tf.data.Dataset:
    """The pair stream one worker runs for ``setup``: per-replica batches, forever (what the loop reads)."""
    cfg = setup.config()
    views = cfg.model.views()
    return make_pair_dataset(_source(cfg.split), cfg.augment, seed=seed, batch_size=setup.batch_size // replicas,
                             cache=True, photometric=setup.photometric, views=views)


def replica_part(batch: dict, replica: int, replicas: int) -> dict:
    """Replica ``replica``'s consecutive share of every array of ``batch`` (as the pair stream deals them)."""
    def part(x):
        n = len(x) // replicas
        return x[replica * n:(replica + 1) * n]

    return tf.nest.map_structure(part, batch)


def distribute(strategy: tf.distribute.Strategy, batch: dict) -> Any:
    """``batch`` split over the replicas of ``strategy`` in replica order, each share a tensor on its replica's
    device (as the distributed dataset prefetches it there: a timed step copies no batch from the host)."""
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        with tf.device(strategy.extended.worker_devices[0]):
            return tf.nest.map_structure(tf.identity, batch)
    parts = [replica_part(batch, r, replicas) for r in range(replicas)]
    # Called under each replica's device scope (MirroredStrategy), where the identity puts the copy.
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.nest.map_structure(tf.identity, parts[ctx.replica_id_in_sync_group]))


def replica_values(variable) -> list[np.ndarray]:
    """The value of a (Keras) variable on every replica: one entry when it is not mirrored."""
    tf_var = getattr(variable, "value", variable)
    return [np.asarray(v) for v in getattr(tf_var, "values", [tf_var])]


def state_variables(model: AugSelfModel) -> list:
    """Every variable of the model and its optimizer (weights, BN statistics, buffers, queues, the step)."""
    return list(model.variables) + list(model.optimizer.variables)


def copy_state(source: AugSelfModel, target: AugSelfModel) -> None:
    """Assigns ``source``'s weights and optimizer state to ``target`` (same setting, another strategy), so both
    start from the same values whatever the strategy's initialisation did."""
    src, dst = state_variables(source), state_variables(target)
    if [v.path for v in src] != [v.path for v in dst]:
        raise ValueError("the two models do not have the same variables")
    for a, b in zip(src, dst, strict=True):
        b.assign(replica_values(a)[0])


def first_line(err: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message``, shortened: what a check's figure shows of an error."""
    text = (getattr(err, "message", None) or str(err) or "").strip().splitlines()
    return f"{type(err).__name__}: {text[0][:limit] if text else ''}".rstrip(": ")
