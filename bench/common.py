"""Shared helpers of the benchmarks: machine description, timing, and the training step as train_main runs it.

The training step is the library's own: the model ``augself_tf.training.loop.build_model`` builds for a
``TrainConfig`` (its lr, weight decay and every other setting at TrainConfig's defaults unless the
benchmark's :class:`StepSpec` sets them; the method's options completed from data of STL10's pretraining
size, as a run would) and ``make_distributed_step`` around ``model.train_step``, fed a synthetic batch held
in memory so that the input pipeline does not interfere.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from augself_tf.augment import registry

# Each configuration owns a tf.function built from the same Python function, which makes TF warn about
# "retracing"; every configuration is traced once during its warm-up, outside the timings.
tf.get_logger().setLevel("ERROR")

# ω sizes per view, as the registry declares them; a synthetic batch carries all of them, as the pipeline does.
OMEGA_DIMS = dict(registry.OMEGA_DIMS)


def machine_info() -> dict:
    """nproc, CPU model and flags that matter, memory, load, TF/Keras/Python versions."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    mem = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, value = line.split(":", 1)
                if key in ("MemTotal", "MemAvailable"):
                    mem[key] = round(int(value.split()[0]) / 2**20, 1)
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "cpu_flags": [f for f in wanted if f in flags],
        "mem_total_gib": mem.get("MemTotal"),
        "mem_available_gib": mem.get("MemAvailable"),
        "loadavg": os.getloadavg(),
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
    }


def print_machine(info: dict) -> None:
    print(
        f"# machine: nproc={info['nproc']} cpu={info['cpu']!r} flags={','.join(info['cpu_flags'])} "
        f"mem_total={info['mem_total_gib']}GiB available={info['mem_available_gib']}GiB "
        f"loadavg={tuple(round(x, 2) for x in info['loadavg'])} gpus={info['gpus'] or 'none'}\n"
        f"# software: tensorflow {info['tensorflow']}, keras {info['keras']}, python {info['python']}",
        flush=True,
    )


@dataclasses.dataclass(frozen=True)
class Timing:
    """One timed unit of work: wall seconds, CPU seconds of the whole process (all threads), pairs done."""

    wall: float
    cpu: float
    pairs: int

    @property
    def pairs_per_sec(self) -> float:
        return self.pairs / self.wall

    @property
    def pairs_per_cpu_sec(self) -> float:
        """Pairs per CPU-second: throughput per fully used core, much less sensitive to a shared machine."""
        return self.pairs / max(self.cpu, 1e-9)

    @property
    def cores_used(self) -> float:
        return self.cpu / self.wall


