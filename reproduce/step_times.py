"""Seconds per step of every setting of a suite, timed back to back in one run: what a table's s/step compares.

An arm's own training rate is its wall time over a 15–40 minute run, on whatever else the machine did then, so
rows trained on different days (or beside a test suite) cannot be compared by it. ``--time_steps`` times one
arm of each setting (the seeds of a setting share its step) for ``steps`` steps, in ``rounds`` rounds that
alternate the order (A B C, then C B A, ...), and keeps every figure and their median per setting, with the
machine, the commit and the one-minute load average before each timing. Written to
``<ledger>/timings/<suite>.json`` (:func:`ledger.timings_path`: committed beside the entries, outside the entries'
folder level); the suite's report reads it with :func:`ledger.load_timings`.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

from reproduce import ledger, time_estimates
from reproduce.arm_settings import Arm, step_setting
from reproduce.provenance import git_info, machine_info
from reproduce.run_directory import Context

STEPS = 40
ROUNDS = 2


def measure(arms: Sequence[Arm], ctx: Context, suite: str, steps: int = STEPS,
            rounds: int = ROUNDS) -> dict:
    """Times every setting of ``arms`` (see the module docstring), writes and returns the record."""
    firsts: dict[str, Arm] = {}
    for arm in arms:
        firsts.setdefault(step_setting(arm), arm)
    order = list(firsts)
    figures: dict[str, list[dict]] = {name: [] for name in order}
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            load_1min = os.getloadavg()[0]
            ctx.log(f"timing {name}: round {r + 1}/{rounds}, {steps} steps (load average {load_1min:.2f})")
            rate, _ = time_estimates.timed_steps(firsts[name], ctx, steps, os.path.join(ctx.out_dir, "_timing", name))
            figures[name].append({"seconds_per_step": round(rate, 4), "load_before": round(load_1min, 2)})
            ctx.log(f"timing {name}: {rate:.3f} s/step")
    record = {
        "suite": suite or "main",
        "machine": machine_info(),
        "git": git_info(ctx.root),
        "steps": steps,
        "rounds": rounds,
        "settings": {name: {"median": round(statistics.median(f["seconds_per_step"] for f in figures[name]), 4),
                            "timings": figures[name]} for name in order},
    }
    ledger.write_json(ledger.timings_path(ctx.ledger_dir, suite), record)
    return record
