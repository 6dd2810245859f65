"""The step GPUs and TPUs run, reached on logical CPUs: every method without merge_call (as MirroredStrategy runs an
XLA-compiled replica function on GPUs) equals the merge-call step, the collective all-reduce is what the strategy
picks by default, every method's replica step compiles to HLO of static shapes, and ``--jit_compile`` on CPU
replicas compiles the step's clusters around its collectives (XLA has no CPU collectives). docs/distributed.md,
"The accelerator path"."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import each_method, mirrored_cpus
from helpers import batch, compile_model, half, make_model, replica_values, run_steps, tiny_run

from augself_tf.augment import AugmentConfig, ops
from augself_tf.augment.views import ViewPlan
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import pair_source, source_info
from augself_tf.methods import METHODS
from augself_tf.runtime.strategy import CLUSTERS, REPLICA_FUNCTION, compile_clusters, compile_mode
from augself_tf.training.distributed_step import DistributedSteps
from augself_tf.training.loop import train

# What the accelerator path runs, graph optimization included (tests/conftest.py turns it off elsewhere).
pytestmark = pytest.mark.usefixtures("production_graph_optimizer")

#: Per method: options beyond helpers.SMALL (a queue of a few batches; SwAV's prototypes trained from step 1).
OPTIONS = {"moco": {"queue_size": 16}, "looc": {"queue_size": 16}, "swav": {"freeze_prototypes_steps": 0}}


def _views(method: str) -> int:
    return METHODS[method].view_plan({}).num_views


def _two_replica_run(method: str, strategy: tf.distribute.Strategy, batches: list[dict]):
    with strategy.scope():
        # One AugSelf head: the paths differ in how the step reduces, and a second head is the same MLP and
        # synchronised BN reduced the same way, a quarter more ops to trace (two heads on one device: the HLO test
        # below, test_methods_base's loss-falls test, test_mixed_precision).
        model = make_model(method, augself=("crop",), sync=True, total_steps=4, steps_per_epoch=2,
                           **OPTIONS.get(method, {}))
    compile_model(model, strategy, total_steps=4)
    return model, run_steps(model, batches, strategy)


@pytest.mark.parametrize("method", each_method(METHODS))
def test_every_method_without_merge_call_equals_the_merge_call_step(method):
    """Two steps on 2 replicas: merge_call + ReductionToOneDevice (what --cpu_replicas runs) against no merge_call
    + collective all-reduces, each replica calling its own traced step (what a GPU runs, minus XLA), where any
    merge_call left in the step would raise. Same initial weights, same batches: the same losses and weights."""
    batches = [batch(seed, views=_views(method)) for seed in (3, 4)]
    reference, want = _two_replica_run(method, mirrored_cpus(), batches)
    model, got = _two_replica_run(method, mirrored_cpus("collective", merge_call=False), batches)
    for step_want, step_got in zip(want, got, strict=True):
        assert step_got.keys() == step_want.keys()
        for key, value in step_want.items():
            np.testing.assert_allclose(step_got[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
    for a, b in zip(reference.weights + reference.optimizer.variables, model.weights + model.optimizer.variables,
                    strict=True):
        assert a.path == b.path
        for value in replica_values(b):
            np.testing.assert_allclose(value, replica_values(a)[0], rtol=1e-4, atol=1e-5, err_msg=b.path)


def test_the_default_reduction_on_logical_cpus_is_the_collective_all_reduce():
    from tensorflow.python.distribute import cross_device_ops  # private: the class is not exported

    ops = mirrored_cpus("collective").extended._cross_device_ops
    assert isinstance(ops, cross_device_ops.CollectiveAllReduce), type(ops)
    assert isinstance(mirrored_cpus().extended._cross_device_ops, tf.distribute.ReductionToOneDevice)


def _device_stage_batch(method: str) -> dict:
    """A batch of 4 from the real input pipeline, photometric steps left to the step (uint8 views): the colour
    jitter's per-example order is then applied inside the compiled function."""
    return _device_stage_batch_of(METHODS[method].view_plan({}))


@functools.cache
def _device_stage_batch_of(plan: ViewPlan) -> dict:
    """The batch a plan's views give: the pipeline reads the method only through them, so methods of one plan
    share it (building the pipeline costs 1.6-3.4 CPU s)."""
    cfg = tiny_run("unused", batch_size=4, augment=AugmentConfig(image_size=16))
    source = pair_source(cfg.dataset, cfg.split, data_dir=cfg.data_dir, cache=True)
    data = make_pair_dataset(source, cfg.augment, seed=1, batch_size=4, batches_per_epoch=1, shuffle_buffer=16,
                             cache=True, photometric="device", views=plan)
    return next(iter(data))


#: What XLA does not know statically: a bounded (f32[<=8,3]) or unbounded (f32[?,3]) dimension, or an op that sets
#: a dimension's size at run time (how the "hlo" stage shows tf.dynamic_partition's parts).
DYNAMIC = re.compile(r"\[[^\]]*(?:<=|\?)[^\]]*\]|set-dimension-size|get-dimension-size")