def summarize(timings: list[Timing]) -> dict:
    """Medians over repeats of pairs/s, pairs/CPU-s and cores used, plus the spread of pairs/s."""
    rates = [t.pairs_per_sec for t in timings]
    return {
        "pairs_per_sec": median(rates),
        "pairs_per_sec_min": min(rates) if rates else float("nan"),
        "pairs_per_sec_max": max(rates) if rates else float("nan"),
        "pairs_per_cpu_sec": median([t.pairs_per_cpu_sec for t in timings]),
        "cores_used": median([t.cores_used for t in timings]),
        "step_seconds": median([t.wall for t in timings]),
        "n": len(timings),
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def mean_square_step(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> Callable[[tf.Tensor], tf.Tensor]:
    """One traced step of ``model`` alone: forward, backward and ``optimizer``'s update of mean(f²) (a backbone's
    cost without any method's heads or loss)."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return step


def synthetic_batch(batch_size: int, image_size: int, seed: int = 0, views: int = 2) -> dict:
    """A pretraining batch (see docs/architecture.md) of ``views`` uniform noise views and plausible ω, in memory
    (LooC's plan has more than two views; a copied ω is drawn afresh, which changes no step's cost)."""
    g = tf.random.Generator.from_seed(seed)

    def omega():
        out = {name: g.uniform([batch_size, d]) for name, d in OMEGA_DIMS.items()}
        out["flip"] = tf.round(out["flip"])
        out["rotation"] = tf.zeros([batch_size, 1])
        return out

    batch: dict = {"label": tf.zeros([batch_size], tf.int64)}
    for j in range(1, views + 1):
        batch[f"view{j}"] = g.uniform([batch_size, image_size, image_size, 3])
        batch[f"omega{j}"] = omega()
    return batch


#: Images of the data a benchmarked step's options are completed from: STL10's train+unlabelled (the paper's
#: pretraining split), so e.g. MoCo's queue is what a run on it gets (62,976 keys at batch 32).
STEP_DATA_EXAMPLES = 105_000
STEP_DATA_CLASSES = 10
STEP_TOTAL_STEPS = 1000  # length of the cosine schedule (and BYOL's τ schedule); does not change a step's cost


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """One training-step configuration (the train_main flags that matter for speed); the rest is TrainConfig's."""

    method: str = "simsiam"
    augself: tuple[str, ...] = ("crop", "color")
    backbone: str = "resnet18"
    width: float = 1.0
    image_size: int = 96
    batch_size: int = 32
    jit_compile: bool = False
    mixed_precision: str | None = None  # None, "bfloat16" or "float16"

    @property
    def label(self) -> str:
        aug = "+AugSelf{" + ",".join(self.augself) + "}" if self.augself else ""
        extra = [f"{self.backbone} w{self.width:g}", f"{self.image_size}px", f"b{self.batch_size}"]
        if self.jit_compile:
            extra.append("jit")
        extra.append(self.mixed_precision or "float32")
        return f"{self.method}{aug} ({', '.join(extra)})"

    def config(self):  # -> TrainConfig (imported late: TensorFlow's log level is set first)
        """The run settings of this step: TrainConfig's defaults with this spec's fields."""
        from augself_tf.augment import AugmentConfig
        from augself_tf.methods.model_config import ModelConfig
        from augself_tf.training.train_config import TrainConfig

        model = ModelConfig(method=self.method, augself=self.augself, backbone=self.backbone, width=self.width)
        return TrainConfig(model=model, augment=AugmentConfig(image_size=self.image_size), batch_size=self.batch_size,
                           jit_compile=self.jit_compile, mixed_precision=self.mixed_precision)


class TrainStep:
    """The library's model and compiled step for a :class:`StepSpec`, fed one synthetic batch; `run()` times a step."""

    def __init__(self, spec: StepSpec, strategy: tf.distribute.Strategy | None = None) -> None:
        from augself_tf.methods.augself_model import PretrainData
        from augself_tf.training.distributed_step import make_distributed_step
        from augself_tf.training.loop import build_model

        self.spec = spec
        if strategy is None:
            from augself_tf.runtime.strategy import make_strategy

            strategy = make_strategy("one_device")
        cfg = spec.config()
        data = PretrainData("synthetic", STEP_DATA_EXAMPLES, STEP_DATA_CLASSES, cfg.batch_size, STEP_TOTAL_STEPS,
                            STEP_DATA_EXAMPLES // cfg.batch_size)
        previous = keras.mixed_precision.global_policy().name
        if cfg.mixed_precision:  # as train() does, but restored: a benchmark builds several configurations
            keras.mixed_precision.set_global_policy(f"mixed_{cfg.mixed_precision}")
        try:
            model = build_model(cfg, strategy, data)
        finally:
            keras.mixed_precision.set_global_policy(previous)
        self.model = model
        self.strategy = strategy
        if spec.batch_size % strategy.num_replicas_in_sync:
            raise ValueError(f"batch {spec.batch_size} not divisible by {strategy.num_replicas_in_sync} replicas")
        per_replica = spec.batch_size // strategy.num_replicas_in_sync
        views = cfg.model.views().num_views
        self.batch = strategy.experimental_distribute_values_from_function(
            lambda ctx: synthetic_batch(per_replica, spec.image_size, seed=ctx.replica_id_in_sync_group, views=views)
        )

        self._step = make_distributed_step(strategy, model, spec.jit_compile)

    def run(self, batch: dict | None = None) -> Timing:
        """One step on `batch` (default: the synthetic one); wall and process-CPU seconds until its loss is
        on the host (the loop reads the loss every step too)."""
        t0, c0 = time.perf_counter(), time.process_time()
        logs = self._step(self.batch if batch is None else batch)
        loss = float(logs["loss/total"])
        timing = Timing(time.perf_counter() - t0, time.process_time() - c0, self.spec.batch_size)
        if loss != loss:  # NaN would mean a broken step, not a slow one
            raise RuntimeError(f"{self.spec.label}: loss is NaN")
        return timing



def drain(make_ds, batch_size: int, *, warmup: int, min_batches: int, min_seconds: float) -> Timing:
    """A fresh dataset, `warmup` batches discarded, then >= `min_batches` batches and >= `min_seconds` timed."""
    it = iter(make_ds())
    for _ in range(warmup):
        next(it)
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while n < min_batches or time.perf_counter() - t0 < min_seconds:
        next(it)
        n += 1
    timing = Timing(time.perf_counter() - t0, time.process_time() - c0, n * batch_size)
    del it
    gc.collect()
    time.sleep(0.3)  # let the iterator's threads wind down before the next measurement
    return timing


def interleaved_steps(
    steps: dict[str, Callable[[], Timing]], *, warmup: int, repeats: int, per_round: int = 1, log: bool = True
) -> dict[str, list[Timing]]:
    """Warm every step up, then `repeats` rounds over all configurations (`per_round` timed steps each,
    order reversed every other round so no configuration always follows the same neighbour)."""
    for name, fn in steps.items():
        t0 = time.perf_counter()
        for _ in range(warmup):
            fn()
        if log:
            print(f"  warm-up {name}: {time.perf_counter() - t0:.1f}s", flush=True)
    times: dict[str, list[Timing]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            for _ in range(per_round):
                times[name].append(steps[name]())
        gc.collect()
    return times
