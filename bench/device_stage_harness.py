"""The measuring harness of bench_device_stage.py: its image sources, the pair pipelines and timed callables
it measures, and the ratios and rows it reports them with (timing as in bench/common.py)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig, finish_views, ops
from augself_tf.data.pretrain import make_pair_dataset
from bench import common
from bench.bench_pipeline import cached_source

MODES = ("host", "device")

# ----------------------------------------------------------------------------------------------- sources


def load_cached(spec_split: str) -> tf.data.Dataset:
    spec, _, split = spec_split.rpartition("@")
    if not spec:
        raise SystemExit(f"--source must be SPEC@SPLIT, got {spec_split!r}")
    t0 = time.perf_counter()
    ds = cached_source(spec, split)
    print(f"# source {spec_split}: decoded into memory in {time.perf_counter() - t0:.1f}s", flush=True)
    return ds


def synthetic_jpegs(source: tf.data.Dataset, n: int, height: int, width: int, noise: float, quality: int) -> np.ndarray:
    """``n`` ImageNet-sized JPEGs: source images upsampled (bicubic) to height x width plus Gaussian noise.

    Upsampled 64 px images alone are too smooth (~29 KB at quality 90, faster to decode than photographs);
    noise of std 24 (of 255) brings them to ~108 KB, about ImageNet's mean file size.
    """
    images = [ex["image"] for ex in source.take(n).as_numpy_iterator()]
    g = tf.random.Generator.from_seed(1)
    out = []
    for img in images:
        big = tf.image.resize(tf.cast(img, tf.float32), [height, width], method="bicubic")
        big = tf.cast(tf.clip_by_value(tf.round(big + noise * g.normal(big.shape)), 0, 255), tf.uint8)
        out.append(tf.io.encode_jpeg(big, quality=quality).numpy())
    return np.array(out, dtype=object)


def jpeg_source(jpegs: np.ndarray) -> tf.data.Dataset:
    """Encoded images decoded in a parallel map, as ``folder:`` sources do (decoded again every epoch)."""
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(list(jpegs), tf.string))
    return ds.map(lambda d: {"image": tf.io.decode_jpeg(d, channels=3), "label": tf.constant(0, tf.int64)},
                  num_parallel_calls=tf.data.AUTOTUNE)


# ----------------------------------------------------------------------------------------------- timing


def with_threads(ds: tf.data.Dataset, threads: int) -> tf.data.Dataset:
    if not threads:
        return ds
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def pair_factory(source, size: int, mode: str, batch_size: int, *, cache: bool, threads: int):
    cfg = AugmentConfig(image_size=size)
    return lambda: with_threads(make_pair_dataset(source, cfg, seed=0, batch_size=batch_size, cache=cache,
                                                  photometric=mode), threads)


def interleaved_pipelines(factories: dict, batch_size: int, args) -> dict[str, list[common.Timing]]:
    times: dict[str, list[common.Timing]] = {k: [] for k in factories}
    names = list(factories)
    for r in range(args.repeats):
        t_round = time.perf_counter()
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(common.drain(factories[name], batch_size, warmup=args.warmup_batches,
                                     min_batches=args.min_batches, min_seconds=args.min_seconds))
        print(f"# pipeline round {r + 1}/{args.repeats}: {time.perf_counter() - t_round:.0f}s", flush=True)
    return times


def timed(fn, pairs: int):
    """A callable returning the Timing of fn() (fn must block until its work is done)."""

    def run() -> common.Timing:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return common.Timing(time.perf_counter() - t0, time.process_time() - c0, pairs)

    return run


def finish_views_fn(batch: dict, config: AugmentConfig, jit_compile: bool = False):
    """finish_views traced in a tf.function; calling it blocks until the views are computed."""
    fn = tf.function(lambda b: finish_views(b, config), jit_compile=jit_compile or None)

    def run() -> None:
        out = fn(batch)
        float(out["view1"][0, 0, 0, 0] + out["view2"][0, 0, 0, 0])  # waits for an accelerator's queue

    return run


def select_jitter():
    """Within: ``ops.color_jitter_batch`` runs its ``"select"`` form (all 4 adjustments at each of the 4 steps,
    what a GPU/TPU replica and XLA build) wherever it is traced, e.g. inside ``finish_views`` on CPU."""
    return ops.jitter_method("select")


def with_select_jitter(fn):
    """fn, called (and so traced, the first time) with ``select_jitter`` on."""

    def run():
        with select_jitter():
            return fn()

    return run


def on_device(batch: dict, strategy: tf.distribute.Strategy) -> dict:
    """The batch copied once to the strategy's (single) device: a synthetic in-memory input."""
    with tf.device(strategy.extended.worker_devices[0]):
        return tf.nest.map_structure(tf.identity, batch)


def one_batch(source, size: int, mode: str, batch_size: int) -> dict:
    ds = make_pair_dataset(source, AugmentConfig(image_size=size), seed=0, batch_size=batch_size, cache=True,
                           photometric=mode)
    return next(iter(ds))


def paired(a: list[common.Timing], b: list[common.Timing], attr: str) -> float:
    """Median over rounds of the per-round ratio a/b of wall or CPU seconds per pair."""
    return common.median([(getattr(x, attr) / x.pairs) / (getattr(y, attr) / y.pairs)
                          for x, y in zip(a, b, strict=True)])


def raw(times: dict[str, list[common.Timing]]) -> dict:
    """Every round's timing, for the JSON output."""
    return {k: [dataclasses.asdict(t) for t in v] for k, v in times.items()}


def print_rows(summary: dict[str, dict]) -> None:
    print(f"\n{'configuration':<70} {'pairs/s':>8} {'[min..max]':>15} {'pairs/CPU-s':>11} {'CPU-ms/pair':>11} "
          f"{'cores':>5}")
    for name, s in summary.items():
        rng = f"[{s['pairs_per_sec_min']:.0f}..{s['pairs_per_sec_max']:.0f}]"
        print(f"{name:<70} {s['pairs_per_sec']:8.1f} {rng:>15} {s['pairs_per_cpu_sec']:11.1f} "
              f"{1e3 / s['pairs_per_cpu_sec']:11.3f} {s['cores_used']:5.2f}")
