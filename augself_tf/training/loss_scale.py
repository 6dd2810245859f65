"""Dynamic loss scaling for float16 with ONE verdict over every replica's gradients.

Keras 3's `LossScaleOptimizer` decides "the gradients are finite" from the gradients it is handed, which in
Keras 3 are each replica's LOCAL, unreduced gradients (the cross-replica sum happens later, inside the inner
optimizer). Under the merge-call path (MirroredStrategy on CPUs, and GPUs without XLA) it takes replica 0's
verdict for everyone: an overflow on replica 1 alone is summed into the weights (they become ±inf) and the
scale never drops. Under the no-merge-call path (GPUs with a jit-compiled replica function) each replica
follows its own verdict, and its `tf.cond` around the inner optimizer's `merge_call` fails to trace.

:class:`CrossReplicaLossScaleOptimizer` all-reduces a per-replica "non-finite" count (SUM: tf.distribute has
no MIN) before anything is applied, so every replica, worker and device sees the same verdict. It then runs
the same ops on every path with no branch: the inner optimizer (:class:`~augself_tf.training.optim.TorchSGD`,
which supports `gate_updates`) applies the step, keeping the old weights and buffers where the verdict is
"not finite" — a `tf.cond` around the inner optimizer's collectives and `merge_call`s is what the no-merge-call
path cannot trace. A skipped step still counts in `iterations`, so the optimizer's step, the learning-rate
schedule and the training loop's step stay one number (a resume skips exactly the batches the run consumed),
as PyTorch's GradScaler with a per-step scheduler behaves.
"""

from __future__ import annotations

import keras
import tensorflow as tf


class CrossReplicaLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """`keras.optimizers.LossScaleOptimizer` whose skip decision is global across replicas.

    Same variables, names and checkpoint keys as Keras' (``loss_scale_optimizer/dynamic_scale`` and
    ``step_counter``), same `scale_loss` and schedule of the scale: halved on a step with a non-finite gradient
    on ANY replica (the step is skipped on every replica), doubled after `dynamic_growth_steps` finite steps.

    Args:
      inner_optimizer: the optimizer applying the unscaled gradients; it must offer ``gate_updates(variable)``
        (:class:`~augself_tf.training.optim.TorchSGD` does).
      initial_scale, dynamic_growth_steps: as Keras'.
    """

    def __init__(
        self,
        inner_optimizer: keras.optimizers.Optimizer,
        initial_scale: float = 2.0**15,
        dynamic_growth_steps: int = 2000,
        name: str = "loss_scale_optimizer",  # Keras' name: float16 checkpoints keep their keys
        **kwargs,
    ) -> None:
        if not hasattr(inner_optimizer, "gate_updates"):
            raise TypeError(f"{type(inner_optimizer).__name__} cannot skip a step without a branch (no gate_updates)")
        super().__init__(inner_optimizer, initial_scale=initial_scale, dynamic_growth_steps=dynamic_growth_steps,
                         name=name, **kwargs)
        self._finite = None

    def build(self, var_list: list) -> None:
        """Keras' variables, plus this step's verdict: one boolean per replica (aggregation NONE, so each replica
        writes its own copy without a `merge_call`; all copies hold the same global verdict). It is not part of
        `variables`, so checkpoints do not hold it."""
        if self.built:
            return
        super().build(var_list)
        with tf.init_scope():
            self._finite = tf.Variable(True, trainable=False, name="finite_step",
                                       synchronization=tf.VariableSynchronization.ON_WRITE,
                                       aggregation=tf.VariableAggregation.NONE)
        self.inner_optimizer.gate_updates(self._finite)

    def global_finite(self, grads: list) -> tf.Tensor:
        """True iff the gradients of every replica (on every worker) are finite; call in replica context."""
        local = self.check_finite(grads)
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return local
        bad = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(local), tf.float32))
        return tf.equal(bad, 0.0)

    def apply(self, grads: list, trainable_variables: list | None = None) -> None:
        """Unscales and applies `grads` (this replica's, scaled by `scale_loss`) unless some replica's are not
        finite; updates the scale. Must run in replica context, as Keras' `apply`."""
        if tf.distribute.in_cross_replica_context():
            raise ValueError("apply() must be called in a replica context")
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        finite = self.global_finite(grads)
        self._finite.assign(finite)
        scale = tf.convert_to_tensor(self.dynamic_scale.value)
        unscaled = [None if g is None else g / tf.cast(scale, g.dtype) for g in grads]
        # Every replica runs this whether or not the step is kept, so the collectives and merge_calls inside it
        # match; the inner optimizer reads the verdict (its gate) and keeps the old values on a skipped step.
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)
        grow = tf.logical_and(finite, tf.equal(self.step_counter.value, self.dynamic_growth_steps - 1))
        new_scale = tf.where(finite, tf.where(grow, scale * 2.0, scale), scale * 0.5)
        counter = tf.convert_to_tensor(self.step_counter.value)
        new_counter = tf.where(finite & ~grow, counter + 1, tf.zeros_like(counter))
        self.step_counter.assign(new_counter)
        self.dynamic_scale.assign(new_scale)
