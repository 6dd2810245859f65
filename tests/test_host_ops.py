"""No host round-trips in the accelerator's training step: the `--photometric=device` replica step, traced as a
GPU run traces it, holds no op that passes through host memory (``runtime/host_ops.py``), functions included;
on CPU the colour jitter keeps its faster partitioned form.

The accelerator setting is built without a GPU: the strategies a GPU run makes (``runtime/strategy.py``:
``OneDeviceStrategy`` of the GPU, ``MirroredStrategy`` of the GPUs) are constructed with GPU device names,
which TensorFlow accepts on a CPU-only machine (variables fall back to the CPU), and the step is only
traced, never run. ``strategy.run`` enters each replica's GPU device scope while tracing, exactly as on a
GPU, so the jitter's choice (``ops.resolve_jitter_method``) reads the same device a GPU run gives it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from helpers import compile_model, make_model

from augself_tf.augment import AugmentConfig, ops
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.runtime.host_ops import HOST_MEMORY_OPS, count_by_op, graph_nodes, host_memory_ops

SIZE = 8
# What an accelerator runs, graph optimization included (tests/conftest.py turns it off elsewhere).
pytestmark = pytest.mark.usefixtures("production_graph_optimizer")

OPTIONS = {"moco": {"queue_size": 8}}


@functools.cache
def _device_batch_spec() -> dict:
    """The structure of a `--photometric=device` batch: uint8 views, ω and the device stage's draws. Its specs, not
    its values: built once per process (a device-mode dataset costs 1.1-2.9 CPU s; the file's steps trace 6)."""
    ds = make_pair_dataset(load_source("shapes", "test"), AugmentConfig(image_size=SIZE), seed=0, batch_size=4,
                           num_epochs=1, photometric="device")
    batch = next(iter(ds))
    assert batch["view1"].dtype == tf.uint8 and "device1" in batch
    return tf.nest.map_structure(tf.TensorSpec.from_tensor, batch)


def _replica_step(method: str, strategy: tf.distribute.Strategy,
                  augself: tuple[str, ...] = ("crop", "color")) -> tuple[tf.compat.v1.GraphDef, set[str]]:
    """The graph of `model.train_step` run by `strategy` on every replica (what the training loop's step runs
    inside `strategy.run`), traced only; and the devices the model's and optimizer's variables live on."""
    with strategy.scope():
        model = make_model(method, augself=augself, **OPTIONS.get(method, {}))
        model.augment_config = AugmentConfig(image_size=SIZE)
    compile_model(model, strategy)

    @tf.function
    def step(batch):
        return strategy.run(model.train_step, args=(batch,))

    graph = step.get_concrete_function(_device_batch_spec()).graph.as_graph_def()
    variables = [getattr(v, "value", v) for v in model.variables + model.optimizer.variables]
    return graph, {c.device for v in variables for c in getattr(v, "values", [v])}


def _replica_step_graph(method: str, strategy: tf.distribute.Strategy,
                        augself: tuple[str, ...] = ("crop", "color")) -> tf.compat.v1.GraphDef:
    return _replica_step(method, strategy, augself)[0]


#: The AugSelf heads of the tests below the first: one, since a second is the same MLP through the same code, a
#: quarter more ops to trace. The first test audits the accelerator's step with two.
ONE_HEAD = ("crop",)


def _op_counts(graph_def) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph_nodes(graph_def):
        counts[node.op] = counts.get(node.op, 0) + 1
    return counts


def _gpu_strategy(replicas: int) -> tf.distribute.Strategy:
    """What make_strategy returns on a machine with `replicas` GPUs."""
    gpus = [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(replicas)]
    return tf.distribute.OneDeviceStrategy(gpus[0]) if replicas == 1 else tf.distribute.MirroredStrategy(gpus)


@pytest.mark.parametrize("method", ["simsiam", "moco"])
def test_the_accelerator_step_holds_no_host_memory_op(method):
    graph = _replica_step_graph(method, _gpu_strategy(1))
    assert host_memory_ops(graph) == []
    counts = _op_counts(graph)
    # The device stage is in the step (the hue adjustment of both views) and the jitter took its select form.
    assert counts.get("RGBToHSV", 0) >= 8 and counts.get("SelectV2", 0) >= 2 * 4 * 3
    devices = {n.device for n in graph_nodes(graph) if n.device}
    assert devices == {"/job:localhost/replica:0/task:0/device:GPU:0"}  # the replica's scope reached its ops


def test_two_gpu_replicas_hold_no_host_memory_op():
    """MirroredStrategy updates each variable on its own device. Without a GPU here the mirrored variables live on
    the CPU, so those updates are pinned there; on a GPU machine they are on the GPUs: allowed, nothing else."""
    graph, variable_devices = _replica_step("simsiam", _gpu_strategy(2), ONE_HEAD)
    found = host_memory_ops(graph)
    assert [h for h in found if not h.pinned] == []
    pinned = {h.node.device for h in found}
    assert pinned <= variable_devices and all("GPU" not in d for d in variable_devices)
    assert _op_counts(graph).get("RGBToHSV", 0) >= 16  # both replicas' device stage


@pytest.mark.parametrize("method", ["simsiam", pytest.param("moco", marks=pytest.mark.slow)])
def test_the_cpu_step_keeps_the_partitioned_jitter(method):
    """On CPU the partition form stays (5.7x less CPU than select there): 3 partitions (images, factors, rows)
    and 1 stitch at each of the 4 positions, for each of the 2 views."""
    graph = _replica_step_graph(method, tf.distribute.OneDeviceStrategy("/cpu:0"), ONE_HEAD)
    unpinned = [h for h in host_memory_ops(graph) if not h.pinned]  # on CPU every node is pinned there
    assert count_by_op(unpinned) == {"DynamicPartition": 24, "DynamicStitch": 8}
    with ops.jitter_method("select"):  # the accelerator's form, forced: nothing else in the step is host-bound
        graph = _replica_step_graph(method, tf.distribute.OneDeviceStrategy("/cpu:0"), ONE_HEAD)
        assert [h for h in host_memory_ops(graph) if not h.pinned] == []


def test_auto_reads_the_device_the_jitter_is_built_for():
    seen = {}

    @tf.function
    def probe():
        seen["none"] = ops.resolve_jitter_method()
        for name in ("/device:GPU:1", "/job:worker/task:3/device:TPU:0", "/cpu:0", "/job:worker/task:0"):
            with tf.device(name):
                seen[name] = ops.resolve_jitter_method()
        with tf.device("/gpu:0"), ops.jitter_method("partition"):
            seen["forced"] = ops.resolve_jitter_method()
        return tf.constant(0)

    probe.get_concrete_function()
    no_accelerator = "partition" if not tf.config.list_logical_devices("GPU") else "select"
    assert seen == {"none": no_accelerator, "/device:GPU:1": "select", "/job:worker/task:3/device:TPU:0": "select",
                    "/cpu:0": "partition", "/job:worker/task:0": no_accelerator, "forced": "partition"}
    with tf.device("/gpu:0"):  # a tf.function traced under an eager device scope
        assert ops.resolve_jitter_method() == "select"
        assert ops.resolve_jitter_method("partition") == "partition"
    with pytest.raises(ValueError, match="method must be one of"), ops.jitter_method("gather"):
        pass


def test_the_audit_walks_nested_functions_and_sees_cpu_pins():
    """A py_function inside a tf.cond branch inside a nested tf.function, a partition in a while body, a node
    pinned to the CPU: each is found; a clean function has none."""

    @tf.function
    def inner(x):
        return tf.cond(x[0] > 0, lambda: tf.py_function(lambda a: a, [x], tf.float32), lambda: x)

    @tf.function
    def outer(x):
        y = inner(x)
        y = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, tf.dynamic_stitch(
            tf.dynamic_partition(tf.range(4), tf.range(4) % 2, 2), tf.dynamic_partition(v, tf.range(4) % 2, 2))),
            (0, y))[1]
        with tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
            return tf.identity(y)

    found = host_memory_ops(outer.get_concrete_function(tf.TensorSpec([4])).graph.as_graph_def())
    by_op = count_by_op(found)
    assert {"EagerPyFunc", "If", "DynamicPartition", "DynamicStitch", "Identity (CPU)"} <= set(by_op)
    assert any(h.node.op == "EagerPyFunc" and h.node.function for h in found)  # found inside a function
    assert all(op in HOST_MEMORY_OPS and HOST_MEMORY_OPS[op] for op in ("Where", "Unique", "PrintV2", "Assert"))
    clean = tf.function(lambda x: tf.where(x > 0, x, 2 * x))  # 3-argument where: SelectV2, no host copy
    assert host_memory_ops(clean.get_concrete_function(tf.TensorSpec([4])).graph.as_graph_def()) == []


def test_select_and_partition_give_the_same_views_in_the_step_graph():
    """The step's device stage gives the same pixels whichever form the device picks: the views of a real
    device-mode batch through finish_views with each form forced, bit for bit."""
    from augself_tf.augment import finish_views

    config = AugmentConfig(image_size=SIZE, probabilities={"jitter_prob": 1.0})
    batch = next(iter(make_pair_dataset(load_source("shapes", "test"), config, seed=5, batch_size=16, num_epochs=1,
                                        photometric="device")))
    out = {}
    for method in ("partition", "select"):
        with ops.jitter_method(method):
            out[method] = tf.function(lambda b: finish_views(b, config))(batch)
    for key in ("view1", "view2"):
        np.testing.assert_array_equal(out["select"][key].numpy(), out["partition"][key].numpy(), err_msg=key)
    for key in out["select"]["omega1"]:
        np.testing.assert_array_equal(out["select"]["omega1"][key].numpy(), out["partition"]["omega1"][key].numpy())
