"""A run's first stage: the strategy, the settings resolved for it, the data's facts, the run lock and run.json's
check.

Everything a run settles before it builds a model: a setting no run can use, a directory another live run holds,
or a resume with other model settings stops here, before anything is built or written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from augself_tf.augment.views import check_pair_batch
from augself_tf.data.source_base import SourceInfo
from augself_tf.data.sources import source_info
from augself_tf.methods import derived_options
from augself_tf.methods.augself_model import PretrainData
from augself_tf.runtime import files
from augself_tf.runtime.determinism import make_deterministic
from augself_tf.runtime.preemption import StopSignals
from augself_tf.runtime.run_lock import RunLock
from augself_tf.runtime.strategy import CLUSTERS, accelerated, compile_mode, is_chief, make_strategy
from augself_tf.training.checkpoints import check_run_settings, recorded_derived
from augself_tf.training.monitors import plan_monitors
from augself_tf.training.train_config import TrainConfig, resolve_for_devices, resolve_patch_size


@dataclasses.dataclass
class RunStart:
    """What the start of a run settled, for the stages after it.

    Attributes:
      cfg: the run's settings, resolved: a ViT's ``patch_size`` (0 made the image size's patch,
        `resolve_patch_size`), ``photometric``, ``model_dir``, ``weight_decay_exclude`` and ``steps_per_execution``
        (for these replicas: `resolve_for_devices`), and the method options the run derived when it began
        (run.json's).
      strategy: the run's `tf.distribute.Strategy`; ``chief``: whether this process writes the run's files.
      compile_mode: what ``--jit_compile`` compiles on these replicas (None: off).
      info: the pretraining split; ``data``: what a method derives its options from, with the run's length.
      monitor_plan: the monitors the flags ask for (None: none).
      input_mean, input_std: what the backbone normalises with.
      model_settings: the model's settings as run.json records them; ``derived``: the options the method derived.
      model_dir: the run's directory (absolute); ``write_dir``: where this process writes (a scratch directory on
        a worker that is not the chief); ``chief_ckpt_dir``: the checkpoints every worker resumes from.
      lock: the chief's run lock (None on other workers).
      log: prints a line when the run is verbose; ``started``: `time.perf_counter` at the start.
    """

    cfg: TrainConfig
    strategy: tf.distribute.Strategy
    chief: bool
    compile_mode: bool | str | None
    info: SourceInfo
    data: PretrainData
    monitor_plan: Any
    input_mean: tuple[float, ...]
    input_std: tuple[float, ...]
    model_settings: dict[str, Any]
    derived: dict[str, Any]
    model_dir: str
    write_dir: str
    lock: RunLock | None
    log: Callable[[str], None]
    started: float

    @property
    def replicas(self) -> int:
        """Replicas in sync over every worker."""
        return self.strategy.num_replicas_in_sync

    @property
    def ckpt_dir(self) -> str:
        """Where this process saves its checkpoints."""
        return os.path.join(self.write_dir, "checkpoints")

    @property
    def chief_ckpt_dir(self) -> str:
        """The chief's checkpoints: every worker resumes from them (``model_dir`` is shared by all workers)."""
        return os.path.join(self.model_dir, "checkpoints")

    @property
    def tb_dir(self) -> str:
        """The run's TensorBoard events."""
        return os.path.join(self.model_dir, "tensorboard")


def check_model_dir(model_dir: str) -> None:
    """Creates ``model_dir`` and proves it writable; a file there or an unwritable place is one ValueError line."""
    if files.exists(model_dir) and not files.isdir(model_dir):
        raise ValueError(f"--model_dir {model_dir} is a file, not a directory; choose another --model_dir")
    try:
        files.makedirs(model_dir)
        files.check_writable(model_dir)
    except OSError as err:
        raise ValueError(f"--model_dir {model_dir} is not writable ({err.strerror or err}); choose another "
                         "--model_dir") from None


def run_log(verbose: int) -> Callable[[str], None]:
    """The run's log: each line printed and flushed when ``verbose``, else nothing."""
    def log(msg: str) -> None:
        if verbose:
            print(msg, flush=True)

    return log


