"""Host allocator: train_main with TensorFlow's malloc CPU allocator against its BFC pool (docs/benchmarks.md §5.8).

The entry points make the BFC pool the default (``augself_tf.startup.pool_host_memory``); this times the choice,
and two more settings of the process's environment (``--variants``): ``bfc+glibc`` also keeps glibc's malloc from
handing large blocks back to the kernel (``GLIBC_TUNABLES``: no mmap, no trim; Eigen's own buffers come from
malloc), ``bfc+onednn`` turns oneDNN on where TensorFlow leaves it off (CPUs without AVX-512).
Each round runs ``train_main.py`` once per variant (order reversed every other round; the rest of the environment
is this process's) on the same flags and seed, and reads:

- seconds per step: TensorBoard wall time between the logged steps after the first (which traces);
- per step, between the first and the last progress line: user and system CPU seconds, minor page faults;
- peak resident memory;
- whether each variant's ``loss/total`` values are bit-identical to the first variant's (the allocators' should
  be: only where memory comes from changes; oneDNN's kernels round differently).

    python -m bench.bench_host_allocator --json /tmp/host_allocator.json
    python -m bench.bench_host_allocator --rounds=3 --steps=40 \\
        --train_flags="--dataset=folder:../shared/data/tiny-imagenet-mini --split=train --condition=crop,color"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile

from augself_tf.runtime import tensorboard
from bench import common
from bench.cpu_step_stats import fmt, spread
from bench.cpu_step_train_main import run_train_main

GLIBC_KEEP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
VARIANTS = {
    "malloc": {"TF_CPU_ALLOCATOR_USE_BFC": "false"},
    "bfc": {"TF_CPU_ALLOCATOR_USE_BFC": "true"},
    "bfc+glibc": {"TF_CPU_ALLOCATOR_USE_BFC": "true", "GLIBC_TUNABLES": GLIBC_KEEP},
    "bfc+onednn": {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_ENABLE_ONEDNN_OPTS": "1"},
}
# The reproduction's step (ResNet-18 width 0.25, 64 px, batch 128) on the embedded data, which needs no download.
DEFAULT_FLAGS = ("--method=simsiam --augself=crop,color --backbone=resnet18 --width=0.25 --image_size=64 "
                 "--batch_size=128 --seed=0")


def one_run(flags: list[str], variant: str, steps: int, log_every: int) -> dict:
    """One train_main run in ``variant``'s environment: its rates, counters per step and loss values."""
    with tempfile.TemporaryDirectory(prefix="alloc_") as tmp:
        model_dir = os.path.join(tmp, "run")
        run = run_train_main([*flags, f"--max_steps={steps}", f"--log_every={log_every}", "--monitor=none",
                              "--noexport"], model_dir, env=VARIANTS[variant])
        events = tensorboard.read_scalars(os.path.join(model_dir, "tensorboard"), ["loss/total"]).get("loss/total", [])
    events = sorted(events, key=lambda e: e.step)
    if len(events) < 2 or len(run["counters_at"]) < 2:
        raise RuntimeError(f"{variant}: train_main logged too little to time; raise --steps")
    first, last = min(run["counters_at"]), max(run["counters_at"])
    a, b = run["counters_at"][first], run["counters_at"][last]
    n = last - first
    return {
        "seconds_per_step": (events[-1].wall_time - events[0].wall_time) / (events[-1].step - events[0].step),
        "user_s_per_step": (b["user_s"] - a["user_s"]) / n,
        "system_s_per_step": (b["system_s"] - a["system_s"]) / n,
        "page_faults_per_step": (b["page_faults"] - a["page_faults"]) / n,
        "peak_rss_gib": b["peak_rss_gib"],
        "losses": [(e.step, e.value) for e in events],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train_flags", default=DEFAULT_FLAGS, help="train_main flags of the timed run (shell words)")
    p.add_argument("--steps", type=int, default=30, help="steps per run (the first logged one is not timed)")
    p.add_argument("--log_every", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", default="malloc,bfc", help=f"comma-separated, from {', '.join(VARIANTS)}; "
                   "ratios are to the first")
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or len(names) < 2:
        p.error(f"--variants: {','.join(unknown) or args.variants} (allowed: two or more of {', '.join(VARIANTS)})")
    info = common.machine_info()
    common.print_machine(info)
    flags = shlex.split(args.train_flags)
    runs: dict[str, list[dict]] = {k: [] for k in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            print(f"# round {r + 1}/{args.rounds}: {name}", flush=True)
            res = one_run(flags, name, args.steps, args.log_every)
            runs[name].append(res)
            print(f"#   {name}: {res['seconds_per_step']:.3f} s/step, system {res['system_s_per_step']:.3f} "
                  f"user {res['user_s_per_step']:.3f} CPU s/step, {res['page_faults_per_step']:.0f} page faults/step, "
                  f"peak {res['peak_rss_gib']:.2f} GiB", flush=True)
    keys = ("seconds_per_step", "user_s_per_step", "system_s_per_step", "page_faults_per_step", "peak_rss_gib")
    summary = {k: {key: spread([x[key] for x in v]) for key in keys} for k, v in runs.items()}
    first = names[0]
    speedup = {k: spread([a["seconds_per_step"] / b["seconds_per_step"] for a, b in zip(runs[first], v, strict=True)])
               for k, v in runs.items() if k != first}
    identical = {k: all(a["losses"] == b["losses"] for a, b in zip(runs[first], v, strict=True))
                 for k, v in runs.items() if k != first}
    print("\n| variant | s/step | user CPU s/step | system CPU s/step | page faults/step | peak RSS GiB |\n"
          "|---|---|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | " + " | ".join(fmt(s[key], 0 if key == "page_faults_per_step" else 3) for key in keys)
              + " |")
    for k in speedup:
        print(f"{first} s/step / {k} s/step: {fmt(speedup[k])}; loss/total bit-identical to {first}'s: {identical[k]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "flags": flags, "steps": args.steps, "rounds": args.rounds,
                       "summary": summary, "speedup": speedup, "losses_identical": identical,
                       "runs": {k: [{key: x[key] for key in keys} for x in v] for k, v in runs.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
