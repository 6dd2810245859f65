"""bench_device_stage.py's parts inside the training step: finish_views' share of the step (part 2), where
finish_views' time goes (``finish_breakdown``), and the end-to-end train_main.py rate in both modes (part 3)."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig, finish_views, ops, registry
from augself_tf.augment.photometric import decode_color_omega
from augself_tf.augment.steps import DEVICE
from augself_tf.runtime.tensorboard import last_per_step, read_scalars
from augself_tf.training.distributed_step import make_distributed_step
from bench import common
from bench.device_stage_harness import MODES, finish_views_fn, one_batch, paired, raw, timed, with_select_jitter

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


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
            "step, uint8 device-mode batch, select jitter (former default)":
                with_select_jitter(lambda: select_step.run(dev_batch)),
            "finish_views alone, select jitter (former default)":
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
        "  color: select (all 4 at each step; on GPU/TPU and under XLA)": (
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
