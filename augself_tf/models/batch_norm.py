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
1/16-width ResNet-18 there. Here, as in PyTorch's `SyncBatchNorm`, the forward pass all-reduces the
moments once (through `stop_gradient`) and the backward pass all-reduces Σdy and Σdy·x̂ once, in a closed-form
gradient whose walk stops at its own inputs: 87 ops per layer and replica, forward and backward with the moving
statistics, where autodiff through the moments traced 142. Values and gradients are those of one BN over the
global batch (tested against one device and against Keras's layer on the same global batch).

Unsynchronized training of NHWC or (N, C) inputs runs TF's fused kernel (`FusedBatchNormV3`), which already
returns the unbiased batch variance PyTorch's running statistics take; Keras 3 composes BN from moments and
elementwise ops; the fused kernel and its gradient take ~11% off the CPU of a ResNet-18 SimSiam step
(docs/benchmarks.md §5.5).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf


def _element_count(x: tf.Tensor, axes: list[int]) -> tf.Tensor:
    """How many values of ``x`` each channel's statistics average over ``axes`` (float32 [1]): a constant when those
    dimensions are static, as in a training step's per-replica batch (no shape ops to trace per layer)."""
    dims = [x.shape[a] for a in axes]
    if all(d is not None for d in dims):
        return tf.constant([math.prod(dims)], tf.float32)
    return tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), tf.float32)[None]


def _unbiased(variance: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """The unbiased variance n/(n−1)·``variance`` of ``count`` values (PyTorch's running variance takes it)."""
    return variance * tf.cast(count / tf.maximum(count - 1.0, 1.0), variance.dtype)


def _all_reduce_split(local: list[tf.Tensor]) -> list[tf.Tensor]:
    """Σ over the replicas of each 1-d tensor of ``local``, through one all-reduce of their concatenation."""
    ctx = tf.distribute.get_replica_context()
    total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.stop_gradient(tf.concat(local, axis=0)))
    return tf.split(total, [t.shape[0] for t in local])


def sync_batch_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, axes: list[int], axis: int,
                    epsilon: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Training-mode BN of ``x`` (float32 or float64) with statistics over ``axes`` of every replica of the current
    replica context: the output, the batch mean, the biased batch variance and the element count ([1], in x's dtype).

    The gradient is PyTorch `SyncBatchNorm`'s closed form, dx = γ·σ⁻¹·(dy − Σdy/N − x̂·Σ(dy·x̂)/N) with the sums over
    the global batch (one all-reduce), and dγ, dβ this replica's own sums (the optimizer sums them over replicas).
    """
    axis %= x.shape.rank
    channels = x.shape[axis]
    stats = [tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), tf.cast(_element_count(x, axes), x.dtype)]
    sums, squares, count = _all_reduce_split(stats)
    n = tf.maximum(count, 1.0)
    mean = sums / n
    variance = tf.maximum(squares / n - tf.square(mean), 0.0)
    # Channels-last inputs broadcast [C] as they are; any other axis reshapes to [1, .., C, .., 1].
    shape = None if axis == x.shape.rank - 1 else [channels if i == axis else 1 for i in range(x.shape.rank)]

    def broadcast(t: tf.Tensor) -> tf.Tensor:
        return t if shape is None else tf.reshape(t, shape)

    @tf.custom_gradient
    def normalize(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor):
        inverse_std = tf.math.rsqrt(variance + epsilon)
        x_hat = (x - broadcast(mean)) * broadcast(inverse_std)

        def grad(dy: tf.Tensor):
            d_beta, d_gamma = tf.reduce_sum(dy, axes), tf.reduce_sum(dy * x_hat, axes)
            sum_dy, sum_dy_x_hat = _all_reduce_split([d_beta, d_gamma])
            dx = broadcast(gamma * inverse_std) * (dy - broadcast(sum_dy / n) - x_hat * broadcast(sum_dy_x_hat / n))
            return dx, d_gamma, d_beta, None, None

        return x_hat * broadcast(gamma) + broadcast(beta), grad

    return normalize(x, gamma, beta, mean, variance), mean, variance, count


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
        if self._synchronizing():
            channels = x.shape[self.axis]
            gamma = tf.cast(self.gamma, x.dtype) if self.scale else tf.ones([channels], x.dtype)
            beta = tf.cast(self.beta, x.dtype) if self.center else tf.zeros([channels], x.dtype)
            y, mean, variance, count = sync_batch_norm(x, gamma, beta, list(self._reduction_axes), self.axis,
                                                       self.epsilon)
            self._update_moving(mean, _unbiased(variance, count))
            return tf.cast(y, self.compute_dtype)
        mean, variance = keras.ops.moments(x, axes=list(self._reduction_axes))
        self._update_moving(mean, _unbiased(variance, _element_count(x, list(self._reduction_axes))))
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
