"""Placement: the training step holds no op that goes through host memory on an accelerator (each one stalls the
device's queue at every step: ``runtime/host_ops.py``), and the input pipeline keeps up with the step."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import tensorflow as tf

from augself_tf.runtime.host_ops import count_by_op, host_memory_ops
from augself_tf.selfcheck.harness import Builder, Setup, Tamper, build, distribute, pipeline, real_batch
from augself_tf.selfcheck.verdicts import FAIL, NOT_APPLICABLE, PASS, Check, Report
from augself_tf.training.distributed_step import make_distributed_step

SECTION = "placement"
#: The device name a one-GPU run's strategy has (``make_strategy`` on a one-GPU machine). TensorFlow accepts it
#: without a GPU for tracing (variables fall back to the CPU), and ``strategy.run`` enters its device scope while
#: tracing, as on a GPU: the step built is the GPU's (tests/test_host_ops.py).
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def accelerators(strategy: tf.distribute.Strategy) -> bool:
    """Whether the strategy's replicas are GPUs or TPU cores."""
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in strategy.extended.worker_devices}
    return bool(kinds & {"GPU", "TPU"})


def step_graph(strategy: tf.distribute.Strategy, setup: Setup, distributed: bool, tamper: Tamper | None = None,
               builder: Builder = build) -> tf.compat.v1.GraphDef:
    """The graph of the loop's whole step function (every replica's ``train_step`` and the reduction of the logs)
    for ``setup`` under ``strategy``, traced only; ``distributed``: fed the strategy's per-replica batch.
    ``tamper`` changes the model first (a test forces an op onto the host with it); ``builder`` builds it."""
    model = builder(setup, strategy)
    if tamper is not None:
        tamper(model)
    step = make_distributed_step(strategy, model, setup.jit_compile)
    batch = real_batch(setup, seed=setup.seed)
    spec = distribute(strategy, batch) if distributed else tf.nest.map_structure(
        lambda x: tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)), batch)
    return step.get_concrete_function(spec).graph.as_graph_def()


def host_ops_check(graph: tf.compat.v1.GraphDef, where: str, name: str = "host-memory ops in the step") -> Check:
    """Pass when ``graph`` (its functions included) holds no op that passes through host memory on a GPU and no
    node pinned to a CPU; the figure counts them by op and names the first."""
    found = host_memory_ops(graph)
    counts = count_by_op(found)
    values = {"count": len(found), "by_op": counts, "where": where,
              "first": [f"{h.node.op} {h.node.name} ({h.reason})" for h in found[:5]]}
    if not found:
        return Check(SECTION, name, PASS, f"0 ({where})", values)
    first = found[0]
    inside = f" in {first.node.function}" if first.node.function else ""
    return Check(SECTION, name, FAIL, f"{len(found)} ({where}): {counts}; e.g. {first.node.op} "
                 f"'{first.node.name}'{inside}: {first.reason}", values)


def accelerator_step(strategy: tf.distribute.Strategy, setup: Setup, tamper: Tamper | None = None,
                     builder: Builder = build) -> Check:
    """The accelerator's step, ``--photometric=device`` (``auto`` on an accelerator): the strategy's own on GPUs and
    TPUs; on a machine without them, the step a one-GPU run builds, traced and never run."""
    setup = dataclasses.replace(setup, photometric="device")
    if accelerators(strategy):
        where = f"the step of the {strategy.num_replicas_in_sync} replicas here"
        graph = step_graph(strategy, dataclasses.replace(
            setup, batch_size=setup.batch_size * strategy.num_replicas_in_sync), distributed=True, tamper=tamper,
            builder=builder)
    else:
        where = "no GPU here: the step a one-GPU run builds, traced, not run"
        graph = step_graph(tf.distribute.OneDeviceStrategy(GPU0), setup, distributed=False, tamper=tamper,
                           builder=builder)
    return host_ops_check(graph, where)


def input_vs_step(strategy: tf.distribute.Strategy, setup: Setup, seconds: float, step_pairs_per_sec: float) -> Check:
    """The input pipeline's pairs/s (one worker's, for its replicas) against the step's: which one bounds a run."""
    replicas = strategy.num_replicas_in_sync
    it = iter(pipeline(setup, replicas, seed=setup.seed))
    for _ in range(3):  # its threads start, the in-memory source is read
        next(it)
    batches, t0 = 0, time.perf_counter()
    while batches < 3 or time.perf_counter() - t0 < seconds:
        next(it)
        batches += 1
    rate = batches * (setup.batch_size // replicas) / (time.perf_counter() - t0)
    del it
    bound = "the step" if rate >= step_pairs_per_sec else "the input pipeline"
    figure = (f"input {rate:.1f} pairs/s vs step {step_pairs_per_sec:.1f} pairs/s: {bound} bounds the run "
              f"(--photometric={setup.photometric}; embedded shapes data held in memory, no image decoding: a "
              f"JPEG dataset costs the host more)")
    # Not a failure of the exit status: the user's own data and host decide it, not this step.
    return Check(SECTION, "input pipeline vs step", PASS if rate >= step_pairs_per_sec else FAIL, figure,
                 {"input_pairs_per_sec": rate, "step_pairs_per_sec": step_pairs_per_sec, "bound": bound,
                  "photometric": setup.photometric}, fatal=False)


def run(report: Report, strategy: tf.distribute.Strategy, method: str, small: Setup, default: Setup, seconds: float,
        step_rate: Callable[[], float], tamper: Tamper | None = None) -> None:
    """The placement lines: the accelerator step's host-memory ops (``method`` at the ``small`` setting), the
    CPU setting, and the input pipeline against ``step_rate()`` (the step's pairs/s at the ``default`` setting)."""
    setup = dataclasses.replace(small, method=method)
    report.guarded(SECTION, "host-memory ops in the step", lambda: accelerator_step(strategy, setup, tamper))
    if not accelerators(strategy):
        report.add(Check(SECTION, "host-memory ops in the CPU step", NOT_APPLICABLE, "on CPU the host is the "
                         "device: nothing to copy (its colour jitter keeps the partitioned form, faster there)",
                         fatal=False))
    report.guarded(SECTION, "input pipeline vs step",
                   lambda: input_vs_step(strategy, default, seconds, step_rate()))
