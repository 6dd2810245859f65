"""Pairs/s of one pretraining step: AugSelf overhead per method, XLA (jit_compile) and mixed precision.

Every configuration is a model built as train_main builds it (``augself_tf.training.loop``: strategy scope,
``build_all``, batch-scaled SGD + cosine, ``strategy.run`` inside a ``tf.function`` with
``jit_compile=cfg.jit_compile or None``), fed one synthetic batch held in memory (no input pipeline). After
warm-up the configurations are timed in interleaved rounds (one step each per round, order reversed every
other round); figures are medians over rounds, and the AugSelf overhead is the median over rounds of the
per-round ratio with/without (the two steps of a round run seconds apart, so a shared machine's load
drift cancels out).

    python -m bench.bench_train_step                           # committed CPU figures: 96 px, batch 32
    python -m bench.bench_train_step --image_size=96 --batch_size=256                 # GPU, full scale
    python -m bench.bench_train_step --methods=moco --mixed_precision=float16 --compare_method=moco
    python -m bench.bench_train_step --no-jit --mixed_precision=none --repeats=3      # AugSelf overhead only
    python -m bench.bench_train_step --jit_per_method --no-without_augself --mixed_precision=none \
        --methods=simsiam,moco,byol,simclr,swav,supervised,looc        # XLA vs not, per method (§2)

A configuration that fails to build or run (e.g. XLA under a multi-device MirroredStrategy) is reported as
FAILED with the error instead of stopping the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback

from augself_tf.augment import parse_augself
from augself_tf.runtime.strategy import make_strategy, preferred_mixed_precision
from bench import common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default="simsiam,moco", help="methods timed with and without AugSelf")
    p.add_argument("--augself", default="crop,color", help="the AugSelf set of the 'with' configurations")
    p.add_argument("--backbone", default="resnet18")
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--image_size", type=int, default=96)
    p.add_argument("--batch_size", type=int, default=32, help="GLOBAL batch (pairs) of one step")
    p.add_argument("--compare_method", default="simsiam", help="method (+AugSelf) of the jit / precision runs")
    p.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True,
                   help="also time jit_compile=True (XLA)")
    p.add_argument("--jit_per_method", action="store_true",
                   help="time every --methods' +AugSelf step with jit_compile=True too, and its ratio to without")
    p.add_argument("--without_augself", action=argparse.BooleanOptionalAction, default=True,
                   help="also time every method without AugSelf (the AugSelf overhead)")
    p.add_argument("--mixed_precision", default="auto", choices=["auto", "none", "bfloat16", "float16"],
                   help="also time this mixed-precision policy (auto: bfloat16, float16 on GPUs without "
                        "it)")
    p.add_argument("--strategy", default="one_device", choices=["auto", "one_device", "mirrored"],
                   help="as train_main's --strategy (mirrored over --cpu_replicas logical CPUs without GPUs)")
    p.add_argument("--cpu_replicas", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per configuration (the first traces)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (one step per configuration each)")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)

    strategy = make_strategy(args.strategy, args.cpu_replicas)
    info = common.machine_info()
    common.print_machine(info)
    print(f"# strategy {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)", flush=True)
    augself = parse_augself(args.augself)
    base = common.StepSpec(backbone=args.backbone, width=args.width, image_size=args.image_size,
                           batch_size=args.batch_size)
    specs: dict[str, common.StepSpec] = {}
    for method in [m for m in args.methods.split(",") if m]:
        if args.without_augself:
            specs[f"{method}"] = dataclasses.replace(base, method=method, augself=())
        specs[f"{method}+augself"] = dataclasses.replace(base, method=method, augself=augself)
        if args.jit_per_method:
            specs[f"{method}+augself jit"] = dataclasses.replace(base, method=method, augself=augself,
                                                                 jit_compile=True)
    reference = dataclasses.replace(base, method=args.compare_method, augself=augself)
    ref_key = f"{args.compare_method}+augself"
    specs.setdefault(ref_key, reference)
    if args.jit:
        specs[f"{ref_key} jit"] = dataclasses.replace(reference, jit_compile=True)
    mp = args.mixed_precision
    if mp == "auto":
        mp = preferred_mixed_precision()
    if mp != "none":
        specs[f"{ref_key} {mp}"] = dataclasses.replace(reference, mixed_precision=mp)

    steps, failed = {}, {}
    for key, spec in specs.items():
        t0 = time.perf_counter()
        try:
            step = common.TrainStep(spec, strategy)
            for _ in range(args.warmup):
                step.run()
            steps[key] = step
            print(f"# built + warm-up {spec.label}: {time.perf_counter() - t0:.1f}s", flush=True)
        except Exception as err:  # report it and go on with the other configurations
            failed[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            print(f"# FAILED {spec.label}: {failed[key]}", flush=True)
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc()

    times = common.interleaved_steps({k: s.run for k, s in steps.items()}, warmup=0, repeats=args.repeats,
                                     log=False)
    summary = {k: common.summarize(v) for k, v in times.items()}

    print(f"\n{'configuration':<76} {'s/step':>7} {'pairs/s':>8} {'[min..max]':>13} {'pairs/CPU-s':>11} "
          f"{'cores':>5}")
    for key, s in summary.items():
        rng = f"[{s['pairs_per_sec_min']:.1f}..{s['pairs_per_sec_max']:.1f}]"
        print(f"{specs[key].label:<76} {s['step_seconds']:7.2f} {s['pairs_per_sec']:8.1f} {rng:>13} "
              f"{s['pairs_per_cpu_sec']:11.1f} {s['cores_used']:5.2f}")
    for key, msg in failed.items():
        print(f"{specs[key].label:<76} FAILED  {msg}")

    ratios: dict[str, dict] = {}

    def paired(a: str, b: str) -> dict:
        """Median over rounds of time(a)/time(b), wall and CPU."""
        ta, tb = times[a], times[b]
        return {
            "wall": common.median([x.wall / y.wall for x, y in zip(ta, tb, strict=True)]),
            "cpu": common.median([x.cpu / y.cpu for x, y in zip(ta, tb, strict=True)]),
        }

    print("\nratios (median over rounds of the per-round step-time ratio):")
    for method in [m for m in args.methods.split(",") if m]:
        if method in times and f"{method}+augself" in times:
            r = paired(f"{method}+augself", method)
            ratios[f"augself overhead {method}"] = r
            print(f"  AugSelf{{{','.join(augself)}}} overhead, {method}: {100 * (r['wall'] - 1):+.1f}% wall, "
                  f"{100 * (r['cpu'] - 1):+.1f}% CPU time  (target <= 5%)")
    for method in [m for m in args.methods.split(",") if m] if args.jit_per_method else []:
        jit, plain = f"{method}+augself jit", f"{method}+augself"
        if jit in times and plain in times and jit != f"{ref_key} jit":
            r = paired(jit, plain)
            ratios[jit] = r
            print(f"  {jit} vs no-jit: step time x{r['wall']:.2f} wall, x{r['cpu']:.2f} CPU "
                  f"({'faster' if r['wall'] < 1 else 'slower'})")
    for key in specs:
        if key != ref_key and key.startswith(ref_key + " ") and key in times and ref_key in times:
            r = paired(key, ref_key)
            ratios[key] = r
            print(f"  {key} vs float32 no-jit: step time x{r['wall']:.2f} wall, x{r['cpu']:.2f} CPU "
                  f"({'faster' if r['wall'] < 1 else 'slower'})")
    info["loadavg_end"] = os.getloadavg()
    print(f"# loadavg at the end: {tuple(round(x, 2) for x in info['loadavg_end'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "summary": summary, "ratios": ratios,
                       "failed": failed}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
