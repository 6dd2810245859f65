"""Speed: pairs/s of the run's step and its share of the matmul peak, per method, at the default size and at the
paper's ImageNet-100 settings (ResNet-50, 224 px), with and without ``--jit_compile``, in float32 and the
device's fast dtype, with the photometric stage on the host and on the device.

The step is timed on one real batch held in memory (the input pipeline is measured apart, in the placement
section), synchronised every few steps as the training loop is at its logging steps."""

from __future__ import annotations

import dataclasses
import time

import tensorflow as tf

from augself_tf.runtime.strategy import CLUSTERS, compile_mode
from augself_tf.selfcheck.harness import Setup, build, distribute, real_batch
from augself_tf.selfcheck.step_flops import graph_flops
from augself_tf.selfcheck.verdicts import NOT_APPLICABLE, PASS, Check, Report
from augself_tf.training.distributed_step import make_distributed_step
from augself_tf.training.train_config import resolve_photometric

SECTION = "speed"
#: TrainConfig's defaults (resnet18_cifar at 1/8 width, 32 px, batch 256) and the paper's ImageNet-100 model
#: (flags/imagenet100_*.cfg) at its per-GPU batch: 256 over 8 GPUs.
DEFAULT_SIZE = {"backbone": "resnet18_cifar", "width": 0.125, "image_size": 32}
PAPER_SIZE = {"backbone": "resnet50", "width": 1.0, "image_size": 224}
PAPER_BATCH_PER_REPLICA = 32
SYNC_EVERY = 10


@dataclasses.dataclass(frozen=True)
class Measured:
    """One timed setting: throughput, the step's conv/matmul FLOPs and its share of the machine's peak."""

    setup: Setup
    replicas: int
    pairs_per_sec: float
    step_seconds: float
    steps: int
    first_step_seconds: float
    flops_per_step: int
    uncounted_ops: int
    peak_share: float | None

    def values(self) -> dict:
        """The JSON values of this measurement."""
        return {**dataclasses.asdict(self), "setup": dataclasses.asdict(self.setup)}


_MEASURED: dict[tuple, Measured] = {}


def measure(strategy: tf.distribute.Strategy, setup: Setup, seconds: float, peaks: dict[str, float]) -> Measured:
    """Builds ``setup`` under ``strategy``, warms its step up (tracing, compiling) and times it for at least
    ``seconds`` and 3 steps; the same setting is measured once per process."""
    key = (id(strategy), setup)
    if key in _MEASURED:
        return _MEASURED[key]
    model = build(setup, strategy)
    step = make_distributed_step(strategy, model, setup.jit_compile)
    batch = distribute(strategy, real_batch(setup, seed=setup.seed))
    t0 = time.perf_counter()
    float(step(batch)["loss/total"])
    first = time.perf_counter() - t0
    float(step(batch)["loss/total"])
    steps, t0 = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - t0 < seconds:
        logs = step(batch)
        steps += 1
        if steps % SYNC_EVERY == 0:
            float(logs["loss/total"])  # bounds the queue of dispatched steps on an accelerator
    loss = float(logs["loss/total"])
    elapsed = time.perf_counter() - t0
    if loss != loss:
        raise FloatingPointError(f"{setup.label}: the loss is NaN")
    flops, unknown = graph_flops(step.get_concrete_function(batch).graph)
    peak = peaks.get(setup.mixed_precision or "float32")
    share = flops * steps / elapsed / peak if peak else None
    found = Measured(setup, strategy.num_replicas_in_sync, setup.batch_size * steps / elapsed, elapsed / steps,
                     steps, first, flops, unknown, share)
    _MEASURED[key] = found
    return found


def speed_check(name: str, strategy: tf.distribute.Strategy, setup: Setup, seconds: float,
                peaks: dict[str, float]) -> Check:
    """One speed line: pairs/s, the step's time and its share of the matmul peak of its dtype."""
    m = measure(strategy, setup, seconds, peaks)
    share = "share of peak: not measured" if m.peak_share is None else f"{100 * m.peak_share:.1f}% of the peak"
    figure = (f"{m.pairs_per_sec:.1f} pairs/s ({1000 * m.step_seconds:.0f} ms/step, {m.flops_per_step / 1e9:.3g} "
              f"GFLOP; {share}) [{setup.label}]")
    return Check(SECTION, name, PASS, figure, m.values())


def default_setup(method: str, replicas: int, quick: bool, seed: int) -> Setup:
    """The default size at TrainConfig's batch (256; 32 per replica under ``--quick``), float32, no XLA, the
    photometric stage where ``--photometric=auto`` puts it on this machine."""
    batch = 32 * replicas if quick else max(256, replicas)
    return Setup(method=method, batch_size=batch - batch % replicas, photometric=resolve_photometric("auto"),
                 seed=seed, **DEFAULT_SIZE)


def variants(base: Setup, strategy: tf.distribute.Strategy, fast: str) -> list[tuple[str, Setup | str]]:
    """(what changes, the setting or why it cannot run here): XLA, the fast dtype, the other photometric mode."""
    out: list[tuple[str, Setup | str]] = []
    if compile_mode(strategy) == CLUSTERS:  # XLA has no CPU collectives: clusters around them, not the GPU's form
        out.append(("--jit_compile", f"{strategy.num_replicas_in_sync} CPU replicas compile clusters around the "
                                     "collectives, not one replica function: not timed"))
    else:
        out.append(("--jit_compile", dataclasses.replace(base, jit_compile=True)))
    out.append((f"--mixed_precision={fast}", dataclasses.replace(base, mixed_precision=fast)))
    other = "host" if base.photometric == "device" else "device"
    out.append((f"--photometric={other}", dataclasses.replace(base, photometric=other)))
    return out


def run(report: Report, strategy: tf.distribute.Strategy, methods: tuple[str, ...], *, quick: bool, seconds: float,
        peaks: dict[str, float], fast: str, paper_size: bool, seed: int = 0) -> None:
    """Every speed line; the paper's size only with ``paper_size`` (the caller decides: not under ``--quick`` or
    on CPU unless asked)."""
    replicas = strategy.num_replicas_in_sync
    timed = methods[:1] if quick else methods
    sizes = [("default size", default_setup(methods[0], replicas, quick, seed))]
    if paper_size:
        paper = dataclasses.replace(sizes[0][1], batch_size=PAPER_BATCH_PER_REPLICA * replicas, **PAPER_SIZE)
        sizes.append(("ImageNet-100 size", paper))
    else:
        report.add(Check(SECTION, "ImageNet-100 size (ResNet-50, 224 px)", NOT_APPLICABLE,
                         "skipped " + ("under --quick" if quick else "on CPU") + "; --paper_size runs it"))
    for size, base in sizes:
        for method in timed:
            setup = dataclasses.replace(base, method=method)
            name = f"{size}: {method}"
            report.guarded(SECTION, name, lambda n=name, s=setup: speed_check(n, strategy, s, seconds, peaks))
        for change, setup in variants(base, strategy, fast):
            name = f"{size}: {base.method} {change}"
            if isinstance(setup, str):
                report.add(Check(SECTION, name, NOT_APPLICABLE, setup))
                continue
            report.guarded(SECTION, name, lambda n=name, s=setup: speed_check(n, strategy, s, seconds, peaks))
    if quick and len(methods) > 1:
        report.add(Check(SECTION, f"default size: {', '.join(methods[1:])}", NOT_APPLICABLE,
                         "not timed under --quick"))
