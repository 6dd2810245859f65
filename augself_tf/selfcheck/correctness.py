"""Correctness on the devices present: every replica together computes what one device computes (same weights,
same global batch, a few steps), float16 and bfloat16 steps stay finite, an overflow on one replica skips the
float16 step on all of them, and XLA compiles each method's replica step."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

from augself_tf.runtime.strategy import REPLICA_FUNCTION, compile_mode
from augself_tf.selfcheck.harness import (
    Builder,
    Setup,
    Tamper,
    build,
    copy_state,
    distribute,
    real_batch,
    real_batches,
    replica_values,
    state_variables,
)
from augself_tf.selfcheck.verdicts import FAIL, NOT_APPLICABLE, PASS, Check, Report
from augself_tf.training.distributed_step import make_distributed_step
from augself_tf.training.loss_scale import CrossReplicaLossScaleOptimizer

SECTION = "correctness"
#: |all devices − one device| ≤ ATOL + RTOL·max|one device| per tensor (every loss, every variable): float32
#: round-off of sums taken in another order (per-replica partial sums, all-reduces) over a few steps. Relative to
#: the tensor's scale, not each element's: a gradient buffer's element is a sum with cancellation (batch norm's
#: beta), whose round-off follows its terms, not itself. A real difference (another batch share, a missed
#: all-reduce) moves batch-norm statistics and losses by percents.
RTOL, ATOL = 1e-3, 1e-6
TOLERANCE = f"|Δ| ≤ {ATOL:g} + {RTOL:g}·max|x| per tensor"


@contextlib.contextmanager
def float32_matmuls() -> Iterator[None]:
    """TensorFloat-32 off (Ampere and later GPUs round float32 matmul inputs to 10 bits by default): the comparison
    is of float32 round-off, not of TF32's."""
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(enabled)


