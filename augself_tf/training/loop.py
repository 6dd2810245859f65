"""The pretraining loop: strategy, input, model, checkpoints, TensorBoard, NaN guard and export."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from augself_tf.augment import PHOTOMETRIC_MODES, finish_views
from augself_tf.augment.views import check_pair_batch
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source, pair_records, source_info
from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD
from augself_tf.methods import METHODS, derived_options, view_plan
from augself_tf.methods.augself_model import AugSelfModel, PretrainData
from augself_tf.objectives import OBJECTIVES
from augself_tf.progress import Progress
from augself_tf.runtime.determinism import make_deterministic
from augself_tf.runtime.preemption import Preempted, StopSignals
from augself_tf.runtime.run_lock import RunLock
from augself_tf.runtime.strategy import CLUSTERS, compile_mode, is_chief, make_strategy
from augself_tf.training import summaries
from augself_tf.training.agreement import StopAgreement, agree_on_resume
from augself_tf.training.checkpoint_files import LIMIT, clean_temp, intact_checkpoint, save_verified
from augself_tf.training.checkpoints import (
    check_run_settings,
    make_checkpoint,
    recorded_derived,
    restore,
    training_state,
)
from augself_tf.training.distributed_step import DistributedSteps, resolve_steps_per_execution, steps_in_call
from augself_tf.training.health import NonFiniteLossError, advice, make_state_check
from augself_tf.training.hparams import write_run_hparams
from augself_tf.training.monitors import build_monitors, plan_monitors
from augself_tf.training.optim import build_optimizer
from augself_tf.training.run_exports import export_run
from augself_tf.training.train_config import TrainConfig

__all__ = ["NonFiniteLossError", "TrainConfig", "TrainResult", "build_model", "distributed_pairs", "train"]


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
    """The pair stream from global step ``step`` on, as per-replica batches of ``batch_size / replicas``.

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
            pair_source(cfg, cache),
            cfg.augment,
            seed=cfg.seed,
            batch_size=ctx.get_per_replica_batch_size(cfg.batch_size),
            start_epoch=start_epoch,
            batches_per_epoch=steps_per_epoch * local_replicas,
            skip_batches=step_in_epoch * local_replicas,
            shuffle_buffer=cfg.shuffle_buffer,
            shard=(ctx.input_pipeline_id, ctx.num_input_pipelines),
            cache=cache,
            photometric=resolve_photometric(cfg.photometric),
            views=views,
        )

    views = view_plan(cfg.model.method, cfg.model.method_options)  # the method's and its objectives' declaration
    return strategy.distribute_datasets_from_function(dataset_fn)


def pair_source(cfg: TrainConfig, cache: bool):
    """What `make_pair_dataset` reads: the source's own records where it has them (`pair_records`: folder file
    names, tfds encoded records), for a cached source of one image size its examples held in memory (fully
    permuted every epoch), else the tf.data source itself (shuffled in a ``--shuffle_buffer``)."""
    records = None if cache else pair_records(cfg.dataset, cfg.split, data_dir=cfg.data_dir)
    if records is not None:
        return records
    source = load_source(cfg.dataset, cfg.split, data_dir=cfg.data_dir)
    if cache and all(spec.shape.is_fully_defined() for spec in tf.nest.flatten(source.element_spec)):
        rows = source.batch(1 << 30).get_single_element()
        return {k: v.numpy() for k, v in rows.items()}, lambda example: example
    return source


def resolve_photometric(mode: str) -> str:
    """``auto`` -> ``device`` when a GPU or TPU is visible (the host's CPUs would bind), else ``host``."""
    if mode not in ("auto", *PHOTOMETRIC_MODES):
        raise ValueError(f"unknown photometric mode {mode!r}; choose from auto, {', '.join(PHOTOMETRIC_MODES)}")
    if mode != "auto":
        return mode
    accelerators = tf.config.list_logical_devices("GPU") + tf.config.list_logical_devices("TPU")
    return "device" if accelerators else "host"


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


def _log(cfg: TrainConfig, msg: str) -> None:
    if cfg.verbose:
        print(msg, flush=True)


