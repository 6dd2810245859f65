"""An arm's run directory: where it is, what it holds, who may write it, and what has been done of the arm.

Each arm owns a run directory ``<out>/<arm.train_id>`` (not committed) holding train_main's checkpoints,
TensorBoard events and SavedModel, the eval_main outputs, ``log.txt`` and ``state.json``: the training
sessions so far (machine, commit, wall time, steps) and the evaluation calls done. ``<run>/lock`` keeps a
second process out. :class:`Context` says where the run directories, the data and the ledger are.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import socket
import sys
from collections.abc import Callable

from reproduce import ledger
from reproduce.arm_settings import Arm


@dataclasses.dataclass
class Context:
    """Where things are and how to talk: repository, data, run directories, ledger, printing."""

    root: str
    data_dir: str
    out_dir: str
    ledger_dir: str
    python: str = sys.executable
    poll_seconds: float = 30.0
    progress_every: float = 300.0
    log: Callable[[str], None] = lambda msg: print(f"[reproduce] {msg}", flush=True)

    def run_dir(self, arm: Arm) -> str:
        """``<out>/<arm.train_id>``; a directory named by the arm's full id (before runs were keyed by their
        training) is renamed to it, so its training is kept."""
        path = os.path.join(self.out_dir, arm.train_id)
        legacy = os.path.join(self.out_dir, arm.id)
        if not os.path.exists(path) and os.path.isdir(legacy):
            os.rename(legacy, path)
        return path

    def replacements(self, arm: Arm) -> dict[str, str]:
        """Machine paths and their placeholders in ledger entries."""
        return {os.path.abspath(self.run_dir(arm)): "$RUN", os.path.abspath(self.data_dir): "$DATA",
                self.python: "python"}


def checkpoint_step(run_dir: str) -> int:
    """The step of the run's latest checkpoint (train_main numbers them by step), 0 without one."""
    try:
        with open(os.path.join(run_dir, "checkpoints", "checkpoint")) as f:
            match = re.search(r'^model_checkpoint_path:\s*"[^"]*?(\d+)"', f.read(), re.M)
    except OSError:
        return 0
    return int(match.group(1)) if match else 0


def steps_from_log(text: str) -> tuple[int, int] | None:
    """(steps per epoch, total steps) from train_main's run description, the last one in a log."""
    found = re.findall(r"(\d+) steps/epoch, (\d+) steps", text)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def total_steps(arm: Arm, steps_per_epoch: int) -> int:
    steps = steps_per_epoch * arm.budget.epochs
    return steps if arm.budget.max_steps is None else min(steps, arm.budget.max_steps)


def load_state(run_dir: str) -> dict:
    """The run directory's record of sessions and evaluation calls (``evals`` keyed by :attr:`EvalCall.key`;
    calls recorded under a bare name by older runs are dropped, to be redone)."""
    try:
        with open(os.path.join(run_dir, "state.json")) as f:
            state = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {"sessions": [], "evals": {}, "trained": False}
    state["evals"] = {k: v for k, v in state.get("evals", {}).items() if "key" in v}
    return state


def save_state(run_dir: str, state: dict) -> None:
    ledger.write_json(os.path.join(run_dir, "state.json"), state)


def newest_mtime(run_dir: str) -> float | None:
    files = glob.glob(os.path.join(run_dir, "tensorboard", "*")) + glob.glob(os.path.join(run_dir, "checkpoints", "*"))
    return max((os.path.getmtime(f) for f in files), default=None)


def recover_sessions(run_dir: str, state: dict) -> None:
    """Closes sessions of a driver that died without recording them (kill -9, a lost machine): their wall
    time is taken as the last write to the run directory minus their start."""
    for s in state["sessions"]:
        if s.get("seconds") is None:
            last = newest_mtime(run_dir)
            s["seconds"] = round(max(0.0, last - s["started"]), 1) if last else 0.0
            s["steps"][1] = checkpoint_step(run_dir)
            s["interrupted"] = True


class Lock:
    """``<run>/lock``: one process per arm, so two background commands never train the same run."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, "lock")
        self.held = False

    def holder(self) -> str | None:
        """Who holds the lock, when it is a live process (a stale lock of a dead one is not a holder)."""
        try:
            with open(self.path) as f:
                host, pid = f.read().split()
        except (OSError, ValueError):
            return None
        if host != socket.gethostname():
            return f"pid {pid} on {host} (delete {self.path} if that run is dead)"
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            return None
        except PermissionError:
            pass
        return None if int(pid) == os.getpid() else f"pid {pid}"

    def acquire(self) -> bool:
        if self.holder():
            return False
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        self.held = True
        return True

    def release(self) -> None:
        if self.held and os.path.exists(self.path):
            os.remove(self.path)
        self.held = False


def status_line(arm: Arm, ctx: Context) -> str:
    """What has been done of an arm: in the ledger, trained, partly trained, not started."""
    if ledger.has_entry(ctx.ledger_dir, arm):
        return "in the ledger"
    run = ctx.run_dir(arm)
    state = load_state(run)
    if state["trained"]:
        done = sum(call.key in state["evals"] for call in arm.evals)
        return f"trained; {done}/{len(arm.evals)} evaluation calls done"
    step = checkpoint_step(run)
    if step:
        spe = state.get("steps_per_epoch")
        return f"trained to step {step}" + (f"/{total_steps(arm, spe)}" if spe else "")
    return "not started"

