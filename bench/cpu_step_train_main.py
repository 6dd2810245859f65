"""bench_cpu_step.py parts 3 and 4, which run train_main.py in a subprocess: ``losses`` (float32 against
bfloat16 loss curves from TensorBoard, CSV and picture) and ``e2e`` (train_main's pairs/s against its step
alone and its input pipeline alone)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import tempfile
import time

from augself_tf.runtime import tensorboard
from bench import common
from bench.cpu_step_stats import fmt, spread

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------ TensorBoard


def read_curves(tb_dir: str, tags: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of scalar summaries in a TensorBoard directory, sorted by step (the library's reader)."""
    events = tensorboard.read_scalars(tb_dir, tags)
    return {t: tensorboard.last_per_step(events.get(t, [])) for t in tags}


PROGRESS = re.compile(r"\b(\d+)/(\d+) \(\d+%\)")


def run_train_main(flags: list[str], model_dir: str, env: dict[str, str] | None = None) -> dict:
    """train_main.py as a subprocess (``env`` added to this process's environment); the process counters
    (:func:`proc_counters`) are sampled at every progress line."""
    cmd = [sys.executable, os.path.join(REPO, "train_main.py"), f"--model_dir={model_dir}", *flags]
    print(f"#   {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    counters_at: dict[int, dict[str, float]] = {}
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line])[-60:]
        m = PROGRESS.search(line)
        if m:
            counters_at[int(m.group(1))] = {"wall_s": time.perf_counter() - t0, **proc_counters(proc.pid)}
    rc = proc.wait()
    if rc:
        print("".join(tail))
        raise RuntimeError(f"train_main.py failed ({rc})")
    cpu_at = {step: (c["wall_s"], c["user_s"] + c["system_s"]) for step, c in counters_at.items()}
    return {"wall_s": time.perf_counter() - t0, "cpu_at": cpu_at, "counters_at": counters_at, "tail": tail}


def proc_counters(pid: int) -> dict[str, float]:
    """A live process's user and system CPU seconds (all threads), minor page faults and peak resident memory
    (GiB); NaN where /proc cannot say."""
    out = {"user_s": float("nan"), "system_s": float("nan"), "page_faults": float("nan"),
           "peak_rss_gib": float("nan")}
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out.update(user_s=int(fields[11]) / CLOCK_TICKS, system_s=int(fields[12]) / CLOCK_TICKS,
                   page_faults=float(fields[7]))
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["peak_rss_gib"] = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return out


# ------------------------------------------------------------------------------------------------ 3. losses

LOSS_TAGS = ("loss/total", "loss/method", "loss/augself")