def check_model_dir(model_dir: str) -> None:
    """Creates ``model_dir`` and proves it writable; a file there or an unwritable place is one ValueError line."""
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError(f"--model_dir {model_dir} is a file, not a directory; choose another --model_dir")
    try:
        os.makedirs(model_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=model_dir):
            pass
    except OSError as err:
        raise ValueError(f"--model_dir {model_dir} is not writable ({err.strerror or err}); choose another "
                         "--model_dir") from None


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
        return _train(cfg, stop, held)


def _train(cfg: TrainConfig, stop: StopSignals, held: contextlib.ExitStack) -> TrainResult:
    run_start = time.perf_counter()
    if cfg.deterministic:
        make_deterministic()
    if cfg.mixed_precision == "float16" and cfg.strategy == "tpu":
        raise ValueError("--mixed_precision=float16 is not for TPUs (their matrix units compute in bfloat16); use "
                         "--mixed_precision=bfloat16")
    strategy = make_strategy(cfg.strategy, cfg.cpu_replicas, cfg.tpu)
    stop.reinstall()  # a multi-worker strategy's runtime takes SIGTERM over below Python: take it back
    cfg = dataclasses.replace(cfg, photometric=resolve_photometric(cfg.photometric),
                              steps_per_execution=resolve_steps_per_execution(cfg.steps_per_execution, strategy,
                                                                              cfg.log_every),
                              model_dir=cfg.resolved_model_dir())
    replicas = strategy.num_replicas_in_sync
    if cfg.batch_size % replicas:
        raise ValueError(f"global batch size {cfg.batch_size} is not divisible by the {replicas} replicas")
    check_pair_batch(view_plan(cfg.model.method, cfg.model.method_options), cfg.batch_size // replicas)
    mode = compile_mode(strategy) if cfg.jit_compile else None
    if mode == CLUSTERS:
        _log(cfg, f"--jit_compile on {replicas} CPU replicas: XLA compiles the step's clusters, the cross-replica "
                  "reductions between them (XLA has no CPU collectives; GPUs and TPUs compile the whole replica "
                  "function)")
    if cfg.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{cfg.mixed_precision}")
    chief = is_chief(strategy)
    keras.utils.set_random_seed(cfg.seed)  # Keras initialisers draw from this; the input is seeded by cfg.seed

    info = source_info(cfg.dataset, cfg.split, data_dir=cfg.data_dir)
    if not info.num_examples:
        raise ValueError(f"dataset '{cfg.dataset}' split '{cfg.split}' has an unknown or zero size")
    steps_per_epoch = info.num_examples // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch size {cfg.batch_size} exceeds the {info.num_examples} examples of '{cfg.dataset}'")
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    monitor_plan = plan_monitors(cfg, info.num_examples)  # bad monitor flags fail before the model is built

    input_mean, input_std = cfg.model.input_statistics(info.mean, info.std)
    model_dir = os.path.abspath(cfg.model_dir)
    lock = None
    if chief:  # other workers write to scratch directories: the chief's lock covers the run
        check_model_dir(model_dir)
        # Before anything reads or repairs the directory: a second run must not touch a live run's files.
        lock = held.enter_context(RunLock(model_dir, log=lambda msg: _log(cfg, msg)))
        stop.before_exit_now.append(lock.release)
    # Before anything is built: a resume with other model settings stops at once, naming the flags. The file
    # is written once the model is built, so that settings no model can be built from are never recorded.
    model_settings = cfg.model.checked_settings(input_mean, input_std)
    check_run_settings(model_dir, model_settings, write=False)
    # Non-chief workers must still take part in saving (collectives), but write to scratch space.
    write_dir = model_dir if chief else tempfile.mkdtemp(prefix="augself_worker_")
    ckpt_dir = os.path.join(write_dir, "checkpoints")
    tb_dir = os.path.join(model_dir, "tensorboard")

    data = PretrainData(cfg.dataset, info.num_examples, max(0, info.num_classes or 0), cfg.batch_size, total_steps,
                        steps_per_epoch)
    # Options the method derived from the batch when the run started (MoCo's queue size) are reused: a resume
    # with another global batch (8 GPUs, then 4) must rebuild the variables the checkpoint holds.
    reused = recorded_derived(model_dir, cfg.model.method_options)
    if reused:
        _log(cfg, "Reusing what the run derived when it started (run.json): "
                  f"{', '.join(f'--{k}={v}' for k, v in sorted(reused.items()))}")
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, method_options={**cfg.model.method_options, **reused}))
    derived = {**derived_options(cfg.model.method, cfg.model.method_options, data), **reused}
    model = build_model(cfg, strategy, data, input_mean, input_std, log=lambda msg: _log(cfg, msg))
    check_run_settings(model_dir, model_settings, write=chief, derived=derived)
    optimizer = model.optimizer
    with strategy.scope():
        state = training_state(model, optimizer)
        checkpoint = make_checkpoint(model, optimizer)
    # Every worker resumes from the CHIEF's checkpoints (model_dir must be shared by all workers): a
    # non-chief's own scratch dir is new on every launch, and workers at different steps would deadlock.
    chief_ckpt_dir = os.path.join(model_dir, "checkpoints")
    log = lambda msg: _log(cfg, msg)  # noqa: E731
    if chief:
        clean_temp(chief_ckpt_dir, log)
    latest = intact_checkpoint(chief_ckpt_dir, log if chief else lambda _m: None, repair=chief)
    agree_on_resume(strategy, latest, chief_ckpt_dir)  # several workers: all at one step, or one line and exit
    last_saved = latest
    if latest:
        restore(checkpoint, latest, state)
        _log(cfg, f"Resumed from {latest}")
    step = int(optimizer.iterations.numpy())
    if total_steps == 0:
        _log(cfg, "--max_steps=0: the initialised network is exported untrained (a floor)")
    elif step >= total_steps:
        _log(cfg, f"Already trained {step}/{total_steps} steps in {model_dir}")

    nonfinite_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_step")
    stops = StopAgreement(strategy, stop)  # several workers stop at one agreed step
    run_steps = DistributedSteps(strategy, model, mode, nonfinite_step, stops.request)
    bad_variable = make_state_check(state)
    what_to_do = advice(cfg.lr, cfg.batch_size, cfg.model.augself_weight,
                        {t.name: t.weight for t in cfg.model.augself})

    def check_finite(step: int) -> None:
        """Raises if any step so far had a NaN/Inf loss, or if a weight, BN statistic or buffer is NaN/Inf or
        overflowing now; called at log steps and before every save, so every checkpoint is sound."""
        bad = int(nonfinite_step.numpy())
        where = None if bad else bad_variable()
        if bad or where:
            what = (f"loss became NaN or Inf at step {bad}" if bad else
                    f"training diverged by step {step}: {where} holds NaN/Inf or values beyond {LIMIT:g}")
            raise NonFiniteLossError(
                f"{what}; stopped without saving. The last good checkpoint in {ckpt_dir} is "
                f"{last_saved or '(none yet)'}; {what_to_do}."
            )

    def save(step: int) -> str:
        if lock is not None:
            lock.check()
        check_finite(step)
        return save_verified(checkpoint, ckpt_dir, step, cfg.keep_checkpoints, chief=chief)

    writer = summaries.make_writer(tb_dir if chief else None)
    if writer is not None and step == 0:  # once per run: a resumed run is the same HParams session
        write_run_hparams(writer, cfg, trial_id=os.path.basename(model_dir))
    _log(cfg, summaries.describe_run(cfg, replicas, info.num_examples, steps_per_epoch, total_steps,
                                     cfg.photometric, (input_mean, input_std)))  # resolved at the top of train()
    # In a log file: about 50 lines per run, each on a logging step so its losses are fresh.
    progress = Progress(total_steps, "pretrain", enabled=bool(cfg.verbose), line_multiple=cfg.log_every)
    monitors = None
    if monitor_plan is not None and step < total_steps:
        monitors = build_monitors(monitor_plan, cfg, strategy, model.backbone, writer, lambda msg: _log(cfg, msg))
    monitor_every = steps_per_epoch * cfg.monitor_every
    if monitors is not None and step == 0:  # the "before training" point of a fresh run
        monitors.run(step, 0.0)
    # Created after that point: its background prefetching would compete with the monitors for the CPU.
    iterator = iter(distributed_pairs(strategy, cfg, steps_per_epoch, step))
    progress.update(step)
    last_logs: dict = {}
    t0, pairs_since = time.perf_counter(), 0
    every = cfg.checkpoint_every or steps_per_epoch
    # A call stops short of the next log, save, monitor or epoch point: cadences stay exact whatever K.
    cadences = (cfg.log_every, every, monitor_every if monitors is not None else 0, steps_per_epoch)
    while step < total_steps:
        peek = None
        if step == 0 and chief:  # the views the model sees, from the first batch (taken by the host)
            peek = lambda batch: summaries.write_views(  # noqa: E731
                writer, finish_views(strategy.experimental_local_results(batch)[0], cfg.augment), 0)
        stops.arm()
        # Dispatched; nothing below waits for it except at log and save points.
        logs, ran = run_steps(iterator, steps_in_call(step, cfg.steps_per_execution, total_steps, cadences), peek)
        signum = stops.stop_signal(logs)  # several workers: the previous call's agreed request
        step += ran
        pairs_since += cfg.batch_size * ran
        if step % cfg.log_every == 0 or step == total_steps:
            check_finite(step)
            last_logs = logs.fetch()  # one copy of the call's packed logs
            dt = time.perf_counter() - t0
            last_logs["pairs_per_sec"] = pairs_since / max(dt, 1e-9)
            summaries.write_scalars(writer, last_logs, step)
            t0, pairs_since = time.perf_counter(), 0
            # loss/augself is logged (as 0) without AugSelf too, so TensorBoard's tags match across runs; not shown
            shown = {k.split("/")[-1]: last_logs[k] for k in ("loss/total", "loss/method", "loss/augself")
                     if k in last_logs and (k != "loss/augself" or model.augself_heads)}
            shown.update({k.split("/")[0]: v for k, v in last_logs.items()  # each objective's, by its key
                          if k.endswith("/loss") and k.split("/")[0] in OBJECTIVES})
            progress.update(step, shown)
        else:
            progress.update(step)
        if step % every == 0 or step == total_steps:
            last_saved = save(step)
        if signum is not None and step < total_steps:
            if last_saved is None or not last_saved.endswith(f"-{step}"):
                last_saved = save(step)  # every worker saves (a collective); the chief's copy is the one kept
            progress.close()
            if writer is not None:
                writer.flush()
            if not chief:
                shutil.rmtree(write_dir, ignore_errors=True)
            saved = last_saved if chief else os.path.join(chief_ckpt_dir, f"ckpt-{step}")
            raise Preempted(f"stopped by {stops.reason(signum)} after step {step}/{total_steps}; saved {saved}; the "
                            "same command resumes from there", signum)
        if monitors is not None and (step % monitor_every == 0 or step == total_steps):
            progress.close()  # ends a terminal bar's line; the bar resumes below the monitor line
            t0 += monitors.run(step, step / steps_per_epoch)["seconds"]  # not counted in pairs/s
        if cfg.on_step is not None:
            cfg.on_step(step)
    progress.close()
    if writer is not None:
        writer.flush()

    saved_model_dir = None
    if lock is not None:
        lock.check()
    if cfg.export and chief:
        saved_model_dir = export_run(cfg, model, model_dir, lambda msg: _log(cfg, msg))
    if not chief:  # the scratch checkpoints only served the collective saves
        shutil.rmtree(write_dir, ignore_errors=True)
    if cfg.verbose:
        print(f"\nTensorBoard events: {tb_dir}")
        print(f"Checkpoints:        {ckpt_dir}")
        if saved_model_dir:
            print(f"SavedModel:         {saved_model_dir}")
        if monitors is not None:
            run_seconds = time.perf_counter() - run_start
            print(f"Monitors took {monitors.seconds_total:.1f} s of the run's {run_seconds:.1f} s "
                  f"({100 * monitors.seconds_total / max(run_seconds, 1e-9):.1f}%)")
        sys.stdout.flush()
    return TrainResult(model_dir, ckpt_dir, tb_dir, saved_model_dir, step, last_logs, model,
                       monitors.last if monitors is not None else {})
