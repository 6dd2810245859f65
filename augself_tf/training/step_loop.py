"""A run's steps, from the step it resumed at to its last, and the points on the way where it logs, saves a
checkpoint, stops for a signal and runs its monitors: each a method of `StepLoop`.

A call of the step (`DistributedSteps`: up to ``--steps_per_execution`` steps) stops short of the next of these
points, so every cadence stays exact whatever the number of steps per call.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from augself_tf.augment import finish_views
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.objectives import OBJECTIVES
from augself_tf.progress import Progress
from augself_tf.runtime.preemption import Preempted, StopSignals
from augself_tf.training import summaries
from augself_tf.training.agreement import StopAgreement
from augself_tf.training.checkpoint_files import LIMIT, save_verified
from augself_tf.training.distributed_step import DistributedSteps, StepLogs
from augself_tf.training.health import NonFiniteLossError, advice, make_state_check
from augself_tf.training.hparams import write_run_hparams
from augself_tf.training.monitors import build_monitors
from augself_tf.training.run_start import RunStart


@dataclasses.dataclass
class Restored:
    """What the loop starts from: the built model, its checkpoint and state, and the step it was restored at
    (``last_saved``: the checkpoint it came from, None for a fresh run)."""

    model: AugSelfModel
    checkpoint: tf.train.Checkpoint
    state: Any
    step: int
    last_saved: str | None


class StepLoop:
    """The steps of one run and its log, save, stop and monitor points.

    Made after the model is restored: it opens the run's TensorBoard writer (the HParams session once, at step
    0), prints the run's description, and builds the monitors a run with steps left needs. `run` then trains to
    the last step; ``step``, ``last_logs`` and ``monitors`` are what the run reports at the end.
    """

    def __init__(self, start: RunStart, restored: Restored, stop: StopSignals) -> None:
        cfg = self.cfg = start.cfg
        self.start = start
        self.model = restored.model
        self.checkpoint = restored.checkpoint
        self.step = restored.step
        self.last_saved = restored.last_saved
        self.total_steps = start.data.total_steps
        self.steps_per_epoch = start.data.steps_per_epoch
        self.nonfinite_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_step")
        self.stops = StopAgreement(start.strategy, stop)  # several workers stop at one agreed step
        self.run_steps = DistributedSteps(start.strategy, self.model, start.compile_mode, self.nonfinite_step,
                                          self.stops.request, cfg.steps_per_execution)
        self.bad_variable = make_state_check(restored.state)
        self.what_to_do = advice(cfg.lr, cfg.batch_size, cfg.model.augself_weight,
                                 {t.name: t.weight for t in cfg.model.augself})
        self.writer = summaries.make_writer(start.tb_dir if start.chief else None)
        if self.writer is not None and self.step == 0:  # once per run: a resumed run is the same HParams session
            write_run_hparams(self.writer, cfg, trial_id=os.path.basename(start.model_dir))
        start.log(summaries.describe_run(cfg, start.replicas, start.info.num_examples, self.steps_per_epoch,
                                         self.total_steps, (start.input_mean, start.input_std)))
        # In a log file: about 50 lines per run, each on a logging step so its losses are fresh.
        self.progress = Progress(self.total_steps, "pretrain", enabled=bool(cfg.verbose), line_multiple=cfg.log_every)
        self.monitors = None
        if start.monitor_plan is not None and self.step < self.total_steps:
            self.monitors = build_monitors(start.monitor_plan, cfg, start.strategy, self.model.evaluated_backbone,
                                           self.writer, start.log)
        self.monitor_every = self.steps_per_epoch * cfg.monitor_every
        self.checkpoint_every = cfg.checkpoint_every or self.steps_per_epoch
        self.last_logs: dict = {}
        self._clock, self._pairs = time.perf_counter(), 0  # the window pairs/s is measured over

    def run(self, pairs: Callable[[int], Iterator]) -> int:
        """Trains from the restored step to the last; ``pairs(step)`` is the input from global step ``step`` on.
        Returns the last step.

        Raises:
          Preempted: a stop signal; the step it interrupted was finished and saved.
          NonFiniteLossError: the loss or the state diverged; nothing after the last good checkpoint was saved.
        """
        if self.monitors is not None and self.step == 0:  # the "before training" point of a fresh run
            self.monitors.run(self.step, 0.0)
        # Created after that point: its background prefetching would compete with the monitors for the CPU.
        iterator = pairs(self.step)
        self.progress.update(self.step)
        self._clock, self._pairs = time.perf_counter(), 0
        # A call stops short of the next log, save, monitor or epoch point: cadences stay exact whatever K.
        cadences = (self.cfg.log_every, self.checkpoint_every, self.monitor_every if self.monitors is not None else 0,
                    self.steps_per_epoch)
        while self.step < self.total_steps:
            logs, signum = self.call(iterator, cadences)
            if self._at(self.cfg.log_every):
                self.log_point(logs)
            else:
                self.progress.update(self.step)
            if self._at(self.checkpoint_every):
                self.save()
            if signum is not None and self.step < self.total_steps:
                self.stop_point(signum)
            if self.monitors is not None and self._at(self.monitor_every):
                self.monitor_point()
            if self.cfg.on_step is not None:
                self.cfg.on_step(self.step)
        self.close()
        return self.step

    def _at(self, every: int) -> bool:
        return self.step % every == 0 or self.step == self.total_steps

    def call(self, iterator: Iterator, cadences: tuple[int, ...]) -> tuple[StepLogs, int | None]:
        """Dispatches one call of the step up to the next point in ``cadences``; its logs, and the signal the
        workers agreed to stop for (None: none)."""
        peek = None
        if self.step == 0 and self.start.chief:  # the views the model sees, from the first batch (taken by the host)
            local = self.start.strategy.experimental_local_results
            peek = lambda batch: summaries.write_views(  # noqa: E731
                self.writer, finish_views(local(batch)[0], self.cfg.augment), 0)
        self.stops.arm()
        # Dispatched; nothing below waits for it except at log and save points.
        steps = self.run_steps.call_size(self.step, self.total_steps, cadences)
        logs, ran = self.run_steps(iterator, steps, peek)
        signum = self.stops.stop_signal(logs)  # several workers: the previous call's agreed request
        self.step += ran
        self._pairs += self.cfg.batch_size * ran
        return logs, signum

    def check_finite(self) -> None:
        """Raises if any step so far had a NaN/Inf loss, or if a weight, BN statistic or buffer is NaN/Inf or
        overflowing now; called at log points and before every save, so every checkpoint is sound.

        Raises:
          NonFiniteLossError: naming the step and the last good checkpoint.
        """
        bad = int(self.nonfinite_step.numpy())
        where = None if bad else self.bad_variable()
        if bad or where:
            what = (f"loss became NaN or Inf at step {bad}" if bad else
                    f"training diverged by step {self.step}: {where} holds NaN/Inf or values beyond {LIMIT:g}")
            raise NonFiniteLossError(
                f"{what}; stopped without saving. The last good checkpoint in {self.start.ckpt_dir} is "
                f"{self.last_saved or '(none yet)'}; {self.what_to_do}."
            )

    def log_point(self, logs: StepLogs) -> None:
        """Copies the call's logs to the host once: TensorBoard's scalars, pairs/s, the progress line's losses."""
        self.check_finite()
        self.last_logs = logs.fetch()  # one copy of the call's packed logs
        seconds = time.perf_counter() - self._clock
        self.last_logs["pairs_per_sec"] = self._pairs / max(seconds, 1e-9)
        summaries.write_scalars(self.writer, self.last_logs, self.step)
        self._clock, self._pairs = time.perf_counter(), 0
        # loss/augself is logged (as 0) without AugSelf too, so TensorBoard's tags match across runs; not shown
        shown = {k.split("/")[-1]: self.last_logs[k] for k in ("loss/total", "loss/method", "loss/augself")
                 if k in self.last_logs and (k != "loss/augself" or self.model.augself_heads)}
        shown.update({k.split("/")[0]: v for k, v in self.last_logs.items()  # each objective's, by its key
                      if k.endswith("/loss") and k.split("/")[0] in OBJECTIVES})
        self.progress.update(self.step, shown)

    def save(self) -> str:
        """A verified checkpoint of this step, after the lock and the state are checked; returns its path."""
        if self.start.lock is not None:
            self.start.lock.check()
        self.check_finite()
        self.last_saved = save_verified(self.checkpoint, self.start.ckpt_dir, self.step, self.cfg.keep_checkpoints,
                                        chief=self.start.chief)
        return self.last_saved

    def stop_point(self, signum: int) -> None:
        """Saves this step unless it is saved already, and raises `Preempted` (every worker, at the same step).

        Raises:
          Preempted: always; its message names the checkpoint and says that the same command resumes.
        """
        if self.last_saved is None or not self.last_saved.endswith(f"-{self.step}"):
            self.save()  # every worker saves (a collective); the chief's copy is the one kept
        self.close()
        if not self.start.chief:
            shutil.rmtree(self.start.write_dir, ignore_errors=True)
        saved = self.last_saved if self.start.chief else os.path.join(self.start.chief_ckpt_dir, f"ckpt-{self.step}")
        raise Preempted(f"stopped by {self.stops.reason(signum)} after step {self.step}/{self.total_steps}; saved "
                        f"{saved}; the same command resumes from there", signum)

    def monitor_point(self) -> None:
        """Runs the monitors at this step; their time is left out of pairs/s."""
        self.progress.close()  # ends a terminal bar's line; the bar resumes below the monitor line
        self._clock += self.monitors.run(self.step, self.step / self.steps_per_epoch)["seconds"]

    def close(self) -> None:
        """Ends the progress display and flushes the TensorBoard events."""
        self.progress.close()
        if self.writer is not None:
            self.writer.flush()