def _dynamic(hlo: str) -> list[str]:
    return DYNAMIC.findall(hlo)


def test_the_static_shape_check_sees_the_jitters_partition_form():
    """Not vacuous: the colour jitter's ``partition`` form (tf.dynamic_partition) compiled is caught."""
    x, factors = tf.random.uniform([4, 8, 8, 3]), tf.random.uniform([4, 4])
    order = tf.constant([[0, 1, 2, 3], [3, 2, 1, 0]] * 2)

    def hlo(method: str) -> str:
        fn = tf.function(lambda *a: ops.color_jitter_batch(*a, method=method), jit_compile=True)
        return fn.experimental_get_compiler_ir(x, factors, order)(stage="hlo")

    assert _dynamic(hlo("partition"))
    assert not _dynamic(hlo("select"))


@pytest.mark.parametrize("method", each_method(METHODS))
def test_every_methods_replica_step_compiles_to_hlo_of_static_shapes(method):
    """The function each replica runs under --jit_compile, on one device (XLA compiles no collective on CPU):
    its HLO has no dynamic dimension (the colour jitter's dynamic_partition would give some), and XLA compiles
    and runs it."""
    b = _device_stage_batch(method)
    assert b["view1"].dtype == tf.uint8 and "device1" in b
    classes = source_info("shapes", "train").num_classes  # the supervised head must cover the batch's labels
    model = make_model(method, image_size=16, total_steps=4, steps_per_epoch=2, num_classes=classes,
                       **OPTIONS.get(method, {}))
    compile_model(model, total_steps=4)
    step = tf.function(model.train_step, jit_compile=True)
    hlo = step.experimental_get_compiler_ir(b)(stage="hlo")
    assert "ENTRY" in hlo
    dynamic = _dynamic(hlo)
    assert not dynamic, f"{len(dynamic)} dynamic shapes, e.g. {dynamic[0]}"
    logs = step(b)
    assert np.isfinite(float(logs["loss/total"]))
    assert int(model.optimizer.iterations.numpy()) == 1


def test_jit_compile_on_cpu_replicas_compiles_clusters_and_on_one_device_the_replica_function():
    assert compile_mode(tf.distribute.OneDeviceStrategy("/cpu:0")) == REPLICA_FUNCTION
    assert compile_mode(mirrored_cpus()) == CLUSTERS
    graph = tf.Graph()
    with graph.as_default(), compile_clusters():
        x = tf.constant(np.ones([2, 2], np.float32))
        y = tf.matmul(x, x)
        reduced = tf.raw_ops.CollectiveReduceV2(input=y, group_size=2, group_key=1, instance_key=1, ordering_token=[],
                                                merge_op="Add", final_op="Id")
    assert y.op.get_attr("_XlaCompile") is True  # marked: XLA compiles it
    assert reduced.op.node_def.attr["_XlaCompile"].b is False  # the collective runs between the clusters


def test_a_clustered_step_on_two_cpu_replicas_equals_the_plain_step():
    """SimCLR (negatives gathered across replicas inside the loss) on 2 replicas: the step traced for XLA clusters
    gives the plain step's losses and weights to round-off."""
    b = batch(3)
    runs = []
    for mode in (False, CLUSTERS):
        strategy = mirrored_cpus()
        with strategy.scope():
            # One AugSelf head: a second is the same MLP and synchronised BN again, only more clusters to compile
            # (the clustered step took 26 CPU s with crop and colour, 18 with crop alone).
            model = make_model("simclr", augself=("crop",), sync=True, total_steps=4, steps_per_epoch=2)
        compile_model(model, strategy, total_steps=4)
        steps = DistributedSteps(strategy, model, mode)
        parts = [half(b, i) for i in range(2)]
        dist = strategy.experimental_distribute_values_from_function(
            lambda ctx, p=parts: p[ctx.replica_id_in_sync_group])
        runs.append((steps.first(dist).fetch(), model))
    (want, reference), (got, model) = runs
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
    for a, b_ in zip(reference.weights, model.weights, strict=True):
        np.testing.assert_allclose(replica_values(b_)[0], replica_values(a)[0], rtol=1e-4, atol=1e-5, err_msg=a.path)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["moco", "looc", "simclr", "swav", "byol", "simsiam"])
def test_jit_compile_on_two_cpu_replicas_trains_every_method(tmp_path, method):
    """Each contrastive/self-distilling method, one clustered step on 2 CPU replicas (compiling the clusters takes
    most of the time: minutes each on a loaded 2-core machine)."""
    flags = {"method_options": {**{"queue_size": 64, "projector_hidden": 32, "projector_dim": 16},
                                **OPTIONS.get(method, {})}} if method in ("moco", "looc") else {}
    result = train(tiny_run(str(tmp_path / "run"), method=method, cpu_replicas=2, jit_compile=True, max_steps=1,
                            export=False, **flags))
    assert result.steps == 1 and np.isfinite(result.last_logs["loss/total"])
