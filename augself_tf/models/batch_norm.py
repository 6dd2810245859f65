"""Batch normalization with PyTorch's semantics, optionally synchronized across replicas.

Two differences from `keras.layers.BatchNormalization`, both for fidelity to the paper's PyTorch code:
- the moving variance is updated with the UNBIASED batch variance (n/(n−1)·biased, as ``torch.nn.BatchNorm``),
  while the batch itself is normalised with the biased one, as both frameworks do;
- with several replicas the statistics are over the global batch, computed as below.

Keras's `BatchNormalization(synchronized=True)` makes three `ReplicaContext.all_reduce` calls per layer,
and each is a `tf.custom_gradient`. In graph mode that wrapper walks the graph back from its output to
find captured variables; under MirroredStrategy every replica lives in one graph and a reduced output
depends on every replica's input, so each walk crosses the whole graph built so far, forward and
backward. Tracing costs (BN layers × graph size): py-spy put ~75 s of a 150 s two-replica trace of a
1/16-width ResNet-18 there. Here the statistics enter a single all-reduce through `stop_gradient`, which
ends those walks, and the gradient Keras would give (the all-reduced upstream gradient) comes from a
custom gradient whose walk stops at its own inputs. Values and gradients are unchanged (tested against
one device on the same global batch).

Unsynchronized training of NHWC or (N, C) inputs runs TF's fused kernel (`FusedBatchNormV3`), which already
returns the unbiased batch variance PyTorch's running statistics take; Keras 3 composes BN from moments and
elementwise ops; the fused kernel and its gradient take ~11% off the CPU of a ResNet-18 SimSiam step
(docs/benchmarks.md §5.6).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf


def _replica_sum(local: tf.Tensor) -> tf.Tensor:
    """Σ over replicas of `local`, with d(sum)/d(local) = identity and the upstream gradient summed
    over replicas, as for `ReplicaContext.all_reduce`."""
    ctx = tf.distribute.get_replica_context()

    @tf.custom_gradient
    def attach(x: tf.Tensor, total: tf.Tensor):
        def grad(upstream: tf.Tensor):
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.stop_gradient(upstream)), None

        return tf.identity(total), grad

    return attach(local, ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.stop_gradient(local)))


def _element_count(x: tf.Tensor, axes: list[int]) -> tf.Tensor:
    """How many values of ``x`` each channel's statistics average over ``axes`` (float32 [1]): a constant when those
    dimensions are static, as in a training step's per-replica batch (no shape ops to trace per layer)."""
    dims = [x.shape[a] for a in axes]
    if all(d is not None for d in dims):
        return tf.constant([math.prod(dims)], tf.float32)
    return tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), tf.float32)[None]


def sync_moments(x: tf.Tensor, axes: list[int]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Mean, (biased) variance and element count of `x` over `axes` and over all replicas of the current
    replica context (the count as a float32 [1])."""
    dtype = x.dtype
    x = tf.cast(x, tf.float32)  # float16 is too coarse for the statistics
    stats = tf.concat([tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), _element_count(x, axes)], axis=0)
    total = _replica_sum(stats)
    channels = x.shape[-1] if axes == list(range(x.shape.rank - 1)) else None
    if channels is not None:  # one split where the dynamic slices below trace a dozen shape and slice ops
        sums, squares, count = tf.split(total, [channels, channels, 1])
    else:
        channels = (tf.shape(total)[0] - 1) // 2
        sums, squares, count = total[:channels], total[channels : 2 * channels], total[-1:]
    n = tf.maximum(count, 1.0)
    mean = sums / n
    variance = tf.maximum(squares / n - tf.square(mean), 0.0)
    return tf.cast(mean, dtype), tf.cast(variance, dtype), count


@keras.saving.register_keras_serializable(package="augself_tf")
class BatchNorm(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` with PyTorch's moving variance and our cross-replica statistics.

    Args:
      synchronized: statistics over every replica of a `tf.distribute` strategy (plain BN on one replica).
      **kwargs: those of `keras.layers.BatchNormalization` (renorm is not supported).
    """

    def __init__(self, synchronized: bool = False, **kwargs) -> None:
        if kwargs.get("renorm"):
            raise ValueError("BatchNorm does not support renorm")
        super().__init__(synchronized=False, **kwargs)
        self.sync_replicas = bool(synchronized)

    def _statistics(self, inputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Batch mean, biased variance and the number of values each channel's statistics average."""
        axes = list(self._reduction_axes)
        if self._synchronizing():
            return sync_moments(inputs, axes)
        mean, variance = keras.ops.moments(inputs, axes=axes)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), tf.float32)
        return mean, variance, count

    def _synchronizing(self) -> bool:
        """Whether this call's statistics are over several replicas."""
        ctx = tf.distribute.get_replica_context()
        return self.sync_replicas and ctx is not None and ctx.num_replicas_in_sync > 1

    def _fusable(self, inputs: tf.Tensor) -> bool:
        """Whether the fused kernel computes this layer's training step: local statistics over every axis but
        the last, of a rank-2 or rank-4 input."""
        rank = inputs.shape.rank
        return not self._synchronizing() and rank in (2, 4) and self.axis in (-1, rank - 1)

    def _update_moving(self, mean: tf.Tensor, unbiased: tf.Tensor) -> None:
        """PyTorch's running statistics: running ← momentum·running + (1 − momentum)·batch (unbiased variance)."""
        m = self.momentum
        self.moving_mean.assign(tf.cast(self.moving_mean, mean.dtype) * m + mean * (1.0 - m))
        self.moving_variance.assign(tf.cast(self.moving_variance, unbiased.dtype) * m + unbiased * (1.0 - m))

    def _fused_training_call(self, inputs: tf.Tensor) -> tf.Tensor:
        """Normalise with the batch statistics and update the moving ones through `FusedBatchNormV3`: float32
        statistics for any input dtype, the unbiased variance returned as PyTorch's running variance takes it."""
        x = inputs if inputs.shape.rank == 4 else inputs[:, None, None, :]
        channels = x.shape[-1]
        scale = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels], tf.float32)
        offset = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels], tf.float32)
        if x.dtype not in (tf.float16, tf.bfloat16, tf.float32):
            x = tf.cast(x, tf.float32)
        y, mean, unbiased, _, _, _ = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=tf.zeros([0]), variance=tf.zeros([0]),
            epsilon=self.epsilon, is_training=True, data_format="NHWC",
        )
        self._update_moving(mean, unbiased)
        if inputs.shape.rank == 2:
            y = y[:, 0, 0, :]
        return tf.cast(y, self.compute_dtype)

    def call(self, inputs, training=None, mask=None):
        if not (training and self.trainable):
            return super().call(inputs, training=training, mask=mask)
        if mask is not None:
            raise ValueError("BatchNorm does not support masks in training")
        if self._fusable(inputs):
            return self._fused_training_call(inputs)
        x = tf.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        mean, variance, count = self._statistics(x)
        self._update_moving(mean, variance * tf.cast(count / tf.maximum(count - 1.0, 1.0), variance.dtype))
        outputs = keras.ops.batch_normalization(
            x=x,
            mean=mean,
            variance=variance,
            axis=self.axis,
            offset=tf.cast(self.beta, x.dtype) if self.center else None,
            scale=tf.cast(self.gamma, x.dtype) if self.scale else None,
            epsilon=self.epsilon,
        )
        return tf.cast(outputs, self.compute_dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "synchronized": self.sync_replicas}
