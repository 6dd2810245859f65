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

    With `jit_compile` the replica function is XLA-compiled, as Keras `fit` compiles it, and the function around
    `strategy.run` is not: on GPUs MirroredStrategy then runs each replica's compiled step without merge_call,
    reducing through collectives (docs/distributed.md, "The accelerator path").
    With `nonfinite_step` (int64, 0 = none yet) the step records, inside the graph, the first step whose
    loss is NaN/Inf, so the loop need not fetch the loss every step (a fetch stalls an accelerator's queue).
    With `stop_request` (this worker's stop vote, :class:`~augself_tf.training.agreement.StopAgreement`) the
    logs carry one more entry, ``STOP_KEY``, averaged with the others: above zero when any worker voted.
    """

    train_step = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step

    def with_stop_vote(batch):
        return {**train_step(batch), STOP_KEY: stop_output(stop_request)}

    @tf.function
    def step_fn(batch):
        per_replica = strategy.run(train_step if stop_request is None else with_stop_vote, args=(batch,))
        logs = {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in per_replica.items()}
        if nonfinite_step is not None:
            first = (nonfinite_step == 0) & ~tf.math.is_finite(logs["loss/total"])
            nonfinite_step.assign(tf.where(first, tf.cast(model.optimizer.iterations, tf.int64), nonfinite_step))
        return logs

    return step_fn
