"""bench_device_stage.py's host-side parts: host CPU per pair of the pair pipeline in both photometric modes
(part 1), the JPEG decode strategies (1b), and where device mode's host CPU goes (``--host_breakdown``)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig, augment_view, augment_view_for_device, ops, registry
from augself_tf.augment.crop_sampler import crop_box
from augself_tf.augment.steps import DEVICE, HOST
from augself_tf.data.pretrain import example_seed
from bench import common
from bench.device_stage_harness import (
    MODES,
    interleaved_pipelines,
    jpeg_source,
    pair_factory,
    paired,
    print_rows,
    raw,
    with_threads,
)

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
