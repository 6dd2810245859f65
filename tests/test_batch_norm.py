"""BatchNorm: PyTorch's moving statistics (unbiased variance) against the formula; synchronized on two
replicas, the same outputs, moving statistics and gradients as one BN over the whole batch on one device."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from keras import layers

from augself_tf.models.batch_norm import BatchNorm

#: What `_run` returns, in order.
NAMES = ["output", "d/dx", "d/dgamma", "d/dbeta", "moving mean", "moving variance"]


def _run(make_bn, strategy, x: np.ndarray, w: np.ndarray):
    """Output, d(loss)/d(input), d(loss)/d(γ, β) (empty without them) and moving statistics of one training step;
    the loss Σ(w·bn(x))² couples every example to the batch statistics."""
    with strategy.scope():
        bn = make_bn()
        bn.build(x.shape)
        if bn.scale:
            bn.gamma.assign(np.linspace(0.5, 1.5, bn.gamma.shape[0]).astype(np.float32))
    n_rep = strategy.num_replicas_in_sync
    per = len(x) // n_rep

    def replica(i):
        xs = tf.constant(x)[i * per : (i + 1) * per]
        ws = tf.constant(w)[i * per : (i + 1) * per]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = bn(xs, training=True)
            loss = tf.reduce_sum(tf.square(ws * y))
        gx, *affine = tape.gradient(loss, [xs, *bn.trainable_weights])
        gg, gb = affine or [tf.zeros([0])] * 2
        return y, gx, gg, gb

    @tf.function
    def step():
        return strategy.run(lambda: replica(tf.distribute.get_replica_context().replica_id_in_sync_group))

    out = step()
    local = [strategy.experimental_local_results(o) for o in out]
    y, gx = (np.concatenate([t.numpy() for t in parts]) for parts in local[:2])
    gg, gb = (np.sum([t.numpy() for t in parts], axis=0) for parts in local[2:])  # summed over replicas
    return y, gx, gg, gb, bn.moving_mean.numpy(), bn.moving_variance.numpy()


#: (input shape, channel axis, affine): channels last as every model here; channels first without γ and β.
CASES = [((8, 5), -1, True), ((4, 3, 3, 6), -1, True), ((4, 6, 3, 2), 1, False)]


@pytest.mark.parametrize("shape,axis,affine", CASES)
def test_two_replicas_equal_one_device_and_keras_synchronized(shape, axis, affine):
    """Outputs, the three gradients (d/dx from PyTorch SyncBatchNorm's closed form) and the moving statistics of
    2 replicas equal one BN over the whole batch, and Keras's synchronized layer (autodiff through its
    all-reduces), with merge_call and ReductionToOneDevice (CPU replicas) and without merge_call through
    collective all-reduces (how GPUs run an XLA-compiled replica function)."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 2 + 1).astype(np.float32)
    w = rng.normal(size=shape).astype(np.float32)
    options = {"momentum": 0.9, "epsilon": 1e-5, "axis": axis, "center": affine, "scale": affine}
    one = _run(lambda: BatchNorm(**options), tf.distribute.get_strategy(), x, w)
    keras_sync = _run(lambda: layers.BatchNormalization(synchronized=True, **options), mirrored_cpus(), x, w)
    local = _run(lambda: BatchNorm(**options), mirrored_cpus(), x, w)
    n = x.size // shape[axis]
    for strategy in (mirrored_cpus(), mirrored_cpus("collective", merge_call=False)):
        ours = _run(lambda: BatchNorm(synchronized=True, **options), strategy, x, w)
        for name, a, b in zip(NAMES, one, ours, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=name)
        # Keras's own layer agrees on everything but the moving variance, which it updates with the biased one.
        for name, b, c in zip(NAMES[:-1], ours[:-1], keras_sync[:-1], strict=True):
            np.testing.assert_allclose(b, c, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(ours[-1] - 0.9, (keras_sync[-1] - 0.9) * n / (n - 1), rtol=1e-4)
    assert not np.allclose(local[0], one[0], atol=1e-3)  # per-replica statistics differ: the test can fail
    assert not np.allclose(local[1], one[1], atol=1e-3)


@pytest.mark.parametrize("shape", [(6, 4), (3, 5, 2, 4)])
def test_moving_statistics_are_pytorchs(shape):
    """running ← 0.9·running + 0.1·batch, with the UNBIASED batch variance (torch.nn.BatchNorm), while the
    batch is normalised with the biased one; computed independently in NumPy over two steps."""
    rng = np.random.default_rng(1)
    bn = BatchNorm(momentum=0.9, epsilon=1e-5)
    mean, var = np.zeros(shape[-1]), np.ones(shape[-1])
    for _ in range(2):
        x = (rng.normal(size=shape) * 3 + 2).astype(np.float32)
        y = bn(x, training=True).numpy()
        flat = x.reshape(-1, shape[-1]).astype(np.float64)
        mean = 0.9 * mean + 0.1 * flat.mean(0)
        var = 0.9 * var + 0.1 * flat.var(0, ddof=1)
        expected = (flat - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-5)
        np.testing.assert_allclose(y.reshape(-1, shape[-1]), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.moving_variance.numpy(), var, rtol=1e-5)
    # Inference uses those statistics.
    x = rng.normal(size=shape).astype(np.float32)
    np.testing.assert_allclose(bn(x, training=False).numpy(), (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def _step(bn: BatchNorm, x: np.ndarray, w: np.ndarray):
    with tf.GradientTape() as tape:
        xs = tf.constant(x)
        tape.watch(xs)
        y = bn(xs, training=True)
        loss = tf.reduce_sum(tf.square(tf.cast(y, tf.float32) * w))
    grads = tape.gradient(loss, [xs, *bn.trainable_weights])
    return [t.numpy().astype(np.float32) for t in (y, *grads, bn.moving_mean, bn.moving_variance)]


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(8, 5), (4, 3, 3, 6)])
def test_fused_kernel_equals_the_composite_computation(shape, affine, monkeypatch):
    """The fused kernel (what one device trains with) gives the outputs, gradients and moving statistics of
    the moments-based computation the synchronized path uses; and it is the kernel that runs."""
    rng = np.random.default_rng(2)
    x = (rng.normal(size=shape) * 2 + 1).astype(np.float32)
    w = rng.normal(size=shape).astype(np.float32)

    def make():
        bn = BatchNorm(momentum=0.9, epsilon=1e-5, center=affine, scale=affine)
        bn.build(shape)
        if affine:
            bn.gamma.assign(np.linspace(0.5, 1.5, shape[-1]).astype(np.float32))
            bn.beta.assign(np.linspace(-1, 1, shape[-1]).astype(np.float32))
        return bn

    fused = _step(make(), x, w)
    traced = make()
    graph = tf.function(lambda t: traced(t, training=True)).get_concrete_function(tf.TensorSpec(shape)).graph
    assert "FusedBatchNormV3" in {op.type for op in graph.get_operations()}
    monkeypatch.setattr(BatchNorm, "_fusable", lambda self, inputs: False)
    composite = _step(make(), x, w)
    for a, b in zip(fused, composite, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_fused_kernel_under_bfloat16_keeps_float32_statistics():
    """A bfloat16 input is normalised in bfloat16 with float32 statistics, close to the float32 result."""
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(4, 5, 5, 8)) * 2 + 1).astype(np.float32)
    w = rng.normal(size=x.shape).astype(np.float32)
    f32 = BatchNorm(momentum=0.9)
    bf16 = BatchNorm(momentum=0.9, dtype="mixed_bfloat16")
    ref, low = _step(f32, x, w), _step(bf16, x.astype(np.float32), w)
    assert bf16(tf.constant(x), training=True).dtype == tf.bfloat16
    assert bf16.moving_variance.dtype == tf.float32
    np.testing.assert_allclose(low[0], ref[0], atol=0.05)  # bfloat16 has 8 bits of mantissa
    np.testing.assert_allclose(low[-2:], ref[-2:], rtol=1e-2)
