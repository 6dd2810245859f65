"""The distributed training step: every replica runs `model.train_step`, and the logs are reduced across them.

Kept apart from the loop (training/loop.py) so the step the benchmarks time (bench/common.py) is the step a run
executes, whatever the loop around it does.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from augself_tf.training.agreement import STOP_KEY, stop_output


def make_distributed_step(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    jit_compile: bool = False,
    nonfinite_step: tf.Variable | None = None,
    stop_request: tf.Variable | None = None,
):
    """A tf.function running `model.train_step` on every replica and averaging its logs across them.

    With `nonfinite_step` (int64, 0 = none yet) the step records, inside the graph, the first step whose
    loss is NaN/Inf, so the loop need not fetch the loss every step (a fetch stalls an accelerator's queue).
    With `stop_request` (this worker's stop vote, :class:`~augself_tf.training.agreement.StopAgreement`) the
    logs carry one more entry, ``STOP_KEY``, averaged with the others: above zero when any worker voted.
    """

    def replica_step(batch):
        return {**model.train_step(batch), STOP_KEY: stop_output(stop_request)}

    @tf.function(jit_compile=jit_compile or None)
    def step_fn(batch):
        per_replica = strategy.run(model.train_step if stop_request is None else replica_step, args=(batch,))
        logs = {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in per_replica.items()}
        if nonfinite_step is not None:
            first = (nonfinite_step == 0) & ~tf.math.is_finite(logs["loss/total"])
            nonfinite_step.assign(tf.where(first, tf.cast(model.optimizer.iterations, tf.int64), nonfinite_step))
        return logs

    return step_fn