def prepare(cfg: TrainConfig, stop: StopSignals, held: contextlib.ExitStack) -> RunStart:
    """The run's strategy and resolved settings, the data's size and the run's length, the chief's lock on
    ``model_dir`` (entered on ``held``) and run.json's check of the model settings (nothing written yet).

    Raises:
      ValueError: settings no run can use here (a batch the replicas cannot split, a dataset of unknown size,
        bad monitor flags, an unusable ``model_dir``).
      RunDirBusyError: another live run holds ``model_dir``.
      CheckpointMismatchError: a resume with other model settings.
    """
    started = time.perf_counter()
    log = run_log(cfg.verbose)
    # The one resolution of --patch_size=0: the model, run.json and the log read the patch it gives.
    cfg = resolve_patch_size(cfg)
    if cfg.deterministic:
        make_deterministic()
    if cfg.mixed_precision == "float16" and cfg.strategy == "tpu":
        raise ValueError("--mixed_precision=float16 is not for TPUs (their matrix units compute in bfloat16); use "
                         "--mixed_precision=bfloat16")
    strategy = make_strategy(cfg.strategy, cfg.cpu_replicas, cfg.tpu)
    stop.reinstall()  # a multi-worker strategy's runtime takes SIGTERM over below Python: take it back
    # What the run asks of its strategy, once: who writes, what --jit_compile compiles, whether it accelerates.
    chief, on_accelerators = is_chief(strategy), accelerated(strategy)
    mode = compile_mode(strategy) if cfg.jit_compile else None
    cfg = resolve_for_devices(cfg, on_accelerators)  # the settings' one resolution: the stages read them from cfg
    replicas = strategy.num_replicas_in_sync
    if cfg.batch_size % replicas:
        raise ValueError(f"global batch size {cfg.batch_size} is not divisible by the {replicas} replicas")
    check_pair_batch(cfg.model.views(), cfg.batch_size // replicas)
    if mode == CLUSTERS:
        log(f"--jit_compile on {replicas} CPU replicas: XLA compiles the step's clusters, the cross-replica "
            "reductions between them (XLA has no CPU collectives; GPUs and TPUs compile the whole replica function)")
    if cfg.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{cfg.mixed_precision}")
    keras.utils.set_random_seed(cfg.seed)  # Keras initialisers draw from this; the input is seeded by cfg.seed

    info, data = _run_length(cfg)
    monitor_plan = plan_monitors(cfg, info.num_examples)  # bad monitor flags fail before the model is built
    input_mean, input_std = cfg.model.input_statistics(info.mean, info.std)
    model_dir = files.absolute(cfg.model_dir)  # a gs:// URL as given
    lock = None
    if chief:  # other workers write to scratch directories: the chief's lock covers the run
        check_model_dir(model_dir)
        # Before anything reads or repairs the directory: a second run must not touch a live run's files.
        lock = held.enter_context(RunLock(model_dir, log=log))
        stop.before_exit_now.append(lock.release)
        removed, restored = [], []
        for sub in ("", "checkpoints/"):
            gone, back = files.remove_leftovers(f"{model_dir}/{sub}".rstrip("/"))
            removed += [sub + name for name in gone]
            restored += [sub + name for name in back]
        if restored:
            log(f"Put back what a killed run left between two renames in {model_dir}: {', '.join(restored)}")
        if removed:
            log(f"Removed what a killed run left half-written in {model_dir}: {', '.join(removed)}")
    # Before anything is built: a resume with other model settings stops at once, naming the flags. The file
    # is written once the model is built, so that settings no model can be built from are never recorded.
    model_settings = cfg.model.checked_settings(input_mean, input_std)
    check_run_settings(model_dir, model_settings, write=False)
    # Non-chief workers must still take part in saving (collectives), but write to scratch space.
    write_dir = model_dir if chief else tempfile.mkdtemp(prefix="augself_worker_")
    # Options the method derived from the batch when the run started (MoCo's queue size) are reused: a resume
    # with another global batch (8 GPUs, then 4) must rebuild the variables the checkpoint holds.
    reused = recorded_derived(model_dir, cfg.model.method_options)
    if reused:
        log("Reusing what the run derived when it started (run.json): "
            f"{', '.join(f'--{k}={v}' for k, v in sorted(reused.items()))}")
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, method_options={**cfg.model.method_options, **reused}))
    derived = {**derived_options(cfg.model.method, cfg.model.method_options, data), **reused}
    return RunStart(cfg, strategy, chief, mode, info, data, monitor_plan, input_mean,
                    input_std, model_settings, derived, model_dir, write_dir, lock, log, started)


def _run_length(cfg: TrainConfig) -> tuple[SourceInfo, PretrainData]:
    """The pretraining split and the run's length: whole global batches per epoch, ``--max_steps`` at most."""
    info = source_info(cfg.dataset, cfg.split, data_dir=cfg.data_dir)
    if not info.num_examples:
        raise ValueError(f"dataset '{cfg.dataset}' split '{cfg.split}' has an unknown or zero size")
    steps_per_epoch = info.num_examples // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch size {cfg.batch_size} exceeds the {info.num_examples} examples of '{cfg.dataset}'")
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    data = PretrainData(cfg.dataset, info.num_examples, max(0, info.num_classes or 0), cfg.batch_size, total_steps,
                        steps_per_epoch)
    return info, data
