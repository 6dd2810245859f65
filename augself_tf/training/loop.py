"""A pretraining run in its stages (`train`): prepare (training/run_start.py), build and restore, the step loop
(training/step_loop.py), finish (export and report); and what the stages and the benchmarks share, the run's model
(`build_model`) and its input (`distributed_pairs`)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import pair_source
from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD
from augself_tf.methods import METHODS
from augself_tf.methods.augself_model import AugSelfModel, PretrainData
from augself_tf.runtime.preemption import StopSignals
from augself_tf.training.agreement import agree_on_resume
from augself_tf.training.checkpoint_files import clean_temp, intact_checkpoint
from augself_tf.training.checkpoints import check_run_settings, make_checkpoint, restore, training_state
from augself_tf.training.health import NonFiniteLossError
from augself_tf.training.optim import build_optimizer
from augself_tf.training.run_exports import export_run
from augself_tf.training.run_start import RunStart, check_model_dir, prepare
from augself_tf.training.step_loop import Restored, StepLoop
from augself_tf.training.train_config import TrainConfig

__all__ = ["NonFiniteLossError", "TrainConfig", "TrainResult", "build_and_restore", "build_model", "check_model_dir",
           "distributed_pairs", "finish", "train"]


@dataclasses.dataclass
class TrainResult:
    """Where a run left its outputs, and its last logged values."""

    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str
    saved_model_dir: str | None
    steps: int
    last_logs: dict
    model: keras.Model | None = None
    monitors: dict = dataclasses.field(default_factory=dict)  # last monitor values, seconds, seconds_total


def distributed_pairs(
    strategy: tf.distribute.Strategy, cfg: TrainConfig, steps_per_epoch: int, step: int = 0
) -> tf.distribute.DistributedDataset:
    """The pair stream from global step ``step`` on, as per-replica batches of ``batch_size / replicas``, of the
    run's settings as `prepare` resolved them (``cfg.photometric`` ``host`` or ``device``).

    Each worker runs one input pipeline that feeds its R local replicas in turn, so one global step takes
    R consecutive per-replica batches from it. Every epoch is cut to exactly ``steps_per_epoch · R`` of
    them (the loop's epoch, whatever the remainder of the worker's shard), so resuming at ``step`` skips
    exactly what the interrupted run consumed and every replica gets the examples it would have had.
    """
    start_epoch, step_in_epoch = divmod(step, steps_per_epoch)
    cache = cfg.cache_source if cfg.cache_source is not None else cfg.dataset == "shapes"

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        local_replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines
        return make_pair_dataset(
            pair_source(cfg.dataset, cfg.split, data_dir=cfg.data_dir, cache=cache),
            cfg.augment,
            seed=cfg.seed,
            batch_size=ctx.get_per_replica_batch_size(cfg.batch_size),
            start_epoch=start_epoch,
            batches_per_epoch=steps_per_epoch * local_replicas,
            skip_batches=step_in_epoch * local_replicas,
            shuffle_buffer=cfg.shuffle_buffer,
            shard=(ctx.input_pipeline_id, ctx.num_input_pipelines),
            cache=cache,
            photometric=cfg.photometric,
            views=views,
        )

    views = cfg.model.views()  # the method's and its objectives' declaration
    return strategy.distribute_datasets_from_function(dataset_fn)


def build_model(
    cfg: TrainConfig,
    strategy: tf.distribute.Strategy,
    data: PretrainData,
    input_mean: tuple[float, ...] | None = None,
    input_std: tuple[float, ...] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> AugSelfModel:
    """The run's model under ``strategy``'s scope, compiled with its optimizer, every variable built.

    The backbone and method of ``cfg.model`` (the method's options completed from ``data`` by the method itself,
    :meth:`~augself_tf.methods.augself_model.AugSelfModel.complete_options`), built at the views' size, with the
    batch-scaled ``cfg.optimizer`` of ``cfg.lr`` and ``cfg.weight_decay`` over ``data.total_steps`` (after
    ``cfg.warmup_epochs`` of warm-up, its share of the run kept when ``--max_steps`` cuts it). The backbone
    normalises its input with ``input_mean`` / ``input_std`` (default: ``cfg.model``'s, else ImageNet's
    statistics). The benchmarks time the step of this model (bench/common.py).
    """
    model_cfg = cfg.model
    if input_mean is None or input_std is None:
        input_mean, input_std = model_cfg.input_statistics(IMAGENET_MEAN, IMAGENET_STD)
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        options = METHODS.get(model_cfg.method, AugSelfModel).complete_options(model_cfg.method_options, data, log)
        model = model_cfg.build(options=options, input_mean=input_mean, input_std=input_std,
                                synchronized_bn=replicas > 1, augment=cfg.augment)
        model.build_all(cfg.augment.image_size)
        warmup = cfg.warmup_epochs * data.steps_per_epoch
        full = cfg.epochs * data.steps_per_epoch
        if data.total_steps < full:  # --max_steps cuts the run: its warm-up keeps its share, as the cosine does
            warmup *= data.total_steps / full
        held, held_steps = model.held_variables()
        optimizer = build_optimizer(cfg.lr, cfg.batch_size, data.total_steps, mixed_precision=cfg.mixed_precision,
                                    weight_decay=cfg.weight_decay, decay_exclude=cfg.weight_decay_exclude,
                                    warmup_steps=round(warmup),
                                    constant_lr_variables=model.constant_lr_variables(), optimizer=cfg.optimizer,
                                    weight_decay_end=cfg.weight_decay_end, clip_grad=cfg.clip_grad,
                                    held_variables=held, held_steps=held_steps)
        model.compile(optimizer=optimizer)
        optimizer.build(model.optimized_variables())
    return model


def train(cfg: TrainConfig) -> TrainResult:
    """Runs (or resumes) one pretraining run and exports the backbone. Returns where outputs are.

    Raises:
      Preempted: SIGTERM or SIGINT arrived; the step it interrupted was finished and saved.
      NonFiniteLossError: the loss or the state diverged; nothing after the last good checkpoint was saved.
      CheckpointFileError: a checkpoint could not be written, or files are there but none is intact.
      RunDirBusyError: another live run holds ``model_dir`` (augself_tf/runtime/run_lock.py).
      RunLockLostError: another run took this run's lock over; nothing was saved after that.
    """
    with StopSignals() as stop, contextlib.ExitStack() as held:  # held: the run lock, released on every exit
        start = prepare(cfg, stop, held)  # strategy, resolved settings, the data's facts, lock, run.json's check
        loop = StepLoop(start, build_and_restore(start), stop)
        loop.run(lambda step: iter(distributed_pairs(start.strategy, start.cfg, start.data.steps_per_epoch, step)))
        return finish(start, loop)


def build_and_restore(start: RunStart) -> Restored:
    """The run's model built, run.json written, and the newest intact checkpoint restored (the step it holds).

    Raises:
      CheckpointFileError: checkpoint files are there but none is intact.
    """
    model = build_model(start.cfg, start.strategy, start.data, start.input_mean, start.input_std, log=start.log)
    check_run_settings(start.model_dir, start.model_settings, write=start.chief, derived=start.derived)
    optimizer = model.optimizer
    with start.strategy.scope():
        state = training_state(model, optimizer)
        checkpoint = make_checkpoint(model, optimizer)
    # Every worker resumes from the CHIEF's checkpoints (model_dir must be shared by all workers): a
    # non-chief's own scratch dir is new on every launch, and workers at different steps would deadlock.
    if start.chief:
        clean_temp(start.chief_ckpt_dir, start.log)
    latest = intact_checkpoint(start.chief_ckpt_dir, start.log if start.chief else lambda _m: None, repair=start.chief)
    agree_on_resume(start.strategy, latest, start.chief_ckpt_dir)  # several workers: all at one step, or one line
    if latest:
        restore(checkpoint, latest, state)
        start.log(f"Resumed from {latest}")
    step = int(optimizer.iterations.numpy())
    total_steps = start.data.total_steps
    if total_steps == 0:
        start.log("--max_steps=0: the initialised network is exported untrained (a floor)")
    elif step >= total_steps:
        start.log(f"Already trained {step}/{total_steps} steps in {start.model_dir}")
    return Restored(model, checkpoint, state, step, latest)


def finish(start: RunStart, loop: StepLoop) -> TrainResult:
    """The run's end: the lock checked, the backbone exported (by the chief), a worker's scratch removed, and
    where everything is, printed and returned.

    Raises:
      RunLockLostError: another run took the lock over; nothing is exported.
    """
    cfg = start.cfg
    saved_model_dir = None
    if start.lock is not None:
        start.lock.check()
    if cfg.export and start.chief:
        saved_model_dir = export_run(cfg, loop.model, start.model_dir, start.log)
    if not start.chief:  # the scratch checkpoints only served the collective saves
        shutil.rmtree(start.write_dir, ignore_errors=True)
    if cfg.verbose:
        print(f"\nTensorBoard events: {start.tb_dir}")
        print(f"Checkpoints:        {start.ckpt_dir}")
        if saved_model_dir:
            print(f"SavedModel:         {saved_model_dir}")
        if loop.monitors is not None:
            run_seconds = time.perf_counter() - start.started
            monitor_seconds = loop.monitors.seconds_total
            print(f"Monitors took {monitor_seconds:.1f} s of the run's {run_seconds:.1f} s "
                  f"({100 * monitor_seconds / max(run_seconds, 1e-9):.1f}%)")
        sys.stdout.flush()
    return TrainResult(start.model_dir, start.ckpt_dir, start.tb_dir, saved_model_dir, loop.step, loop.last_logs,
                       loop.model, loop.monitors.last if loop.monitors is not None else {})
