"""Pairs/s of the two-view pretraining input pipeline vs what one training step consumes, on this machine.

Pipeline: ``make_pair_dataset`` (cached source, batch 256, after warm-up) over real images upsampled to
the view size, in two variants: ``full`` (the paper's pipeline: crop, flip, colour jitter, grayscale,
blur) and ``geometric`` (crop + flip only: jitter/grayscale/blur probabilities 0), whose difference is
the cost of the per-pixel photometric ops. Step: one ResNet-18 (width 1.0) SimSiam+AugSelf{crop,color}
training step built as train_main builds it, on a synthetic batch held in memory, at the same view size.
Also the README's default CPU run: ``shapes`` at 32 px vs resnet18_cifar width 0.25 MoCo+AugSelf{crop,color}
batch 256, alone and end to end (pipeline feeding the step, as the training loop does).

Every configuration is measured in rounds that alternate the configurations (median over rounds); each
measurement rebuilds its dataset so that no idle iterator keeps filling buffers in the background. Besides
wall-clock pairs/s we report pairs per CPU-second (process CPU time, all threads): the throughput of one
fully used core, which is what scales to an N-core input host and is far less sensitive to other jobs on a
shared machine.

    python -m bench.bench_pipeline                      # the committed figures (docs/benchmarks.md), ~8 min
    python -m bench.bench_pipeline --sizes=96 --repeats=1 --skip_default_run   # quick look
    python -m bench.bench_pipeline --sources=stl10@train+unlabelled --sizes=96 --step_batch_size=256
    python -m bench.bench_pipeline --op_breakdown --sources=folder:/work/shared/data/tiny-imagenet-mini@all
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from bench import common

DEFAULT_SOURCES = (
    "folder:/work/shared/data/tiny-imagenet-mini@all,"
    "folder:/work/shared/data/cifar10-mini@train"
)


def short_name(spec: str) -> str:
    return os.path.basename(spec.rstrip("/")) if spec.startswith("folder:") else spec


def cached_source(spec: str, split: str) -> tf.data.Dataset:
    """The source decoded once into memory (what ``cache=True`` serves after its first epoch).

    Rebuilding a dataset per measurement then costs no decoding. Sources whose images differ in size fall
    back to the plain source (``make_pair_dataset(cache=True)`` caches it on the first epoch).
    """
    ds = load_source(spec, split)
    examples = list(ds.as_numpy_iterator())
    shapes = {ex["image"].shape for ex in examples}
    if len(shapes) != 1:
        return ds
    images = np.stack([ex["image"] for ex in examples])
    labels = np.array([ex["label"] for ex in examples], np.int64)
    return tf.data.Dataset.from_tensor_slices({"image": images, "label": labels})


def augment_config(size: int, variant: str) -> AugmentConfig:
    if variant == "full":
        return AugmentConfig(image_size=size)
    if variant == "geometric":
        return AugmentConfig(image_size=size, probabilities={"jitter_prob": 0.0, "gray_prob": 0.0, "blur_prob": 0.0})
    raise ValueError(f"unknown variant {variant!r}")


def pair_dataset(source: tf.data.Dataset, size: int, variant: str, batch_size: int, threads: int) -> tf.data.Dataset:
    ds = make_pair_dataset(source, augment_config(size, variant), seed=0, batch_size=batch_size, cache=True)
    if threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        options.threading.max_intra_op_parallelism = 1
        ds = ds.with_options(options)
    return ds


def time_pipeline(
    source: tf.data.Dataset, size: int, variant: str, batch_size: int, *, warmup: int, min_batches: int,
    min_seconds: float, threads: int,
) -> common.Timing:
    """Fresh dataset, `warmup` batches, then at least `min_batches` batches and `min_seconds` timed."""
    return common.drain(lambda: pair_dataset(source, size, variant, batch_size, threads), batch_size,
                        warmup=warmup, min_batches=min_batches, min_seconds=min_seconds)


def time_end_to_end(step: common.TrainStep, source: tf.data.Dataset, size: int, *, warmup: int,
                    steps: int) -> common.Timing:
    """The training loop's rate: next(iterator) then the step, the pipeline running concurrently."""
    it = iter(make_pair_dataset(source, AugmentConfig(image_size=size), seed=0,
                                batch_size=step.spec.batch_size, cache=True))
    for _ in range(warmup):
        step.run(next(it))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step.run(next(it))
    timing = common.Timing(time.perf_counter() - t0, time.process_time() - c0, steps * step.spec.batch_size)
    del it
    gc.collect()
    time.sleep(0.3)
    return timing


