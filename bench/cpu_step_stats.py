"""The statistics and tables of bench_cpu_step.py: per-round spreads, paired ratios of interleaved timings,
the per-step table, and TensorFlow's intra-op thread count the PyTorch workers are matched to."""

from __future__ import annotations

import os

import tensorflow as tf

from bench import common


def spread(xs: list[float]) -> dict:
    """Median and min..max of per-round values."""
    return {"median": common.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s: dict, digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}..{s['max']:.{digits}f}]"


def paired(times: dict[str, list[common.Timing]], a: str, b: str) -> dict:
    """Per-round time(a)/time(b), wall and CPU: median and range."""
    ta, tb = times[a], times[b]
    return {"wall": spread([x.wall / y.wall for x, y in zip(ta, tb, strict=True)]),
            "cpu": spread([x.cpu / y.cpu for x, y in zip(ta, tb, strict=True)])}


def step_summary(times: dict[str, list[common.Timing]]) -> dict:
    """Per configuration: the spread of its seconds and CPU-seconds per step."""
    return {k: {"s_per_step": spread([t.wall for t in v]), "cpu_s_per_step": spread([t.cpu for t in v])}
            for k, v in times.items()}


def print_step_table(title: str, summary: dict, ratios: dict, label=lambda k: k, width: int = 32,
                     digits: int = 2) -> None:
    """The seconds (and CPU-seconds) per step of each configuration, then the paired ratios."""
    print(title)
    for k, s in summary.items():
        print(f"  {label(k):<{width}} {fmt(s['s_per_step'])} s  {fmt(s['cpu_s_per_step'])} CPU-s")
    for k, r in ratios.items():
        print(f"  ratio {k:<44} wall {fmt(r['wall'], digits)}, CPU {fmt(r['cpu'], digits)}")


def intra_op_threads() -> int:
    """TF's intra-op pool size (0 in the config means the default, one thread per core)."""
    return tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1



def merge_rounds(timings: list[common.Timing], per_round: int) -> list[common.Timing]:
    """One Timing per round (the mean of its `per_round` steps), so that ratios pair steps of one round."""
    out = []
    for i in range(0, len(timings), per_round):
        chunk = timings[i:i + per_round]
        out.append(common.Timing(sum(t.wall for t in chunk) / len(chunk), sum(t.cpu for t in chunk) / len(chunk),
                                 chunk[0].pairs))
    return out
