"""The wall-time table of a report: every arm's training and evaluation time, how much of the training was steps and
monitors (entries that record it), seconds per step, machines and commits.

Both suites' reports end with it (reproduce/main_report.py, reproduce/looc_report.py); machines are lettered in
the order they first appear, with a legend below the table.
"""

from __future__ import annotations

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
    return "\n".join(lines), legend