def op_breakdown(source: tf.data.Dataset, sizes: list[int], repeats: int, batch_size: int) -> dict:
    """CPU-ms per VIEW of each per-example op, applied to every view (probability 1) of 512 source images.

    Each line adds one op to the same fixed crop (the central 5/8 x 3/4 of the image, upsampled to S);
    the op's own cost is its line minus the "crop+resize" line. Timed like the pipeline (interleaved rounds,
    process CPU time), one configuration at a time.
    """
    from augself_tf.augment import augment_view, ops

    images = tf.stack([ex["image"] for ex in source.take(512)])
    h, w = int(images.shape[1]), int(images.shape[2])
    offset, extent = [h // 8, w // 8], [5 * h // 8, 3 * w // 4]
    factors, order = tf.constant([1.2, 0.8, 1.3, 0.05]), tf.constant([3, 1, 0, 2])
    results: dict[str, list[float]] = {}
    for size in sizes:
        kernel = AugmentConfig(image_size=size).blur_kernel_size

        def crop(x, size=size):
            return ops.crop_and_resize(ops.to_float_rgb(x), offset, extent, size)

        def crop_no_aa(x, size=size):
            x = ops.to_float_rgb(x)[offset[0]:offset[0] + extent[0], offset[1]:offset[1] + extent[1]]
            return tf.image.resize(x, [size, size], method="bilinear", antialias=False)

        def flip(x):
            x = crop(x)
            return tf.where(tf.constant(True), tf.reverse(x, [1]), x)

        def fixed_order(x):
            x = ops.adjust_hue(crop(x), factors[3])
            x = ops.adjust_contrast(x, factors[1])
            x = ops.adjust_brightness(x, factors[0])
            return ops.adjust_saturation(x, factors[2])

        fns = {
            "crop+resize (ops.crop_and_resize, antialias=True)": crop,
            "crop+resize, antialias=False": crop_no_aa,
            "+ flip (tf.where(flipped, reverse, x))": flip,
            "+ brightness": lambda x: ops.adjust_brightness(crop(x), factors[0]),
            "+ contrast": lambda x: ops.adjust_contrast(crop(x), factors[1]),
            "+ saturation": lambda x: ops.adjust_saturation(crop(x), factors[2]),
            "+ hue": lambda x: ops.adjust_hue(crop(x), factors[3]),
            "+ the 4 adjustments, fixed order": fixed_order,
            "+ ops.color_jitter (4 x tf.switch_case)": lambda x: ops.color_jitter(crop(x), factors, order),
            "+ grayscale": lambda x: ops.grayscale(crop(x)),
            f"+ gaussian_blur (k={kernel})": lambda x, k=kernel: ops.gaussian_blur(crop(x), 1.0, k),
            "augment_view (random draws, paper's probabilities)": lambda x, i, size=size: augment_view(
                x, tf.stack([i, tf.constant(7, tf.int64)]), AugmentConfig(image_size=size))[0],
        }
        for name in fns:
            results[f"{size}px {name}"] = []
        for r in range(repeats):
            for name, fn in fns.items() if r % 2 == 0 else list(fns.items())[::-1]:
                ds = tf.data.Dataset.from_tensor_slices(images).repeat().enumerate()
                if name.startswith("augment_view"):
                    ds = ds.map(lambda i, x, fn=fn: fn(x, i), num_parallel_calls=tf.data.AUTOTUNE)
                else:
                    ds = ds.map(lambda i, x, fn=fn: fn(x), num_parallel_calls=tf.data.AUTOTUNE)
                it = iter(ds.batch(batch_size).prefetch(1))
                next(it)
                n, t0, c0 = 0, time.perf_counter(), time.process_time()
                while n < 2 or time.perf_counter() - t0 < 1.5:
                    next(it)
                    n += 1
                results[f"{size}px {name}"].append(1e3 * (time.process_time() - c0) / (n * batch_size))
                del it
                gc.collect()
                time.sleep(0.2)
    print(f"\n{'per-view op cost (CPU-ms per view, median over rounds)':<78} {'CPU-ms':>7} {'[min..max]':>15}")
    summary = {}
    for name, xs in results.items():
        summary[name] = common.median(xs)
        print(f"{name:<78} {summary[name]:7.3f} {f'[{min(xs):.3f}..{max(xs):.3f}]':>15}")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sources", default=DEFAULT_SOURCES, help="comma-separated SPEC@SPLIT")
    p.add_argument("--sizes", default="96,224", help="view sizes (px)")
    p.add_argument("--variants", default="full,geometric", help="full and/or geometric (no photometric ops)")
    p.add_argument("--geometric_sources", default="first",
                   help="'first' (geometric variant on the first source only, to save time) or 'all'")
    p.add_argument("--batch_size", type=int, default=256, help="pipeline batch (pairs)")
    p.add_argument("--threads", type=int, default=0, help="tf.data private threadpool size (0 = all cores)")
    p.add_argument("--repeats", type=int, default=3, help="rounds over all configurations (median over them)")
    p.add_argument("--warmup_batches", type=int, default=1)
    p.add_argument("--min_batches", type=int, default=2)
    p.add_argument("--min_seconds", type=float, default=4.0)
    p.add_argument("--step_method", default="simsiam")
    p.add_argument("--step_backbone", default="resnet18")
    p.add_argument("--step_width", type=float, default=1.0)
    p.add_argument("--step_batch_size", type=int, default=32, help="batch of the training step (pairs)")
    p.add_argument("--step_per_round", type=int, default=1, help="timed steps per configuration per round")
    p.add_argument("--skip_step", action="store_true", help="pipeline only")
    p.add_argument("--skip_default_run", action="store_true", help="skip the shapes@32 px README default")
    p.add_argument("--gpu_pairs_per_sec", type=float, default=1500.0,
                   help="assumed accelerator consumption at the first size, for the cores-needed estimate")
    p.add_argument("--op_breakdown", action="store_true",
                   help="instead: CPU cost per view of each augmentation op (first source, --sizes)")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)

    info = common.machine_info()
    common.print_machine(info)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    sources = []
    for item in args.sources.split(","):
        spec, _, split = item.rpartition("@")
        if not spec:
            raise SystemExit(f"--sources entries must be SPEC@SPLIT, got {item!r}")
        t0 = time.perf_counter()
        sources.append((short_name(spec), spec, split, cached_source(spec, split)))
        print(f"# source {spec}@{split}: decoded into memory in {time.perf_counter() - t0:.1f}s", flush=True)
    if args.op_breakdown:
        summary = op_breakdown(sources[0][3], sizes, args.repeats, args.batch_size)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": info, "args": vars(args), "op_breakdown_cpu_ms_per_view": summary}, f,
                          indent=1)
        return 0

    # ------------------------------------------------------------------ configurations
    pipes: dict[str, tuple] = {}  # label -> (source ds, size, variant)
    for size in sizes:
        for variant in variants:
            for i, (name, _, split, ds) in enumerate(sources):
                if variant == "geometric" and args.geometric_sources == "first" and i > 0:
                    continue
                pipes[f"pipeline {name}@{split} {size}px {variant}"] = (ds, size, variant)
    steps: dict[str, common.TrainStep] = {}
    if not args.skip_step:
        for size in sizes:
            spec = common.StepSpec(method=args.step_method, augself=("crop", "color"), backbone=args.step_backbone,
                                   width=args.step_width, image_size=size, batch_size=args.step_batch_size)
            steps[f"step {spec.label}"] = common.TrainStep(spec)
    default_source = None
    if not args.skip_default_run:
        default_source = load_source("shapes", "train")
        pipes["pipeline shapes@train 32px full (README default)"] = (default_source, 32, "full")
        spec = common.StepSpec(method="moco", augself=("crop", "color"), backbone="resnet18_cifar", width=0.25,
                               image_size=32, batch_size=256)
        steps[f"step {spec.label} (README default)"] = common.TrainStep(spec)

    # warm-up (trace + first steps) of every step, outside the timed rounds
    for name, step in steps.items():
        t0 = time.perf_counter()
        step.run()
        step.run()
        print(f"# warm-up {name}: {time.perf_counter() - t0:.1f}s", flush=True)

    results: dict[str, list[common.Timing]] = {k: [] for k in [*pipes, *steps]}
    e2e_name = "end-to-end README default (pipeline feeding the step)"
    if default_source is not None:
        results[e2e_name] = []
    for r in range(args.repeats):
        t_round = time.perf_counter()
        order = list(pipes) if r % 2 == 0 else list(pipes)[::-1]
        for name in order:
            ds, size, variant = pipes[name]
            results[name].append(time_pipeline(ds, size, variant, args.batch_size, warmup=args.warmup_batches,
                                               min_batches=args.min_batches, min_seconds=args.min_seconds,
                                               threads=args.threads))
        for name in list(steps) if r % 2 == 0 else list(steps)[::-1]:
            for _ in range(args.step_per_round):
                results[name].append(steps[name].run())
        if default_source is not None:
            step = steps[next(k for k in steps if k.endswith("(README default)"))]
            results[e2e_name].append(time_end_to_end(step, default_source, 32, warmup=1, steps=3))
        print(f"# round {r + 1}/{args.repeats}: {time.perf_counter() - t_round:.0f}s", flush=True)

    # ------------------------------------------------------------------ report
    summary = {name: common.summarize(ts) for name, ts in results.items()}
    print(f"\n{'configuration':<82} {'pairs/s':>8} {'[min..max]':>15} {'pairs/CPU-s':>11} {'cores':>5}")
    for name, s in summary.items():
        rng = f"[{s['pairs_per_sec_min']:.1f}..{s['pairs_per_sec_max']:.1f}]"
        print(f"{name:<82} {s['pairs_per_sec']:8.1f} {rng:>15} {s['pairs_per_cpu_sec']:11.1f} "
              f"{s['cores_used']:5.2f}")

    ratios = {}
    print("\nratios (pipeline / step, same size; wall pairs/s and per CPU-second):")
    for size in sizes:
        step_name = next((k for k in steps if f" {size}px" in k and "README" not in k), None)
        for name in pipes:
            if f" {size}px " not in name or step_name is None:
                continue
            w = summary[name]["pairs_per_sec"] / summary[step_name]["pairs_per_sec"]
            c = summary[name]["pairs_per_cpu_sec"] / summary[step_name]["pairs_per_cpu_sec"]
            ratios[f"{name} / {step_name}"] = {"wall": w, "cpu": c}
            print(f"  {name:<58} / step {size}px: {w:6.1f}x wall, {c:6.1f}x per CPU-s")
        full = next((k for k in pipes if f" {size}px full" in k and "README" not in k), None)
        geom = next((k for k in pipes if f" {size}px geometric" in k), None)
        if full and geom:
            pf, pg = summary[full]["pairs_per_cpu_sec"], summary[geom]["pairs_per_cpu_sec"]
            share = 1.0 - pf / pg  # (1/pf - 1/pg) / (1/pf)
            ratios[f"photometric share {size}px"] = share
            print(f"  photometric ops = {100 * share:.0f}% of the pipeline's CPU time at {size}px "
                  f"({1e3 / pf:.2f} vs {1e3 / pg:.2f} CPU-ms per pair, full vs geometric)")
    if default_source is not None:
        pipe = summary["pipeline shapes@train 32px full (README default)"]["pairs_per_sec"]
        step_name = next(k for k in steps if k.endswith("(README default)"))
        alone = summary[step_name]["pairs_per_sec"]
        e2e = summary[e2e_name]["pairs_per_sec"]
        serial = 1.0 / (1.0 / pipe + 1.0 / alone)
        ratios["README default pipeline / step"] = pipe / alone
        print(f"  README default: pipeline {pipe:.0f} / step {alone:.0f} pairs/s = {pipe / alone:.1f}x; end to end "
              f"{e2e:.0f} pairs/s = {100 * e2e / alone:.0f}% of the step alone (no overlap at all would give "
              f"{serial:.0f})")
    if sizes and not args.skip_step:
        size = sizes[0]
        for variant in variants:
            name = next((k for k in pipes if f" {size}px {variant}" in k), None)
            if name:
                per_core = summary[name]["pairs_per_cpu_sec"]
                need = 3 * args.gpu_pairs_per_sec / per_core
                ratios[f"cores for 3x {args.gpu_pairs_per_sec:.0f} pairs/s {size}px {variant}"] = need
                print(f"  to feed 3 x {args.gpu_pairs_per_sec:.0f} pairs/s at {size}px with the {variant} pipeline: "
                      f"~{need:.0f} cores at {per_core:.0f} pairs/CPU-s (linear scaling assumed)")
    info["loadavg_end"] = os.getloadavg()
    print(f"# loadavg at the end: {tuple(round(x, 2) for x in info['loadavg_end'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "summary": summary, "ratios": ratios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
