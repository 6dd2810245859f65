"""The distributed training step: every replica runs `model.train_step`, and the logs are reduced across them.

Kept apart from the loop (training/loop.py) so the step the benchmarks time (bench/common.py) is the step a run
executes, whatever the loop around it does.

*Several steps per call* (``--steps_per_execution``, Keras' name): :class:`DistributedSteps` runs K steps in one
`tf.function` call, a `tf.range` loop taking each batch from the distributed iterator inside the graph, so the
host dispatches once per K steps and never waits between them. Each replica stacks its scalar logs into one
vector in a fixed key order (sorted names); the call reduces that vector once (one MEAN, as every log was
reduced before), so a call costs one cross-replica (and cross-worker) reduction, not one per log per step. The
vector carries two more entries, the replica's first non-finite step of the call (its offset in the call) and
whether it had one, so the NaN guard still names the first bad step without a reduction per step.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from augself_tf.runtime.strategy import CLUSTERS, REPLICA_FUNCTION, compile_clusters
from augself_tf.training.agreement import STOP_KEY, stop_output

#: The extra entries after the logs: the replica's first non-finite step of the call (1-based offset, 0 =
#: none), and 1.0 when it had one. Both are averaged with the logs.
_NONFINITE_ENTRIES = 2


def steps_in_call(step: int, steps_per_execution: int, total_steps: int, cadences: tuple[int, ...]) -> int:
    """How many steps the call starting after ``step`` runs: ``steps_per_execution``, cut at the next multiple
    of any of ``cadences`` (log, checkpoint, monitor, epoch; 0 = none) and at ``total_steps``.

    So a call never crosses a point where the loop logs, saves, runs monitors or starts an epoch: every cadence
    stays exact whatever K, and K only groups the steps between them.
    """
    size = min(steps_per_execution, total_steps - step)
    for every in cadences:
        if every > 0:
            size = min(size, every - step % every)
    return max(1, size)


class StepLogs:
    """The reduced logs of one call (its last step's), as one vector: copied to the host at the first read,
    once, and unpacked by the key order the traced step recorded."""

    def __init__(self, vector: tf.Tensor, keys: list[str]) -> None:
        self.vector = vector
        self.keys = keys
        self._values: dict[str, float] | None = None

    def _fetch(self) -> dict[str, float]:
        if self._values is None:
            values = self.vector.numpy()  # the call's only device-to-host copy
            self._values = {k: float(v) for k, v in zip(self.keys, values, strict=False)}
        return self._values

    def fetch(self) -> dict[str, float]:
        """The logged values by name (the stop vote left out)."""
        return {k: v for k, v in self._fetch().items() if k != STOP_KEY}

    def stop_vote(self) -> float:
        """The mean over replicas of the stop vote (0.0 when the step carries none)."""
        return self._fetch().get(STOP_KEY, 0.0)


class DistributedSteps:
    """`model.train_step` on every replica, one or several steps per `tf.function` call, logs reduced once.

    With `jit_compile` (True or ``REPLICA_FUNCTION``) the replica function is XLA-compiled, as Keras `fit` compiles
    it, and the function around `strategy.run` is not: on GPUs MirroredStrategy then runs each replica's compiled
    step without merge_call, reducing through collectives (docs/distributed.md, "The accelerator path"). With
    ``CLUSTERS`` (several CPU replicas, where XLA has no collectives) the step is traced in
    :func:`~augself_tf.runtime.strategy.compile_clusters`: XLA compiles it around its cross-replica reductions.
    With `nonfinite_step` (int64, 0 = none yet) a call records, inside the graph, the first step whose loss is
    NaN/Inf, so the loop need not fetch the loss after every call (a fetch stalls an accelerator's queue).
    With `stop_request` (this worker's stop vote, :class:`~augself_tf.training.agreement.StopAgreement`) the
    logs carry one more entry, ``STOP_KEY``, averaged with the others: above zero when any worker voted.
    ``steps_per_execution`` (the run's resolved ``TrainConfig.steps_per_execution``) is the most steps `call_size`
    gives a call.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        jit_compile: bool | str | None = False,
        nonfinite_step: tf.Variable | None = None,
        stop_request: tf.Variable | None = None,
        steps_per_execution: int = 1,
    ) -> None:
        self.strategy = strategy
        self.model = model
        self.steps_per_execution = steps_per_execution
        self.nonfinite_step = nonfinite_step
        self.stop_request = stop_request
        if jit_compile and jit_compile not in (True, REPLICA_FUNCTION, CLUSTERS):
            raise ValueError(f"jit_compile must be a bool, {REPLICA_FUNCTION!r} or {CLUSTERS!r}, got {jit_compile!r}")
        self.clusters = jit_compile == CLUSTERS
        whole = jit_compile and not self.clusters
        self.train_step = tf.function(model.train_step, jit_compile=True) if whole else model.train_step
        #: The log names in vector order, recorded when a replica step is traced.
        self.keys: list[str] = []
        self._one = tf.function(self.one_vector)
        # The step count is a tensor argument: one trace serves every call size (a short call before a boundary).
        self._many = tf.function(self.many_vector)

    def replica_step(self, batch: dict, carry: tf.Tensor | None, i: tf.Tensor | int) -> tf.Tensor:
        """One replica's step ``i`` of a call: its logs stacked in key order, then the non-finite entries updated
        from ``carry`` (the previous step's vector of this replica; None for a call's first step)."""
        if self.clusters:
            with compile_clusters():
                logs = self.train_step(batch)
        else:
            logs = self.train_step(batch)
        if self.stop_request is not None:
            logs = {**logs, STOP_KEY: stop_output(self.stop_request)}
        keys = sorted(logs)
        if self.keys and keys != self.keys:
            raise ValueError(f"the step's logs changed between traces: {self.keys} then {keys}")
        self.keys = keys
        values = [tf.cast(tf.reshape(logs[k], []), tf.float32) for k in keys]
        bad = ~tf.math.is_finite(tf.cast(logs["loss/total"], tf.float32))
        here = tf.cast(i, tf.float32) + 1.0
        if carry is None:
            offset, had = tf.where(bad, here, 0.0), tf.cast(bad, tf.float32)
        else:
            offset = tf.where(bad & (carry[-1] == 0.0), here, carry[-2])
            had = tf.maximum(carry[-1], tf.cast(bad, tf.float32))
        return tf.stack([*values, offset, had])

    def _reduce(self, per_replica, start: tf.Tensor) -> tf.Tensor:
        vector = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)  # the call's one reduction
        if self.nonfinite_step is not None:
            offset, had = vector[-2], vector[-1]
            # Exact when the replicas that went non-finite did so at the same step (a NaN reaches every replica
            # through the summed gradients); otherwise a step between their first ones.
            bad_step = start + tf.cast(tf.round(offset / tf.maximum(had, 1e-30)), tf.int64)
            first = (self.nonfinite_step == 0) & (had > 0.0)
            self.nonfinite_step.assign(tf.where(first, bad_step, self.nonfinite_step))
        return vector

    def _iterations(self) -> tf.Tensor:
        return tf.cast(tf.convert_to_tensor(self.model.optimizer.iterations), tf.int64)

    def one_vector(self, batch: dict) -> tf.Tensor:
        """One step on ``batch`` (a distributed batch); the reduced vector (logs in key order, then the two
        non-finite entries). Graph code: called inside a `tf.function`."""
        start = self._iterations()
        per_replica = self.strategy.run(lambda b: self.replica_step(b, None, 0), args=(batch,))
        return self._reduce(per_replica, start)

    def many_vector(self, iterator, steps: tf.Tensor) -> tf.Tensor:
        """``steps`` steps on batches taken from ``iterator`` inside the graph; the last step's reduced vector,
        with the call's first non-finite step. Needs :attr:`keys` (a step traced before: its vector's size)."""
        if not self.keys:
            raise RuntimeError("run one step (DistributedSteps.first) before several in a call: the loop's carry "
                               "takes its size from the traced step's logs")
        size = len(self.keys) + _NONFINITE_ENTRIES
        start = self._iterations()
        carry = self.strategy.run(lambda: tf.zeros([size], tf.float32))
        for i in tf.range(steps):
            carry = self.strategy.run(self.replica_step, args=(next(iterator), carry, i))
        return self._reduce(carry, start)

    def call_size(self, step: int, total_steps: int, cadences: tuple[int, ...]) -> int:
        """How many steps the call after ``step`` runs: ``steps_per_execution``, cut at the next point of
        ``cadences`` and at ``total_steps`` (`steps_in_call`)."""
        return steps_in_call(step, self.steps_per_execution, total_steps, cadences)

    def first(self, batch: dict) -> StepLogs:
        """One step on ``batch``, taken from the iterator by the host (the K = 1 path, and a process's first step)."""
        vector = self._one(batch)
        return StepLogs(vector, self.keys)

    def __call__(self, iterator, steps: int, peek: Callable[[dict], None] | None = None) -> tuple[StepLogs, int]:
        """Runs up to ``steps`` steps on ``iterator`` in one call; returns their logs and how many steps ran.

        One step when ``steps`` is 1 or when no step was traced yet (the loop function's carry takes its size
        from the logs a traced step gives): its batch is taken by the host and shown to ``peek`` first (the
        loop writes the first step's views to TensorBoard).
        """
        if steps == 1 or not self.keys or peek is not None:
            batch = next(iterator)
            if peek is not None:
                peek(batch)
            return self.first(batch), 1
        return StepLogs(self._many(iterator, tf.constant(steps, tf.int32)), self.keys), steps


def make_distributed_step(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    jit_compile: bool = False,
    nonfinite_step: tf.Variable | None = None,
    stop_request: tf.Variable | None = None,
):
    """A tf.function running `model.train_step` on every replica on one distributed batch and returning the
    logs averaged across them, by name (one reduction of the packed logs; :class:`DistributedSteps` for the
    arguments). The benchmarks time this step; the loop runs the same replica step through DistributedSteps."""
    steps = DistributedSteps(strategy, model, jit_compile, nonfinite_step, stop_request)

    @tf.function
    def step_fn(batch):
        vector = steps.one_vector(batch)
        return dict(zip(steps.keys, tf.unstack(vector)[: len(steps.keys)], strict=True))

    return step_fn
