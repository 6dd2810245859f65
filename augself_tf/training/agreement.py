"""What the workers of a multi-worker run must agree on: the step to stop at and the checkpoint to resume from.

Every collective (a step's all-reduce, a checkpoint save, a monitor's gather) needs every worker. A worker
that stops alone, or starts at another step, leaves its peers waiting in a collective for ever: a scheduler
that signals one node (or the nodes at different moments) hung the whole job with nothing saved, and workers
that restored different checkpoints trained different weights until one ran out of steps and the rest hung.

*The stop step.* Each worker's signal handler only records the signal (:class:`StopSignals`). Before every call of
the step (up to ``--steps_per_execution`` steps; one on CPUs by default) the loop copies it into a per-worker
variable that the replica function returns as one more entry of its packed logs (:data:`STOP_KEY`), averaged across
every replica of every worker together with the losses: no collective of its own. The average is above zero on
every worker after the same call as soon as any worker was signalled, so all of them see the request at the same
step, save it (a collective) and exit. The loop reads the entry one call late (the previous call's output, while
the next call is already queued) rather than waiting for the call it just dispatched. One worker, one process: the
loop reads its own flag after every call.

*The resume.* Each worker picks the newest intact checkpoint of the chief's folder as it reads it; the steps
chosen are gathered across workers (one collective, before training) and a disagreement stops every worker
with one line naming the steps rather than a hang.
"""

from __future__ import annotations

import re
import signal
from typing import Protocol

import tensorflow as tf

from augself_tf.runtime.preemption import StopSignals
from augself_tf.training.checkpoint_files import CheckpointFileError

#: The step output that carries the stop request (the mean over replicas of "this worker was signalled").
STOP_KEY = "stop_requested"
#: The signal a worker that was not signalled itself reports (its exit code is 128 + this): the job is being
#: stopped from outside, as a pre-emption is.
PEER_SIGNAL = int(signal.SIGTERM)


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """How many workers (processes) run ``strategy``'s replicas: 1 unless it spans several machines."""
    local = max(1, len(strategy.extended.worker_devices))
    return max(1, strategy.num_replicas_in_sync // local)


class CallLogs(Protocol):
    """What the loop gets from a call of the distributed step
    (:class:`~augself_tf.training.distributed_step.StepLogs`)."""

    def stop_vote(self) -> float:
        """The call's :data:`STOP_KEY` entry: the mean over every replica of every worker of its vote."""
        ...


class StopAgreement:
    """Turns one worker's recorded signal into a stop at the same step on every worker.

    With one worker, :meth:`stop_signal` returns the handler's own signal (the loop behaves as it always
    did) and :attr:`request` is None. With several, :attr:`request` is the variable the distributed step reads
    (:class:`augself_tf.training.distributed_step.DistributedSteps`), :meth:`arm` sets it before each call and
    :meth:`stop_signal` decodes the agreed request from the step outputs.
    """

    def __init__(self, strategy: tf.distribute.Strategy, stop: StopSignals) -> None:
        self._stop = stop
        self.workers = worker_count(strategy)
        # A plain variable per worker, outside the strategy's scope: mirrored variables must stay equal across
        # workers, this one differs on purpose (it is each worker's own vote).
        self.request = tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_request") \
            if self.workers > 1 else None
        self._armed = False
        self._previous: CallLogs | None = None

    def arm(self) -> None:
        """Copies the local signal into :attr:`request` (once: one host-to-device write per run)."""
        if self.request is not None and not self._armed and self._stop.signum is not None:
            self.request.assign(1)
            self._armed = True

    def stop_signal(self, logs: CallLogs) -> int | None:
        """The signal to stop on after the call that returned ``logs``, or None.

        Several workers: the request of the PREVIOUS call's output (its last step's vote), reduced across all
        of them, so the same on every worker; a worker that was not signalled itself reports
        :data:`PEER_SIGNAL`.
        """
        if self.request is None:
            return self._stop.signum
        current, self._previous = self._previous, logs
        if current is None or current.stop_vote() <= 0:
            return None
        return self._stop.signum if self._stop.signum is not None else PEER_SIGNAL

    def reason(self, signum: int) -> str:
        """How the stop message names its cause: the signal, and whether it came to another worker."""
        name = signal.Signals(signum).name
        return name if self._stop.signum is not None else f"{name} (sent to another worker)"


def stop_output(request: tf.Variable) -> tf.Tensor:
    """This replica's stop entry: 1.0 when its worker was signalled, else 0.0 (averaged with the logs)."""
    return tf.cast(request.read_value() > 0, tf.float32)


def _step_of(path: str | None) -> int:
    match = re.search(r"ckpt-(\d+)$", path or "")
    return int(match.group(1)) if match else 0


def _worker_name(strategy: tf.distribute.Strategy) -> str:
    resolver = getattr(strategy, "cluster_resolver", None)
    task = getattr(resolver, "task_type", None)
    return f"{task} {resolver.task_id}" if task else "this worker"


def agree_on_resume(strategy: tf.distribute.Strategy, latest: str | None, ckpt_dir: str) -> None:
    """Checks that every worker chose the same checkpoint of ``ckpt_dir`` (``latest``: this worker's choice,
    None = none there).

    One all-gather of each replica's chosen step through ``strategy``; a no-op with a single worker.

    Raises:
      CheckpointFileError: the workers chose different steps (one line naming them, on every worker).
    """
    if worker_count(strategy) <= 1:
        return
    mine = _step_of(latest)
    chosen = strategy.experimental_distribute_values_from_function(
        lambda _ctx: tf.constant([mine], dtype=tf.int64))
    steps = sorted({int(s) for s in strategy.gather(chosen, axis=0).numpy()})
    if len(steps) == 1:
        return
    names = [f"{s}" if s else "0 (no checkpoint)" for s in steps]
    raise CheckpointFileError(
        f"workers disagree on the checkpoint to resume from: steps {', '.join(names[:-1])} and {names[-1]} "
        f"({_worker_name(strategy)} chose {names[steps.index(mine)]}, reading {ckpt_dir}); every worker must read "
        "the chief's checkpoints in one shared --model_dir: check that it is the same folder on every machine, "
        "then start all workers again")
