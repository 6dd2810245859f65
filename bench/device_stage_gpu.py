"""bench_device_stage.py's GPU suite (``--gpu``, part 4): training-step pairs/s on one batch held on the device
in both photometric modes, fp32 and mixed precision, XLA off and on; the device-mode step and finish_views alone
with each colour-jitter form (``--gpu_jitter``); the input-bound fraction against the host pipeline's rate."""

from __future__ import annotations

import copy
import gc
import os
import time
import traceback

import tensorflow as tf

from augself_tf.augment import AugmentConfig, ops
from augself_tf.runtime.strategy import make_strategy, preferred_mixed_precision
from augself_tf.training.distributed_step import make_distributed_step
from bench import common
from bench.device_stage_harness import (
    MODES,
    finish_views_fn,
    interleaved_pipelines,
    on_device,
    one_batch,
    pair_factory,
    timed,
)

# ----------------------------------------------------------------------------------------------- 4. GPU suite


def with_jitter(form: str, fn):
    """fn, called (and so traced, the first time) with the colour jitter's ``form`` forced (``ops.jitter_method``)."""

    def run():
        with ops.jitter_method(form):
            return fn()

    return run


def part_gpu(source, args) -> dict:
    strategy = make_strategy("one_device")
    device = strategy.extended.worker_devices[0]
    mp = args.gpu_mixed_precision
    if mp == "auto":
        mp = preferred_mixed_precision()
    jitter_forms = [f for f in args.gpu_jitter.split(",") if f and f != "auto"]
    print(f"# GPU suite on {device}; mixed precision = {mp}; the colour jitter builds "
          f"{ops.resolve_jitter_method()!r} here, also timed: {', '.join(jitter_forms) or 'nothing else'}", flush=True)
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
                    for form in jitter_forms:  # the same model, one more traced step per form, device mode
                        other = copy.copy(step)  # shallow: shares the model, the optimizer and the strategy
                        other._step = make_distributed_step(strategy, step.model, xla)
                        run = with_jitter(form, lambda s=other, b=batches["device"]: s.run(b))
                        for _ in range(args.gpu_warmup):
                            run()
                        fns[f"{key} step device jitter={form}"] = run
                    print(f"# built + warm-up {spec.label}: {time.perf_counter() - t0:.1f}s", flush=True)
                except Exception as err:  # report it and go on (e.g. XLA unsupported somewhere)
                    failed[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                    print(f"# FAILED {spec.label}: {failed[key]}", flush=True)
                    if os.environ.get("BENCH_TRACEBACK"):
                        traceback.print_exc()
        for xla in (False, True):
            for form in ("auto", *jitter_forms):
                name = f"finish_views{' xla' if xla else ''}{'' if form == 'auto' else f' jitter={form}'}"
                try:
                    with tf.device(device):
                        fv = with_jitter(form, finish_views_fn(batches["device"], cfg, jit_compile=xla))
                        for _ in range(args.gpu_warmup):
                            fv()
                    fns[name] = timed(fv, batch)
                except Exception as err:
                    failed[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
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
        if jitter_forms:
            print(f"device-mode step pairs/s by colour-jitter form (auto = {ops.resolve_jitter_method()!r} here)")
            print(f"{'precision':<16} " + " ".join(f"{f:>12}" for f in ("auto", *jitter_forms)))
            for key in rows:
                rates = [rows[key]["step_pairs_per_sec"]["device"]] + [
                    steps[k]["pairs_per_sec"] if (k := f"{key} step device jitter={f}") in steps else float("nan")
                    for f in jitter_forms]
                rows[key]["device_step_pairs_per_sec_by_jitter"] = dict(zip(("auto", *jitter_forms), rates,
                                                                            strict=True))
                print(f"{key:<16} " + " ".join(f"{r:12.1f}" for r in rates))
        for xla in ("", " xla"):
            for form in ("", *(f" jitter={f}" for f in jitter_forms)):
                name = f"finish_views{xla}{form}"
                if name in steps:
                    ms = 1e3 * steps[name]["step_seconds"]
                    ref = steps.get(f"float32{xla} step host")
                    share = (f", {100 * steps[name]['step_seconds'] / ref['step_seconds']:.1f}% of the float32{xla} "
                             "step") if ref else ""
                    print(f"{name:<32} {ms:.2f} ms per batch of {batch}{share}")
        out[f"{backbone}@{size}:{batch}"] = {"steps": steps, "pipelines": pipes, "rows": rows, "failed": failed}
        del fns, batches
        gc.collect()
    return out
