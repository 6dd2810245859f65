"""The wall-time table of a report: every arm's training and evaluation time, how much of the training was steps and
monitors (entries that record it), seconds per step, machines and commits; then where an arm's time goes, per arm
group (the arm without its seed) and machine: the median minutes of steps, monitors, the rest of the training
process and each evaluation call.

Both suites' reports end with it (reproduce/main_report.py, reproduce/looc_report.py); machines are lettered in
the order they first appear, with a legend below the table.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from reproduce.arm_settings import sort_key


def machine_label(machine: dict) -> str:
    """``2 cores (CPU model), Python x, TensorFlow y``: a machine of the legend."""
    return (f"{machine.get('cores')} cores ({machine.get('cpu')}), Python {machine.get('python')}, "
            f"TensorFlow {machine.get('tensorflow')}")


def commit_label(git: dict) -> str:
    """The commit's first 10 hex digits, ``-dirty`` when tracked files differed from it."""
    commit = (git.get("commit") or "unknown")[:10]
    return commit + ("-dirty" if git.get("dirty") else "")


def wall_table(entries: Sequence[dict]) -> tuple[str, list[str]]:
    """The wall time of every arm with its machines and commits; returns (table, machine legend lines)."""
    machines: list[str] = []
    lines = ["| arm | training (min) | of which steps / monitors | s/step | evaluation (min) | machine | commit |",
             "|---|---|---|---|---|---|---|"]
    for e in sorted(entries, key=sort_key):
        t = e["training"]
        labels = []
        for m in [s["machine"] for s in t["sessions"]] or [e["machine"]]:
            if machine_label(m) not in machines:
                machines.append(machine_label(m))
            letter = chr(ord("A") + machines.index(machine_label(m)))
            if letter not in labels:
                labels.append(letter)
        commits = []
        for g in [s["git"] for s in t["sessions"]] or [e["git"]]:
            if commit_label(g) not in commits:
                commits.append(commit_label(g))
        sps = t.get("seconds_per_step")
        split = (f"{t['step_seconds'] / 60:.1f} / {t['monitor_seconds'] / 60:.1f}" if "step_seconds" in t else "—")
        lines.append(f"| {e['arm']} | {t['seconds'] / 60:.1f} | {split} | {'—' if sps is None else f'{sps:.3g}'} | "
                     f"{e['evaluation']['seconds'] / 60:.1f} | {', '.join(labels)} | {', '.join(commits)} |")
    legend = [f"- {chr(ord('A') + i)}: {m}" for i, m in enumerate(machines)]
    split = time_split_table(entries, machines)
    return "\n".join(lines) + ("\n\n" + split if split else ""), legend


def time_split_table(entries: Sequence[dict], machines: Sequence[str]) -> str:
    """Where an arm's time goes: per arm group and machine (a letter of ``machines``), the median minutes over its
    entries that record the steps / monitors split; '' when none does. Entries trained over several sessions are
    left out (their machine is not one)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in sorted(entries, key=sort_key):
        t = e["training"]
        if "step_seconds" not in t or len(t["sessions"]) > 1:
            continue
        machine = t["sessions"][0]["machine"] if t["sessions"] else e["machine"]
        letter = chr(ord("A") + list(machines).index(machine_label(machine)))
        groups.setdefault((re.sub(r"-s\d+$", "", e["name"]), letter), []).append(e)
    if not groups:
        return ""

    def minutes(values: list[float]) -> str:
        return f"{statistics.median(values) / 60:.1f}"

    lines = ["Where an arm's time goes (median minutes over the arm group's seeds, per machine; \"rest\" is the "
             "training process's start-up, tracing, precise BN, checkpoints and export; each evaluation call is a "
             "process of its own):", "",
             "| arm group | machine | arms | steps | monitors | rest | evaluation calls | total |",
             "|---|---|---|---|---|---|---|---|"]
    for (group, letter), members in groups.items():
        ts = [e["training"] for e in members]
        calls: dict[str, list[float]] = {}
        for e in members:
            for name, call in e["evaluation"].get("calls", {}).items():
                calls.setdefault(name, []).append(call["seconds"])
        # A call that only some of the group's arms made says how many (an evaluation added after some had run).
        call_cell = ", ".join(f"{name} {minutes(v)}" + (f" ({len(v)} of {len(members)})" if len(v) < len(members)
                                                        else "") for name, v in calls.items()) or "—"
        lines.append(
            f"| {group} | {letter} | {len(members)} | {minutes([t['step_seconds'] for t in ts])} | "
            f"{minutes([t['monitor_seconds'] for t in ts])} | "
            f"{minutes([t['seconds'] - t['step_seconds'] - t['monitor_seconds'] for t in ts])} | {call_cell} | "
            f"{minutes([e['training']['seconds'] + e['evaluation']['seconds'] for e in members])} |")
    return "\n".join(lines)