def part_losses(args) -> dict:
    runs = [("float32", []), ("bfloat16", ["--mixed_precision=bfloat16"])]
    if args.loss_baseline:  # a second float32 run: how much two float32 runs differ (thread-order round-off)
        runs.append(("float32 again", []))
    curves, walls = {}, {}
    with tempfile.TemporaryDirectory(prefix="bf16_losses_") as tmp:
        for i, (name, extra) in enumerate(runs):
            flags = [f"--max_steps={args.loss_steps}", "--monitor=none", "--log_every=1", "--noexport", *extra]
            run = run_train_main(flags, os.path.join(tmp, f"run{i}"))
            walls[name] = run["wall_s"]
            curves[name] = read_curves(os.path.join(tmp, f"run{i}", "tensorboard"), LOSS_TAGS)
            print(f"#   {name}: {run['wall_s']:.0f}s wall with start-up", flush=True)
    stats: dict[str, dict] = {}
    for other in [name for name, _ in runs[1:]]:
        for tag in LOSS_TAGS:
            a, b = dict(curves["float32"][tag]), dict(curves[other][tag])
            steps = sorted(set(a) & set(b))
            rel = [abs(b[s] - a[s]) / max(abs(a[s]), 1e-12) for s in steps]
            stats.setdefault(other, {})[tag] = {
                "steps": len(steps), "max_rel": max(rel), "mean_rel": sum(rel) / len(rel),
                "max_abs": max(abs(b[s] - a[s]) for s in steps), "first": (a[steps[0]], b[steps[0]]),
                "last": (a[steps[-1]], b[steps[-1]])}
    print(f"\n3. README default run, first {args.loss_steps} steps: float32 vs --mixed_precision=bfloat16 (wall "
          + " / ".join(f"{n} {w:.0f}s" for n, w in walls.items()) + " with start-up)")
    for other, per_tag in stats.items():
        for tag, s in per_tag.items():
            print(f"  {other} vs float32, {tag:<14} |diff| / |f32|: max {100 * s['max_rel']:.2f}%, mean "
                  f"{100 * s['mean_rel']:.3f}% over {s['steps']} steps; first {s['first'][0]:.4f}/{s['first'][1]:.4f},"
                  f" last {s['last'][0]:.4f}/{s['last'][1]:.4f}")
    if args.loss_csv:
        names = [name for name, _ in runs]
        with open(args.loss_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step"] + [f"{t} {n}" for t in LOSS_TAGS for n in names])
            for step in sorted(dict(curves["float32"]["loss/total"])):
                w.writerow([step] + [dict(curves[n][t]).get(step, "") for t in LOSS_TAGS for n in names])
        print(f"  curves: {args.loss_csv}")
    if args.plot:
        plot_losses(curves, stats["bfloat16"], args.plot)
        print(f"  picture: {args.plot}")
    return {"stats": stats, "wall_s": walls, "curves": curves}


def plot_losses(curves: dict, stats: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOSS_TAGS), figsize=(12, 3.2))
    for ax, tag in zip(axes, LOSS_TAGS, strict=True):
        for name, style in (("float32", {"color": "tab:blue", "lw": 1.6}),
                            ("bfloat16", {"color": "tab:orange", "lw": 1.0, "ls": "--"})):
            steps, values = zip(*curves[name][tag], strict=True)
            ax.plot(steps, values, label=name, **style)
        s = stats[tag]
        ax.set_title(f"{tag}\nrel. diff max {100 * s['max_rel']:.1f}%, mean {100 * s['mean_rel']:.2f}%", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("README default run (MoCo + AugSelf{crop,color}, shapes, 32 px, w0.125, b256): float32 vs bfloat16",
                 fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ 4. e2e


def e2e_flags(args, photometric: str) -> list[str]:
    return [f"--dataset={args.e2e_dataset}", f"--split={args.e2e_split}", "--method=simsiam",
            "--augself=crop,color", "--backbone=resnet18", f"--width={args.e2e_width}",
            f"--image_size={args.e2e_image_size}", f"--batch_size={args.e2e_batch}", f"--max_steps={args.e2e_steps}",
            "--monitor=none", "--noexport", f"--log_every={args.e2e_log_every}", f"--photometric={photometric}"]


def part_e2e(args) -> dict:
    from augself_tf.augment import AugmentConfig
    from augself_tf.data.pretrain import make_pair_dataset
    from augself_tf.data.sources import load_source

    spec = common.StepSpec(method="simsiam", augself=("crop", "color"), backbone="resnet18", width=args.e2e_width,
                           image_size=args.e2e_image_size, batch_size=args.e2e_batch)
    step = common.TrainStep(spec)
    for _ in range(args.warmup):
        step.run()
    dataset, split = args.e2e_dataset, args.e2e_split

    def pipeline():
        source = load_source(dataset, split)
        return make_pair_dataset(source, AugmentConfig(image_size=args.e2e_image_size), seed=0,
                                 batch_size=args.e2e_batch, photometric="host")

    results: dict[str, list[dict]] = {}
    modes = [m for m in ("host", "device") if m in args.e2e_modes]
    for r in range(args.e2e_rounds):
        order = ["step", "pipeline", *modes]
        for name in order if r % 2 == 0 else order[::-1]:
            print(f"# e2e round {r + 1}/{args.e2e_rounds}: {name}", flush=True)
            if name == "step":
                ts = [step.run() for _ in range(args.e2e_step_alone)]
                wall, cpu = sum(t.wall for t in ts), sum(t.cpu for t in ts)
                res = {"pairs_per_sec": len(ts) * spec.batch_size / wall,
                       "pairs_per_cpu_sec": len(ts) * spec.batch_size / cpu}
            elif name == "pipeline":
                t = common.drain(pipeline, args.e2e_batch, warmup=2, min_batches=args.e2e_pipeline_batches,
                                 min_seconds=0)
                res = {"pairs_per_sec": t.pairs_per_sec, "pairs_per_cpu_sec": t.pairs_per_cpu_sec}
            else:
                with tempfile.TemporaryDirectory(prefix=f"e2e_{name}_") as tmp:
                    run = run_train_main(e2e_flags(args, name), os.path.join(tmp, "run"))
                    rates = read_curves(os.path.join(tmp, "run", "tensorboard"), ("pairs_per_sec",))["pairs_per_sec"]
                steady = [v for s, v in rates if s > args.e2e_log_every]  # the first window holds tracing
                first, last = args.e2e_log_every, max(run["cpu_at"])
                (w0, c0), (w1, c1) = run["cpu_at"][first], run["cpu_at"][last]
                pairs = (last - first) * spec.batch_size
                res = {"pairs_per_sec": common.median(steady), "windows": rates,
                       "pairs_per_sec_progress": pairs / (w1 - w0), "pairs_per_cpu_sec": pairs / (c1 - c0),
                       "cores_used": (c1 - c0) / (w1 - w0), "wall_s": run["wall_s"]}
            results.setdefault(name, []).append(res)
            print(f"#   {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items() if isinstance(v, float)),
                  flush=True)
    summary = {k: {"pairs_per_sec": spread([x["pairs_per_sec"] for x in v]),
                   "pairs_per_cpu_sec": spread([x["pairs_per_cpu_sec"] for x in v])} for k, v in results.items()}
    ratios = {}
    for m in modes:
        ratios[f"train_main {m} / step"] = {
            key: spread([x[key] / y[key] for x, y in zip(results[m], results["step"], strict=True)])
            for key in ("pairs_per_sec", "pairs_per_cpu_sec")}
    step_cpu = summary["step"]["pairs_per_cpu_sec"]["median"]
    pipe_cpu = summary["pipeline"]["pairs_per_cpu_sec"]["median"]
    predicted = 1.0 / (1.0 / step_cpu + 1.0 / pipe_cpu)
    print(f"\n4. end to end: train_main.py {' '.join(e2e_flags(args, '<mode>'))}, {args.e2e_rounds} rounds")
    for k, s in summary.items():
        print(f"  {k:<10} pairs/s {fmt(s['pairs_per_sec'], 1)}  pairs/CPU-s {fmt(s['pairs_per_cpu_sec'], 1)}")
    for k, r in ratios.items():
        print(f"  {k}: pairs/s {fmt(r['pairs_per_sec'])}, pairs/CPU-s {fmt(r['pairs_per_cpu_sec'])}  (target >= 0.90)")
    print(f"  step + pipeline CPU per pair predicts {predicted:.1f} pairs/CPU-s = "
          f"{predicted / step_cpu:.2f} of the step alone: the pipeline's CPU cost if cores are the bottleneck")
    return {"summary": summary, "ratios": ratios, "runs": results,
            "predicted_pairs_per_cpu_sec": predicted}
