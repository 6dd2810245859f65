"""float16 loss scaling on 2 logical CPUs: an Inf gradient on ANY one replica skips the step on every replica and
lowers the scale; a finite step equals the float32 step on the same gradients. Both reduction paths GPUs and CPUs
take (ReductionToOneDevice, the collective all-reduce) and both replica-function paths (with `merge_call`, as on
CPU; without it, as TF runs a jit-compiled replica function on GPUs). Keras' own LossScaleOptimizer applies an
overflow on replica 1 (weights −inf, scale kept) and fails to trace without `merge_call`."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, half, make_model, replica_values

from augself_tf.training.loss_scale import CrossReplicaLossScaleOptimizer
from augself_tf.training.optim import build_optimizer

SCALE = 2.0**15  # Keras' initial scale
_KEY_BASES = itertools.count(1)
PATHS = [(cdo, merge) for cdo in ("reduction_to_one_device", "collective") for merge in ("merge_call", "no_merge_call")]


class KeyedMirroredStrategy(tf.distribute.MirroredStrategy):
    """A MirroredStrategy whose collectives use group keys of their own. Every MirroredStrategy of a process
    starts its collective keys at the same number, so collectives of two strategies over the same devices (one
    per test here; a training process has one) meet as one instance and fail on each other's shapes."""

    def __init__(self, *args, **kwargs) -> None:
        self._collective_key_base = 10_000 * next(_KEY_BASES)  # read by MirroredExtended.__init__
        super().__init__(*args, **kwargs)


def two_cpus(cross_device_ops: str, path: str) -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over the 2 logical CPUs with the named reduction, on the named replica-function path."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2
    if cross_device_ops == "collective":
        strategy = KeyedMirroredStrategy(devices)  # its default on logical CPUs (checked below)
        assert type(strategy.extended._cross_device_ops).__name__ == "CollectiveAllReduce"
    else:
        strategy = KeyedMirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert strategy.extended._collective_keys._group_key > 10_000  # the key base took effect
    if path == "no_merge_call":
        # What TF does for a jit-compiled replica function on GPUs (mirrored_strategy.py): private API, so check it.
        assert callable(getattr(strategy.extended, "_use_merge_call", None)), "TF renamed _use_merge_call"
        strategy.extended._use_merge_call = lambda: False
    return strategy


def make_step(strategy, optimizer, variables):
    """A tf.function applying row r of each gradient array on replica r (values fed as tensors: never static)."""

    @tf.function
    def step(grads):
        def replica():
            r = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply([tf.gather(g, r) for g in grads], variables)

        strategy.run(replica)

    return step


def setup(strategy, mixed_precision, p0):
    with strategy.scope():
        variables = [keras.Variable(v, name=f"w{i}") for i, v in enumerate(p0)]
        optimizer = build_optimizer(0.05, 256, 100, weight_decay=5e-4, mixed_precision=mixed_precision)
        optimizer.build(variables)
    return variables, optimizer, make_step(strategy, optimizer, variables)


def _p0():
    rng = np.random.default_rng(0)
    return [rng.normal(size=[3, 2]).astype("float32"), rng.normal(size=[4]).astype("float32")]


@pytest.mark.parametrize("cross_device_ops,path", PATHS)
def test_an_overflow_on_any_one_replica_skips_the_step_everywhere_and_lowers_the_scale(cross_device_ops, path):
    strategy = two_cpus(cross_device_ops, path)
    p0 = _p0()
    variables, optimizer, step = setup(strategy, "float16", p0)
    assert isinstance(optimizer, CrossReplicaLossScaleOptimizer)
    for k, bad in enumerate((1, 0), start=1):  # replica 1 alone (Keras applies it), then replica 0 alone
        grads = [np.ones([2, *p.shape], "float32") * SCALE for p in p0]
        grads[0][bad, 0, 0] = np.inf
        step([tf.constant(g) for g in grads])
        for var, p in zip(variables, p0, strict=True):
            copies = replica_values(var)
            assert len(copies) == 2
            for copy in copies:
                np.testing.assert_array_equal(copy, p, err_msg=f"overflow on replica {bad} was applied")
        assert [float(s) for s in replica_values(optimizer.dynamic_scale)] == [SCALE / 2**k] * 2
        assert [int(c) for c in replica_values(optimizer.step_counter)] == [0, 0]
        for buffer in optimizer.inner_optimizer.momentums:  # the momentum buffers are not touched either
            assert all(not np.any(b) for b in replica_values(buffer))
        # A skipped step still counts: the optimizer's step (and its lr schedule) stays the loop's step.
        assert [int(i) for i in replica_values(optimizer.iterations)] == [k, k]


