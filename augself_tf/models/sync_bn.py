"""Cross-replica batch normalization that traces in time linear in the number of layers.

Keras's `BatchNormalization(synchronized=True)` makes three `ReplicaContext.all_reduce` calls per layer,
and each is a `tf.custom_gradient`. In graph mode that wrapper walks the graph back from its output to
find captured variables; under MirroredStrategy every replica lives in one graph and a reduced output
depends on every replica's input, so each walk crosses the whole graph built so far, forward and
backward. Tracing costs (BN layers × graph size): py-spy put ~75 s of a 150 s two-replica trace of a
1/16-width ResNet-18 there. Here the statistics enter a single all-reduce through `stop_gradient`, which
ends those walks, and the gradient Keras would give (the all-reduced upstream gradient) comes from a
custom gradient whose walk stops at its own inputs. Values and gradients are unchanged (tested against
one device on the same global batch).
"""

from __future__ import annotations

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


def sync_moments(x: tf.Tensor, axes: list[int]) -> tuple[tf.Tensor, tf.Tensor]:
    """Mean and (biased) variance of `x` over `axes` and over all replicas of the current replica context."""
    dtype = x.dtype
    x = tf.cast(x, tf.float32)  # float16 is too coarse for the statistics
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), tf.float32)
    stats = tf.concat([tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), count[None]], axis=0)
    total = _replica_sum(stats)
    channels = (tf.shape(total)[0] - 1) // 2
    n = tf.maximum(total[-1], 1.0)
    mean = total[:channels] / n
    variance = tf.maximum(total[channels : 2 * channels] / n - tf.square(mean), 0.0)
    return tf.cast(mean, dtype), tf.cast(variance, dtype)


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` with batch statistics over every replica (see the module docstring).

    Behaves as the Keras layer with `synchronized=True` under a `tf.distribute` strategy with several
    replicas, and as a plain BN layer otherwise. Masks and non-TF backends fall back to Keras's own path.
    """

    def __init__(self, **kwargs):
        kwargs.pop("synchronized", None)
        super().__init__(synchronized=False, **kwargs)

    def _moments(self, inputs, mask):
        ctx = tf.distribute.get_replica_context()
        if mask is not None or ctx is None or ctx.num_replicas_in_sync == 1:
            return super()._moments(inputs, mask)
        return sync_moments(inputs, list(self._reduction_axes))

    def get_config(self) -> dict:
        return {**super().get_config(), "synchronized": True}