def _excess(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(largest |got − want|, largest amount by which it exceeds the tolerance; ≤ 0 within it)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    diff = np.abs(got - want)
    diff = np.where(np.isnan(got) & np.isnan(want), 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    if diff.size == 0:
        return 0.0, -1.0
    scale = float(np.nanmax(np.abs(want))) if np.isfinite(want).any() else 0.0
    return float(diff.max()), float(diff.max() - ATOL - RTOL * scale)


def replicas_match(strategy: tf.distribute.Strategy, setup: Setup, steps: int, tamper: Tamper | None = None,
                   builder: Builder = build) -> Check:
    """``steps`` training steps of ``setup`` on every replica of ``strategy`` against the same steps on its first
    device alone, from the same weights and global batches: every loss and every variable (weights, BN
    statistics, optimizer buffers, queues, on each replica) within `TOLERANCE`. ``tamper`` changes the
    all-replica model before its step is built, ``builder`` builds both models."""
    replicas = strategy.num_replicas_in_sync
    name = f"{replicas} replicas = one device: {setup.method}"
    if replicas == 1:
        return Check(SECTION, name, NOT_APPLICABLE, "one replica: nothing to compare")
    one = tf.distribute.OneDeviceStrategy(strategy.extended.worker_devices[0])
    with float32_matmuls():
        reference, model = builder(setup, one), builder(setup, strategy)
        copy_state(reference, model)  # the same start, whatever each strategy's initialisation drew
        src, dst = state_variables(reference), state_variables(model)
        if tamper is not None:
            tamper(model)
        reference_step, step = make_distributed_step(one, reference), make_distributed_step(strategy, model)
        loss_diff, loss_excess, worst_loss = 0.0, -1.0, ""
        for s, batch in enumerate(real_batches(setup, steps, seed=setup.seed)):
            want, got = reference_step(batch), step(distribute(strategy, batch))
            for key in (k for k in want if k.startswith("loss/")):  # means over the batch: comparable
                diff, excess = _excess(got[key].numpy(), want[key].numpy())
                loss_diff = max(loss_diff, diff)
                if excess > loss_excess:
                    loss_excess, worst_loss = excess, f"{key} at step {s + 1}"
    weight_diff, weight_excess, worst_weight = 0.0, -1.0, ""
    for a, b in zip(src, dst, strict=True):
        for copy in replica_values(b):
            diff, excess = _excess(copy, replica_values(a)[0])
            weight_diff = max(weight_diff, diff)
            if excess > weight_excess:
                weight_excess, worst_weight = excess, b.path
    ok = loss_excess <= 0 and weight_excess <= 0
    figure = f"max |Δloss| {loss_diff:.1e}, max |Δvariable| {weight_diff:.1e} over {steps} steps ({TOLERANCE})"
    if not ok:
        figure += f"; beyond it: {worst_loss if loss_excess > 0 else worst_weight}"
    return Check(SECTION, name, PASS if ok else FAIL, figure,
                 {"max_loss_diff": loss_diff, "max_variable_diff": weight_diff, "steps": steps, "rtol": RTOL,
                  "atol": ATOL, "variables": len(dst), "replicas": replicas, "setup": dataclasses.asdict(setup)})


@dataclasses.dataclass
class MixedRun:
    """A mixed-precision model on all replicas, its step and the batch it ran (the loss-scale check reuses them)."""

    model: object
    step: Callable
    batch: dict


def finite_steps(strategy: tf.distribute.Strategy, setup: Setup, steps: int) -> tuple[Check, MixedRun]:
    """``steps`` steps of ``setup`` (a mixed-precision setting) on every replica: losses and variables finite."""
    model = build(setup, strategy)
    step = make_distributed_step(strategy, model)
    batch = real_batch(setup, seed=setup.seed)
    losses = [float(step(distribute(strategy, batch))["loss/total"]) for _ in range(steps)]
    bad = [v.path for v in model.optimized_variables() if not all(np.isfinite(c).all() for c in replica_values(v))]
    ok = all(np.isfinite(losses)) and not bad
    state = "variables finite" if not bad else f"non-finite: {bad[0]}"
    figure = (f"{steps} steps on {strategy.num_replicas_in_sync} replicas, losses "
              f"{', '.join(f'{x:.4g}' for x in losses)}; {state}")
    check = Check(SECTION, f"{setup.mixed_precision} steps finite: {setup.method}", PASS if ok else FAIL, figure,
                  {"losses": losses, "nonfinite_variables": bad, "setup": dataclasses.asdict(setup)})
    return check, MixedRun(model, step, batch)


def overflow_skips_everywhere(strategy: tf.distribute.Strategy, run: MixedRun) -> Check:
    """An Inf in the last replica's share of a float16 batch: the step is skipped on every replica (no variable
    moves) and every replica's loss scale halves."""
    replicas = strategy.num_replicas_in_sync
    name = "float16 overflow on one replica skips all"
    if replicas == 1:
        return Check(SECTION, name, NOT_APPLICABLE, "one replica: its own verdict is everyone's")
    optimizer = run.model.optimizer
    if not isinstance(optimizer, CrossReplicaLossScaleOptimizer):
        return Check(SECTION, name, FAIL, f"the float16 optimizer is {type(optimizer).__name__}, whose skip "
                     "follows replica 0 only")
    before = [replica_values(v) for v in run.model.optimized_variables()]
    scale = replica_values(optimizer.dynamic_scale)[0]
    batch = tf.nest.map_structure(np.copy, run.batch)
    batch["view1"][-1] = np.inf  # the last example: the last replica's share
    run.step(distribute(strategy, batch))
    moved = [v.path for v, old in zip(run.model.optimized_variables(), before, strict=True)
             if any(not np.array_equal(c, o) for c, o in zip(replica_values(v), old, strict=True))]
    scales = [float(s) for s in replica_values(optimizer.dynamic_scale)]
    ok = not moved and scales == [scale / 2] * len(scales)
    figure = (f"Inf on replica {replicas - 1}: {len(moved)} variables moved, scale {float(scale):g} -> "
              f"{', '.join(f'{s:g}' for s in scales)} on the {len(scales)} replicas")
    return Check(SECTION, name, PASS if ok else FAIL, figure, {"moved": moved, "scale_before": float(scale),
                                                               "scales_after": scales})


def xla_compiles(strategy: tf.distribute.Strategy, setup: Setup) -> Check:
    """The replica step of ``setup`` XLA-compiled (``--jit_compile``) with the photometric stage inside, as an
    accelerator runs it: on every replica where XLA has collectives (GPU, TPU), else on one device.
    ``setup.batch_size`` is per replica here."""
    if compile_mode(strategy) == REPLICA_FUNCTION:
        target, where = strategy, f"{strategy.num_replicas_in_sync} replica(s)"
    else:  # several CPU replicas compile clusters around the collectives, not the accelerator's replica function
        target = tf.distribute.OneDeviceStrategy(strategy.extended.worker_devices[0])
        where = (f"one device (XLA in TensorFlow {tf.__version__} compiles no cross-replica all-reduce on CPU "
                 "devices)")
    setup = dataclasses.replace(setup, jit_compile=True, photometric="device",
                                batch_size=setup.batch_size * target.num_replicas_in_sync)
    model = build(setup, target)
    step = make_distributed_step(target, model, jit_compile=True)
    batch = distribute(target, real_batch(setup, seed=setup.seed))
    t0 = time.perf_counter()
    first = float(step(batch)["loss/total"])
    seconds = time.perf_counter() - t0
    second = float(step(batch)["loss/total"])
    iterations = int(replica_values(model.optimizer.iterations)[0])
    ok = np.isfinite([first, second]).all() and iterations == 2
    figure = f"compiled in {seconds:.1f} s on {where}; losses {first:.4g}, {second:.4g}"
    return Check(SECTION, f"XLA compiles the replica step: {setup.method}", PASS if ok else FAIL, figure,
                 {"compile_seconds": seconds, "losses": [first, second], "iterations": iterations,
                  "compiled_on": target.extended.worker_devices})


def run(report: Report, strategy: tf.distribute.Strategy, methods: tuple[str, ...], base: Setup, steps: int,
        tamper: Tamper | None = None, quick: bool = False) -> None:
    """Every correctness line, for ``methods`` at the small setting ``base`` (``quick``: XLA for the first only,
    its compilation being the longest check on a CPU)."""
    replicas = strategy.num_replicas_in_sync
    global_batch = base.batch_size * replicas  # base.batch_size per replica: the same share on any machine
    for method in methods:
        setup = dataclasses.replace(base, method=method, batch_size=global_batch)
        report.guarded(SECTION, f"{replicas} replicas = one device: {method}",
                       lambda s=setup: replicas_match(strategy, s, steps, tamper))
    mixed: dict[str, MixedRun] = {}
    for dtype in ("float16", "bfloat16"):
        setup = dataclasses.replace(base, method=methods[0], batch_size=global_batch, mixed_precision=dtype)

        def finite(s=setup, dtype=dtype):
            check, mixed[dtype] = finite_steps(strategy, s, steps)
            return check

        report.guarded(SECTION, f"{dtype} steps finite: {methods[0]}", finite)
    name = "float16 overflow on one replica skips all"
    if "float16" in mixed:
        report.guarded(SECTION, name, lambda: overflow_skips_everywhere(strategy, mixed["float16"]))
    else:
        report.add(Check(SECTION, name, FAIL, "not run: the float16 steps failed"))
    for method in methods[:1] if quick else methods:
        setup = dataclasses.replace(base, method=method, batch_size=base.batch_size)
        report.guarded(SECTION, f"XLA compiles the replica step: {method}", lambda s=setup: xla_compiles(strategy, s))
    if quick and len(methods) > 1:
        report.add(Check(SECTION, f"XLA compiles the replica step: {', '.join(methods[1:])}", NOT_APPLICABLE,
                         "not compiled under --quick"))