@pytest.mark.parametrize("cross_device_ops,path", PATHS)
def test_a_finite_step_equals_the_float32_step_on_the_summed_gradients(cross_device_ops, path):
    strategy = two_cpus(cross_device_ops, path)
    p0 = _p0()
    rng = np.random.default_rng(1)
    steps = [[rng.normal(size=[2, *p.shape]).astype("float32") for p in p0] for _ in range(2)]  # momentum too
    ref_vars, _, ref_step = setup(strategy, None, p0)
    variables, optimizer, step = setup(strategy, "float16", p0)
    for grads in steps:
        ref_step([tf.constant(g) for g in grads])
        step([tf.constant(g * SCALE) for g in grads])  # what scale_loss makes of them
    for var, ref, p in zip(variables, ref_vars, p0, strict=True):
        copies = replica_values(var)
        np.testing.assert_array_equal(copies[0], copies[1])
        assert np.abs(copies[0] - p).min() > 1e-4  # the steps moved every weight
        np.testing.assert_allclose(copies[0], replica_values(ref)[0], rtol=1e-6, atol=1e-7)
    assert [float(s) for s in replica_values(optimizer.dynamic_scale)] == [SCALE] * 2
    assert [int(c) for c in replica_values(optimizer.step_counter)] == [2, 2]


def test_the_scale_grows_after_its_growth_steps_and_checkpoints_keep_keras_keys():
    var = keras.Variable(np.ones(3, "float32"), name="w")
    optimizer = CrossReplicaLossScaleOptimizer(build_optimizer(0.05, 256, 100), dynamic_growth_steps=2)
    optimizer.build([var])
    scales = []
    for g in (1.0, 1.0, np.inf, 1.0):
        optimizer.apply([tf.fill([3], g * float(optimizer.dynamic_scale.numpy()))], [var])
        scales.append(float(optimizer.dynamic_scale.numpy()))
    assert scales == [SCALE, 2 * SCALE, SCALE, SCALE]
    assert int(optimizer.iterations.numpy()) == 4
    paths = {v.path for v in optimizer.variables}
    assert {"loss_scale_optimizer/dynamic_scale", "loss_scale_optimizer/step_counter"} <= paths
    assert not any("finite" in p for p in paths)  # the per-step verdict is not state


def test_train_step_in_float16_skips_an_overflow_on_replica_1_only():
    """The model's own step (scale_loss, 1/R, apply) with an Inf image on replica 1's half of the batch."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        strategy = two_cpus("collective", "merge_call")
        with strategy.scope():
            model = make_model("simsiam", augself=("crop",))
            model.compile(optimizer=build_optimizer(0.05, 256, 100, mixed_precision="float16"))
            model.optimizer.build(model.optimized_variables())
        before = [v.numpy() for v in model.optimized_variables()]
        b = batch(0)
        b["view1"][-1] = np.inf  # the last example: replica 1's half

        @tf.function
        def dist_step(values):
            strategy.run(model.train_step, args=(values,))

        parts = [half(b, i) for i in range(2)]
        dist_step(strategy.experimental_distribute_values_from_function(
            lambda ctx: parts[ctx.replica_id_in_sync_group]))
        for var, old in zip(model.optimized_variables(), before, strict=True):
            for copy in replica_values(var):
                np.testing.assert_array_equal(copy, old, err_msg=var.path)
        assert [float(s) for s in replica_values(model.optimizer.dynamic_scale)] == [SCALE / 2] * 2
    finally:
        keras.mixed_precision.set_global_policy("float32")
