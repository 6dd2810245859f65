"""The device stage (``--photometric=device``): host CPU saved, its cost inside the step, end-to-end rate.

Four measurements, each reported as ratios within one run (docs/benchmarks.md §4):

1. ``pipeline``: host CPU-seconds per pair of ``make_pair_dataset`` (batch 256), ``photometric="host"`` vs
   ``"device"``, at 96 and 224 px, over tiny-imagenet-mini decoded once into memory (64 px images, so every
   crop is UPSAMPLED to the view size), and over synthetic ImageNet-sized JPEGs (500x375, ~108 KB, decoded
   every epoch as a folder source does, crops mostly shrunk) at 224 px. Target: device mode >= 2.5x fewer
   host CPU-seconds per pair at 96 px.
   ``jpeg``: CPU-ms per image of decoding such a JPEG, whole (``tf.io.decode_jpeg``) or only the pair's two
   crop windows (``tf.image.decode_and_crop_jpeg``).
2. ``share``: ``finish_views`` alone (tf.function, a real device-mode batch of 256 at 96 px, the paper's
   probabilities) vs one ResNet-18 (width 1.0) SimSiam+AugSelf{crop,color} step at batch 256, 96 px
   (``common.TrainStep``, synthetic float batch), and that step fed the device-mode batch (finish_views
   inside), interleaved; with ``--share_select`` (default) also both with the jitter's select form (the
   formulation before issue 24). Target: finish_views <= 8% of the step.
3. ``train_main``: the README default run (``python train_main.py``) for ``--max_steps`` steps with
   ``--photometric=host`` and ``=device``; pairs/s are read from its TensorBoard scalar ``pairs_per_sec``
   (one value per ``--log_every`` window; the first window, which holds tracing, is dropped).
4. ``--gpu``: for ResNet-18 at 96 px and ResNet-50 at 224 px, fp32 and mixed precision, XLA off and on:
   training-step pairs/s on one real batch held on the device (device mode: uint8 views + draws, finish_views
   in the step; host mode: float views), finish_views alone, the host pipeline's pairs/s in both modes, and
   the input-bound fraction max(0, 1 - pipeline pairs/s / step pairs/s). Runs on CPU too (``--quick``).
   Its pipeline figures use ``--source`` (decoded into memory first); on the GPU machine pass the real data,
   e.g. ``--source=stl10@train+unlabelled``.

Timing as in bench/common.py: interleaved rounds, medians, process CPU time (all threads) besides wall time.

    python bench/bench_device_stage.py --json /tmp/device_stage.json      # CPU figures of §4, 6-8 min on 2 cores
    python bench/bench_device_stage.py --quick                            # smoke test of 1-3, ~2 min
    python bench/bench_device_stage.py --parts=train_main --train_main_runs=2        # end to end, alternating
    python bench/bench_device_stage.py --parts=finish_breakdown           # where finish_views' time goes
    python bench/bench_device_stage.py --host_breakdown --repeats=2       # where device mode's host CPU goes
    python bench/bench_device_stage.py --gpu --json /tmp/gpu.json         # on a GPU machine
    python bench/bench_device_stage.py --gpu --quick                      # the GPU suite at toy sizes (CPU ok)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import common  # noqa: E402  (sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bench_pipeline import cached_source  # noqa: E402

from augself_tf.augment import (  # noqa: E402
    AugmentConfig,
    augment_view,
    augment_view_for_device,
    finish_views,
    ops,
    registry,
)
from augself_tf.augment.crop_sampler import crop_box  # noqa: E402
from augself_tf.augment.photometric import decode_color_omega  # noqa: E402
from augself_tf.augment.steps import DEVICE, HOST  # noqa: E402
from augself_tf.data.pretrain import example_seed, make_pair_dataset  # noqa: E402
from augself_tf.runtime.strategy import make_strategy  # noqa: E402
from augself_tf.runtime.tensorboard import last_per_step, read_scalars  # noqa: E402
from augself_tf.training.loop import make_distributed_step  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_SOURCE = "folder:/work/shared/data/tiny-imagenet-mini@all"
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


@contextlib.contextmanager
def select_jitter():
    """Within: ``ops.color_jitter_batch`` runs its ``"select"`` form (all 4 adjustments at each of the 4 steps,
    the formulation before issue 24) wherever it is traced, e.g. inside ``finish_views``."""
    original = ops.color_jitter_batch
    ops.color_jitter_batch = functools.partial(original, method="select")
    try:
        yield
    finally:
        ops.color_jitter_batch = original


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


# ----------------------------------------------------------------------------------------------- 1. pipeline


def part_pipeline(source, jpegs, args) -> dict:
    factories = {}
    for size in args.sizes:
        for mode in MODES:
            factories[f"tiny-imagenet 64px->{size}px {mode}"] = pair_factory(
                source, size, mode, args.batch_size, cache=True, threads=args.threads)
    if jpegs is not None:
        jsrc = jpeg_source(jpegs)
        for mode in MODES:
            factories[f"jpeg {args.jpeg_width}x{args.jpeg_height} (decoded) ->{args.jpeg_size}px {mode}"] = (
                pair_factory(jsrc, args.jpeg_size, mode, args.batch_size, cache=False, threads=args.threads))
    times = interleaved_pipelines(factories, args.batch_size, args)
    summary = {k: common.summarize(v) for k, v in times.items()}
    print_rows(summary)
    ratios = {}
    print("\nhost CPU-s per pair, host mode / device mode (median of per-round ratios):")
    for name in factories:
        if not name.endswith(" host"):
            continue
        dev = name[: -len("host")] + "device"
        cpu, wall = paired(times[name], times[dev], "cpu"), paired(times[name], times[dev], "wall")
        ratios[name[: -len(" host")]] = {"cpu": cpu, "wall": wall,
                                         "cpu_ms_per_pair_host": 1e3 / summary[name]["pairs_per_cpu_sec"],
                                         "cpu_ms_per_pair_device": 1e3 / summary[dev]["pairs_per_cpu_sec"]}
        target = "  (target >= 2.5x at 96 px)" if "->96px" in name else ""
        print(f"  {name[: -len(' host')]:<58} {cpu:5.2f}x CPU, {wall:5.2f}x wall{target}")
    return {"summary": summary, "ratios": ratios, "rounds": raw(times)}


# ----------------------------------------------------------------------------------------------- 1b. jpeg decode


def part_jpeg(jpegs, args) -> dict:
    """CPU-ms per image (one decode serves a pair) of the decode strategies, at --jpeg_size."""
    size = args.jpeg_size
    cfg = AugmentConfig(image_size=size)

    def windows(data, i):
        shape = tf.image.extract_jpeg_shape(data)
        seeds = tf.unstack(tf.random.experimental.stateless_split(tf.stack([i, tf.constant(7, tf.int64)]), 2))
        return [crop_box(shape[0], shape[1], s, cfg.crop_scale, cfg.crop_ratio) for s in seeds]

    def as_u8(x):
        return tf.cast(tf.round(tf.clip_by_value(x, 0.0, 1.0) * 255.0), tf.uint8)

    def whole(i, data):
        return tf.io.decode_jpeg(data, channels=3)

    def whole_then_crop(i, data):
        img = ops.to_float_rgb(tf.io.decode_jpeg(data, channels=3))
        return tf.stack([as_u8(ops.crop_and_resize(img, off, sz, size)) for off, sz in windows(data, i)])

    def whole_then_crop_no_aa(i, data):
        img = ops.to_float_rgb(tf.io.decode_jpeg(data, channels=3))
        views = []
        for off, sz in windows(data, i):
            crop = tf.slice(img, tf.concat([off, [0]], 0), tf.concat([sz, [-1]], 0))
            views.append(as_u8(tf.image.resize(crop, [size, size], method="bilinear", antialias=False)))
        return tf.stack(views)

    def crop_windows(i, data):
        views = []
        for off, sz in windows(data, i):
            img = ops.to_float_rgb(tf.image.decode_and_crop_jpeg(data, tf.concat([off, sz], 0), channels=3))
            views.append(as_u8(ops.crop_and_resize(img, [0, 0], sz, size)))
        return tf.stack(views)

    def shape_and_draws(i, data):
        return tf.stack([tf.concat([off, sz], 0) for off, sz in windows(data, i)])

    fns = {
        "extract_jpeg_shape + the 2 crop boxes (no decode)": shape_and_draws,
        "decode_jpeg (whole image)": whole,
        f"decode_jpeg + 2 x crop+resize to {size}px (what the pipeline does)": whole_then_crop,
        "decode_jpeg + 2 x crop+resize, antialias=False even when shrinking": whole_then_crop_no_aa,
        f"2 x decode_and_crop_jpeg (crop windows only) + resize to {size}px": crop_windows,
    }
    data = tf.constant(list(jpegs), tf.string)
    results: dict[str, list[float]] = {k: [] for k in fns}
    batch = 64
    for r in range(args.repeats):
        for name, fn in fns.items() if r % 2 == 0 else list(fns.items())[::-1]:
            def make(fn=fn):
                ds = tf.data.Dataset.from_tensor_slices(data).repeat().enumerate()
                return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).batch(batch).prefetch(1)
            t = common.drain(make, batch, warmup=1, min_batches=2, min_seconds=min(args.min_seconds, 2.0))
            results[name].append(1e3 * t.cpu / t.pairs)
    sizes = [len(j) for j in jpegs]
    print(f"\nJPEG {args.jpeg_width}x{args.jpeg_height}, quality {args.jpeg_quality}, mean {np.mean(sizes) / 1e3:.0f} "
          f"KB ({len(jpegs)} images): CPU-ms per image (= per pair), median over rounds")
    summary = {}
    for name, xs in results.items():
        summary[name] = common.median(xs)
        print(f"  {name:<72} {summary[name]:6.2f}  [{min(xs):.2f}..{max(xs):.2f}]")
    return {"cpu_ms_per_image": summary, "mean_bytes": float(np.mean(sizes)), "n": len(jpegs)}


# ----------------------------------------------------------------------------------------------- 2. share


def part_share(source, args) -> dict:
    size, batch = args.share_size, args.share_batch
    cfg = AugmentConfig(image_size=size)
    spec = common.StepSpec(method="simsiam", augself=("crop", "color"), backbone="resnet18", width=args.share_width,
                           image_size=size, batch_size=batch)
    t0 = time.perf_counter()
    step = common.TrainStep(spec)
    step.model.augment_config = cfg  # finish_views inside the step (before its first trace)
    dev_batch = one_batch(source, size, "device", batch)
    print(f"# built {spec.label} and one device-mode batch: {time.perf_counter() - t0:.1f}s", flush=True)
    fns = {
        "step, float host-mode batch (common.TrainStep)": step.run,
        "step, uint8 device-mode batch (finish_views inside)": lambda: step.run(dev_batch),
        "finish_views alone (tf.function)": timed(finish_views_fn(dev_batch, cfg), batch),
    }
    if args.share_select:
        # The same model and optimizer, a second traced step: its finish_views has the select jitter.
        select_step = copy.copy(step)  # shallow: shares the model, the optimizer and the strategy
        select_step._step = make_distributed_step(step.strategy, step.model, spec.jit_compile)
        fns.update({
            "step, uint8 device-mode batch, select jitter (before issue 24)":
                with_select_jitter(lambda: select_step.run(dev_batch)),
            "finish_views alone, select jitter (before issue 24)":
                with_select_jitter(timed(finish_views_fn(dev_batch, cfg), batch)),
        })
    times = common.interleaved_steps(fns, warmup=args.share_warmup, repeats=args.share_repeats)
    summary = {k: common.summarize(v) for k, v in times.items()}
    print(f"\n{'configuration (' + spec.label + ')':<90} {'s':>7} {'pairs/s':>8} {'pairs/CPU-s':>11} {'cores':>5}")
    for name, s in summary.items():
        print(f"{name:<90} {s['step_seconds']:7.3f} {s['pairs_per_sec']:8.1f} {s['pairs_per_cpu_sec']:11.1f} "
              f"{s['cores_used']:5.2f}")
    host, dev, fv, *before = (times[k] for k in fns)
    share = {
        "finish_views / step, wall": paired(fv, host, "wall"),
        "finish_views / step, CPU": paired(fv, host, "cpu"),
        "step(device batch) / step(host batch) - 1, wall": paired(dev, host, "wall") - 1.0,
        "step(device batch) / step(host batch) - 1, CPU": paired(dev, host, "cpu") - 1.0,
    }
    if before:
        dev_sel, fv_sel = before
        share.update({
            "select jitter: finish_views / step, wall": paired(fv_sel, host, "wall"),
            "select jitter: finish_views / step, CPU": paired(fv_sel, host, "cpu"),
            "select jitter: step(device batch) / step(host batch) - 1, wall": paired(dev_sel, host, "wall") - 1.0,
            "select jitter: step(device batch) / step(host batch) - 1, CPU": paired(dev_sel, host, "cpu") - 1.0,
            "finish_views select / partition, CPU": paired(fv_sel, fv, "cpu"),
        })
    print("\nfinish_views as a share of the training step (median of per-round ratios; target <= 8%):")
    for k, v in share.items():
        print(f"  {k:<66} {v:6.2f}x" if k.endswith("partition, CPU") else f"  {k:<66} {100 * v:+6.1f}%")
    return {"spec": dataclasses.asdict(spec), "summary": summary, "share": share, "rounds": raw(times)}


def banded_blur(x: tf.Tensor, sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """A CANDIDATE for ``ops.gaussian_blur_batch`` (not used by the package): the separable reflect-padded
    blur as two batched matmuls with per-example banded [S, S] matrices (more FLOPs, but GEMM kernels)."""
    size = int(x.shape[1])
    pad = (kernel_size - 1) // 2
    j = np.arange(size)[:, None] + np.arange(kernel_size)[None, :] - pad  # [S, k] source row of each tap
    j = np.where(j < 0, -j, np.where(j > size - 1, 2 * (size - 1) - j, j))  # REFLECT, as tf.pad
    onehot = tf.constant(np.eye(size, dtype=np.float32)[j])  # [S, k, S]
    half = (kernel_size - 1) / 2.0
    t = tf.linspace(-half, half, kernel_size)
    pdf = tf.exp(-0.5 * tf.square(t[tf.newaxis, :] / tf.reshape(tf.cast(sigma, tf.float32), [-1, 1])))
    kernel = pdf / tf.reduce_sum(pdf, axis=1, keepdims=True)  # [B, k]
    m = tf.einsum("bt,its->bis", kernel, onehot)  # [B, S, S]
    y = tf.einsum("bij,bjwc->biwc", m, x)
    return tf.einsum("bkw,biwc->bikc", m, y)


def part_finish_breakdown(source, args) -> dict:
    """Where finish_views' time goes: each device step's batched transform alone, on both views of one
    device-mode batch (2 x --share_batch views at --share_size), interleaved; ms per batch and share."""
    size, batch = args.share_size, args.share_batch
    cfg = AugmentConfig(image_size=size)
    b = one_batch(source, size, "device", batch)
    x = tf.concat([b["view1"], b["view2"]], 0)
    params = tf.nest.map_structure(lambda p, q: tf.concat([p, q], 0), b["device1"], b["device2"])
    xf = tf.cast(x, tf.float32) / 255.0
    factors = decode_color_omega(params["color"]["u"], cfg)
    fns = {"finish_views (both views, every device step)": (lambda: finish_views(b, cfg), None),
           "uint8 -> float32 and clip only": (lambda: tf.clip_by_value(tf.cast(x, tf.float32) / 255.0, 0.0, 1.0),
                                              None)}
    for step in registry.PIPELINE:
        if step.stage == DEVICE:
            fns[f"{step.name}: transform_batch"] = (
                lambda step=step: step.transform_batch(xf, params[step.name], cfg), xf)
    per = [tf.reshape(factors[:, i], [-1, 1, 1, 1]) for i in range(4)]
    jitter_args = (xf, factors, params["color"]["order"], params["color"]["applied"])
    fns.update({
        "  color: partition (each adjustment where needed; the default)": (
            lambda: ops.color_jitter_batch(*jitter_args, method="partition"), xf),
        "  color: select (all 4 at each step; before issue 24, and under XLA)": (
            lambda: ops.color_jitter_batch(*jitter_args, method="select"), xf),
        "  color: one brightness pass": (lambda: ops.adjust_brightness(xf, per[0]), xf),
        "  color: one contrast pass": (lambda: ops.adjust_contrast(xf, per[1]), xf),
        "  color: one saturation pass": (lambda: ops.adjust_saturation(xf, per[2]), xf),
        "  color: one hue pass (adjust_hue_batch)": (lambda: ops.adjust_hue_batch(xf, factors[:, 3]), xf),
        "  color: the 4 in one fixed order (no per-example order)": (
            lambda: ops.adjust_saturation(ops.adjust_contrast(ops.adjust_brightness(
                ops.adjust_hue_batch(xf, factors[:, 3]), per[0]), per[1]), per[2]), xf),
        f"  blur: candidate banded matmul (k={cfg.blur_kernel_size})": (
            lambda: banded_blur(xf, params["blur"]["sigma"], cfg.blur_kernel_size), xf),
    })
    ref = ops.gaussian_blur_batch(xf, params["blur"]["sigma"], cfg.blur_kernel_size)
    diff = float(tf.reduce_max(tf.abs(banded_blur(xf, params["blur"]["sigma"], cfg.blur_kernel_size) - ref)))
    runs = {}
    for name, (fn, _) in fns.items():
        f = tf.function(fn)
        runs[name] = timed(lambda f=f: [t.numpy() for t in tf.nest.flatten(f())], 2 * batch)
    times = common.interleaved_steps(runs, warmup=1, repeats=args.repeats, log=False)
    total = common.median([t.cpu for t in times[next(iter(fns))]])
    print(f"\nfinish_views breakdown: {2 * batch} views at {size}px (CPU seconds, median over rounds; share of "
          f"finish_views)")
    summary = {}
    for name, ts in times.items():
        cpu = common.median([t.cpu for t in ts])
        wall = common.median([t.wall for t in ts])
        summary[name] = {"cpu_s": cpu, "wall_s": wall, "share": cpu / total}
        print(f"  {name:<64} {cpu:7.3f} CPU-s {wall:7.3f} s {100 * cpu / total:6.1f}%")
    print(f"  (banded-matmul blur vs gaussian_blur_batch: max |difference| {diff:.1e})")
    return {"summary": summary, "banded_blur_max_abs_diff": diff}


# ----------------------------------------------------------------------------------------------- 3. train_main


def part_train_main(args) -> dict:
    results = {}
    order = [m for _ in range(args.train_main_runs) for m in MODES]
    if args.train_main_runs > 1:  # host, device, device, host, ...: drift in the load hits both modes alike
        order = [m for r in range(args.train_main_runs) for m in (MODES if r % 2 == 0 else MODES[::-1])]
    for i, mode in enumerate(order):
        with tempfile.TemporaryDirectory(prefix=f"device_stage_{mode}_") as tmp:
            cmd = [sys.executable, os.path.join(REPO, "train_main.py"), f"--max_steps={args.train_steps}",
                   f"--photometric={mode}", "--noexport", f"--log_every={args.train_log_every}",
                   f"--model_dir={tmp}/run", *args.train_main_flags.split()]
            print(f"# run {i + 1}/{len(order)}: {' '.join(cmd[1:])}", flush=True)
            t0, r0 = time.perf_counter(), os.times()
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            r1 = os.times()
            wall = time.perf_counter() - t0
            cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n")
                raise RuntimeError(f"train_main.py --photometric={mode} failed ({proc.returncode})")
            rates = last_per_step(read_scalars(os.path.join(tmp, "run", "tensorboard"), ["pairs_per_sec"])
                                  .get("pairs_per_sec", []))
        steady = [r for s, r in rates[1:]]  # the first window holds tracing and the first checkpoint's setup
        results.setdefault(mode, []).append({"windows": rates, "pairs_per_sec": common.median(steady),
                                             "wall_s": wall, "cpu_s": cpu})
        print(f"#   {mode}: pairs/s per window {[round(r) for _, r in rates]}; steady median "
              f"{common.median(steady):.1f}; process {wall:.0f}s wall, {cpu:.0f}s CPU (with start-up)", flush=True)
    summary = {m: common.median([r["pairs_per_sec"] for r in runs]) for m, runs in results.items()}
    print(f"\ntrain_main.py {args.train_main_flags} --max_steps={args.train_steps}: pairs/s (TensorBoard "
          f"'pairs_per_sec', median of the windows after the first):")
    for m, v in summary.items():
        print(f"  --photometric={m:<7} {v:8.1f}")
    if "host" in summary and "device" in summary:
        print(f"  device / host: {summary['device'] / summary['host']:.2f}x")
    return {"runs": results, "pairs_per_sec": summary}


# ----------------------------------------------------------------------------------------------- host breakdown


def part_host_breakdown(source, args) -> dict:
    """CPU-ms per PAIR of device mode's host work, built up step by step (two views per example, as
    ``two_views``), in a plain enumerate -> map -> batch dataset; plus make_pair_dataset itself."""
    results: dict[str, list[float]] = {}
    for size in args.sizes:
        cfg = AugmentConfig(image_size=size)

        def partial(image, seed, host_steps, cfg=cfg, size=size):
            seed = tf.ensure_shape(tf.cast(seed, tf.int64), [2])
            step_seeds = tf.random.experimental.stateless_split(seed, num=registry.NUM_SEED_SLOTS)
            view = ops.to_float_rgb(image)
            omega, device = {}, {}
            for step in registry.PIPELINE:
                params = step.sample(step_seeds[step.seed_slot], tf.shape(view), cfg)
                if step.stage == DEVICE:
                    device[step.name] = params
                elif step.name in host_steps:
                    view = tf.ensure_shape(step.transform(view, params, cfg), [size, size, 3])
                elif step.name == "crop":
                    view = tf.zeros([size, size, 3])
                if step.omega is not None:
                    omega[step.name] = step.omega(params, cfg)
            if host_steps:
                view = tf.cast(tf.round(tf.clip_by_value(view, 0.0, 1.0) * 255.0), tf.uint8)
            else:
                view = tf.zeros([size, size, 3], tf.uint8)
            return view, omega, device

        host_names = [s.name for s in registry.PIPELINE if s.stage == HOST]
        variants = {
            "draws + ω of every step, no pixel op": (),
            "+ crop+resize, uint8 out": ("crop",),
            "+ flip": ("crop", "flip"),
            "+ rotation = augment_view_for_device": tuple(host_names),
            "augment_view_for_device itself": "device",
            "augment_view (host mode) itself": "host",
        }

        def pair_fn(i, ex, kind, cfg=cfg):
            s1, s2 = tf.unstack(tf.random.experimental.stateless_split(example_seed(0, 0, i), 2))
            if kind == "device":
                return augment_view_for_device(ex["image"], s1, cfg), augment_view_for_device(ex["image"], s2, cfg)
            if kind == "host":
                return augment_view(ex["image"], s1, cfg), augment_view(ex["image"], s2, cfg)
            return partial(ex["image"], s1, kind), partial(ex["image"], s2, kind)

        factories = {}
        for name, kind in variants.items():
            def make(kind=kind):
                ds = source.repeat().enumerate()
                ds = ds.map(lambda i, ex: pair_fn(i, ex, kind), num_parallel_calls=tf.data.AUTOTUNE)
                return with_threads(ds.batch(args.batch_size).prefetch(1), args.threads)
            factories[f"{size}px {name}"] = make
        factories[f"{size}px make_pair_dataset(photometric='device')"] = pair_factory(
            source, size, "device", args.batch_size, cache=True, threads=args.threads)
        for name, xs in interleaved_pipelines(factories, args.batch_size, args).items():
            results[name] = [1e3 * t.cpu / t.pairs for t in xs]
    print(f"\n{'device mode host work (CPU-ms per pair, median over rounds)':<80} {'CPU-ms':>7} {'[min..max]':>15}")
    summary = {}
    for name, xs in results.items():
        summary[name] = common.median(xs)
        print(f"{name:<80} {summary[name]:7.3f} {f'[{min(xs):.3f}..{max(xs):.3f}]':>15}")
    return summary


# ----------------------------------------------------------------------------------------------- 4. GPU suite


def part_gpu(source, args) -> dict:
    strategy = make_strategy("one_device")
    device = strategy.extended.worker_devices[0]
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    mp = args.gpu_mixed_precision
    if mp == "auto":
        mp = "float16" if has_gpu else "bfloat16"
    print(f"# GPU suite on {device}; mixed precision = {mp}", flush=True)
    out = {}
    for item in args.gpu_configs.split(","):
        backbone, _, rest = item.partition("@")
        size, _, batch = rest.partition(":")
        size, batch = int(size), int(batch)
        cfg = AugmentConfig(image_size=size)
        batches = {m: on_device(one_batch(source, size, m, batch), strategy) for m in MODES}
        fns, labels, failed = {}, {}, {}
        for precision in ("float32", mp):
            for xla in (False, True):
                spec = common.StepSpec(method="simsiam", augself=("crop", "color"), backbone=backbone,
                                       width=args.gpu_width, image_size=size, batch_size=batch, jit_compile=xla,
                                       mixed_precision=None if precision == "float32" else precision)
                key = f"{precision}{' xla' if xla else ''}"
                labels[key] = spec.label
                t0 = time.perf_counter()
                try:
                    step = common.TrainStep(spec, strategy)
                    step.model.augment_config = cfg
                    for mode in MODES:
                        for _ in range(args.gpu_warmup):
                            step.run(batches[mode])
                        fns[f"{key} step {mode}"] = (lambda step=step, b=batches[mode]: step.run(b))
                    print(f"# built + warm-up {spec.label}: {time.perf_counter() - t0:.1f}s", flush=True)
                except Exception as err:  # report it and go on (e.g. XLA unsupported somewhere)
                    failed[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                    print(f"# FAILED {spec.label}: {failed[key]}", flush=True)
                    if os.environ.get("BENCH_TRACEBACK"):
                        traceback.print_exc()
        for xla in (False, True):
            try:
                with tf.device(device):
                    fv = finish_views_fn(batches["device"], cfg, jit_compile=xla)
                    for _ in range(args.gpu_warmup):
                        fv()
                fns[f"finish_views{' xla' if xla else ''}"] = timed(fv, batch)
            except Exception as err:
                failed[f"finish_views xla={xla}"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        times = common.interleaved_steps(fns, warmup=0, repeats=args.gpu_repeats, log=False)
        steps = {k: common.summarize(v) for k, v in times.items()}
        pipes = interleaved_pipelines(
            {m: pair_factory(source, size, m, args.batch_size, cache=True, threads=args.threads) for m in MODES},
            args.batch_size, args)
        pipes = {m: common.summarize(v) for m, v in pipes.items()}
        print(f"\n{backbone} {size}px batch {batch} on {device}; host pipeline (all host cores, tiny-imagenet "
              f"64px upsampled): host mode {pipes['host']['pairs_per_sec']:.0f} pairs/s "
              f"({pipes['host']['pairs_per_cpu_sec']:.0f}/CPU-s), device mode {pipes['device']['pairs_per_sec']:.0f} "
              f"pairs/s ({pipes['device']['pairs_per_cpu_sec']:.0f}/CPU-s)")
        print(f"{'precision':<16} {'step pairs/s':>16} {'':>10} {'input-bound fraction':>24}")
        print(f"{'':<16} {'device mode':>16} {'host mode':>10} {'device mode':>12} {'host mode':>11}")
        rows = {}
        for key in labels:
            if key in failed:
                print(f"{key:<16} FAILED {failed[key]}")
                continue
            rate = {m: steps[f"{key} step {m}"]["pairs_per_sec"] for m in MODES}
            bound = {m: max(0.0, 1.0 - pipes[m]["pairs_per_sec"] / rate[m]) for m in MODES}
            rows[key] = {"label": labels[key], "step_pairs_per_sec": rate, "input_bound_fraction": bound}
            print(f"{key:<16} {rate['device']:16.1f} {rate['host']:10.1f} {bound['device']:12.2f} "
                  f"{bound['host']:11.2f}")
        for xla in ("", " xla"):
            name = f"finish_views{xla}"
            if name in steps:
                ms = 1e3 * steps[name]["step_seconds"]
                ref = steps.get(f"float32{xla} step host")
                share = f", {100 * steps[name]['step_seconds'] / ref['step_seconds']:.1f}% of the float32{xla} step" \
                    if ref else ""
                print(f"{name:<16} {ms:.2f} ms per batch of {batch}{share}")
        out[f"{backbone}@{size}:{batch}"] = {"steps": steps, "pipelines": pipes, "rows": rows, "failed": failed}
        del fns, batches
        gc.collect()
    return out


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="pipeline,jpeg,share,train_main",
                   help="comma-separated: pipeline, jpeg, share, train_main, finish_breakdown (not by default)")
    p.add_argument("--gpu", action="store_true", help="run the GPU suite (part 4) instead")
    p.add_argument("--host_breakdown", action="store_true", help="instead: where device mode's host CPU goes")
    p.add_argument("--quick", action="store_true", help="toy sizes and few repeats (smoke test; CPU is fine)")
    p.add_argument("--source", default=DEFAULT_SOURCE, help="SPEC@SPLIT decoded once into memory")
    p.add_argument("--sizes", default="96,224", help="view sizes of the pipeline comparison")
    p.add_argument("--batch_size", type=int, default=256, help="pipeline batch (pairs)")
    p.add_argument("--threads", type=int, default=0, help="tf.data private threadpool size (0 = all cores)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of the pipeline measurements")
    p.add_argument("--warmup_batches", type=int, default=1)
    p.add_argument("--min_batches", type=int, default=2)
    p.add_argument("--min_seconds", type=float, default=4.0)
    p.add_argument("--jpeg_images", type=int, default=512, help="synthetic JPEGs (0: skip the JPEG rows)")
    p.add_argument("--jpeg_width", type=int, default=500)
    p.add_argument("--jpeg_height", type=int, default=375)
    p.add_argument("--jpeg_quality", type=int, default=90)
    p.add_argument("--jpeg_noise", type=float, default=24.0, help="std (of 255) of the noise added before encoding")
    p.add_argument("--jpeg_size", type=int, default=224, help="view size of the JPEG rows")
    p.add_argument("--share_size", type=int, default=96)
    p.add_argument("--share_batch", type=int, default=256)
    p.add_argument("--share_width", type=float, default=1.0)
    p.add_argument("--share_warmup", type=int, default=1)
    p.add_argument("--share_repeats", type=int, default=3)
    p.add_argument("--share_select", action=argparse.BooleanOptionalAction, default=True,
                   help="also time finish_views and the device-batch step with the select jitter (before issue 24)")
    p.add_argument("--train_steps", type=int, default=40, help="train_main --max_steps")
    p.add_argument("--train_log_every", type=int, default=10, help="train_main --log_every (one pairs/s window)")
    p.add_argument("--train_main_runs", type=int, default=1, help="runs per mode (alternating host/device)")
    p.add_argument("--train_main_flags", default="", help="extra train_main flags (default: the README default run)")
    p.add_argument("--gpu_configs", default="resnet18@96:256,resnet50@224:64",
                   help="BACKBONE@SIZE:PER_DEVICE_BATCH list of the GPU suite")
    p.add_argument("--gpu_width", type=float, default=1.0)
    p.add_argument("--gpu_mixed_precision", default="auto", choices=["auto", "float16", "bfloat16"],
                   help="auto: float16 on a GPU, bfloat16 on CPU")
    p.add_argument("--gpu_warmup", type=int, default=3)
    p.add_argument("--gpu_repeats", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.batch_size, args.repeats, args.min_seconds = "32,64", 32, 1, 1.0
        args.jpeg_images, args.jpeg_size, args.jpeg_width, args.jpeg_height = 64, 64, 160, 120
        args.share_size, args.share_batch, args.share_width, args.share_repeats = 32, 16, 0.25, 2
        args.train_steps, args.train_log_every = 4, 2
        args.gpu_configs, args.gpu_width, args.gpu_warmup, args.gpu_repeats = "resnet18@32:8,resnet50@32:4", 0.25, 1, 2
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if 0 < args.jpeg_images < args.batch_size:  # make_pair_dataset drops the remainder: no batch at all
        raise SystemExit(f"--jpeg_images ({args.jpeg_images}) must be at least --batch_size ({args.batch_size})")

    info = common.machine_info()
    common.print_machine(info)
    t_start = time.perf_counter()
    results: dict = {"machine": info, "args": vars(args)}
    source = load_cached(args.source)
    if args.gpu:
        results["gpu"] = part_gpu(source, args)
    elif args.host_breakdown:
        results["host_breakdown_cpu_ms_per_pair"] = part_host_breakdown(source, args)
    else:
        parts = [x for x in args.parts.split(",") if x]
        jpegs = None
        if args.jpeg_images and {"pipeline", "jpeg"} & set(parts):
            t0 = time.perf_counter()
            jpegs = synthetic_jpegs(source, args.jpeg_images, args.jpeg_height, args.jpeg_width, args.jpeg_noise,
                                    args.jpeg_quality)
            print(f"# {len(jpegs)} synthetic JPEGs encoded in {time.perf_counter() - t0:.1f}s", flush=True)
        for part in parts:
            t0 = time.perf_counter()
            print(f"\n## {part}", flush=True)
            if part == "pipeline":
                results[part] = part_pipeline(source, jpegs, args)
            elif part == "jpeg":
                if jpegs is not None:
                    results[part] = part_jpeg(jpegs, args)
            elif part == "share":
                results[part] = part_share(source, args)
            elif part == "finish_breakdown":
                results[part] = part_finish_breakdown(source, args)
            elif part == "train_main":
                results[part] = part_train_main(args)
            else:
                raise SystemExit(f"unknown part {part!r}")
            print(f"# {part}: {time.perf_counter() - t0:.0f}s; loadavg "
                  f"{tuple(round(x, 2) for x in os.getloadavg())}", flush=True)
            gc.collect()
    info["loadavg_end"] = os.getloadavg()
    info["wall_seconds"] = time.perf_counter() - t_start
    print(f"# total {info['wall_seconds']:.0f}s; loadavg at the end: {tuple(round(x, 2) for x in info['loadavg_end'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
