"""Running the arms of the ledger: resumable training, evaluation, one entry per finished arm.

Running the command again resumes where it stopped: train_main resumes from its checkpoints, finished evaluation
calls are kept (the run directory's state: reproduce/run_directory.py). A ledger entry is written only when
training and every evaluation have finished. With a time budget an arm starts only when its estimate
(reproduce/time_estimates.py) fits.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from collections.abc import Sequence

from reproduce import ledger
from reproduce.arm_settings import Arm
from reproduce.child_process import ChildKilledError, check_not_killed, run_logged
from reproduce.provenance import git_info, machine_info
from reproduce.run_directory import (
    Context,
    Lock,
    checkpoint_step,
    load_state,
    recover_sessions,
    save_state,
    status_line,
    steps_from_log,
    total_steps,
)
from reproduce.time_estimates import estimate


def train(arm: Arm, ctx: Context, state: dict) -> bool:
    """One train_main session (fresh or resumed); records it in the state. True when training has finished."""
    run = ctx.run_dir(arm)
    log_path = os.path.join(run, "log.txt")
    cmd = [ctx.python, "train_main.py", *arm.train_args(ctx.data_dir, run)]
    start_step = checkpoint_step(run)
    session = {"machine": machine_info(), "git": git_info(ctx.root), "started": time.time(),
               "steps": [start_step, None], "seconds": None, "interrupted": False}
    state["sessions"].append(session)
    save_state(run, state)
    t0 = last_print = time.monotonic()

    def progress() -> None:
        nonlocal last_print
        if time.monotonic() - last_print < ctx.progress_every:
            return
        last_print = time.monotonic()
        with open(log_path) as f:
            steps = steps_from_log(f.read())
        step, elapsed = checkpoint_step(run), time.monotonic() - t0
        if steps and step > start_step:
            total = total_steps(arm, steps[0])
            rate = elapsed / (step - start_step)
            ctx.log(f"{arm.name}: step {step}/{total} ({100 * step / total:.0f}%), {rate:.3g} s/step, "
                    f"~{(total - step) * rate / 60:.0f} min of training left")

    status = None
    try:
        status = run_logged(cmd, log_path, ctx, progress)
    finally:
        session["seconds"] = round(time.monotonic() - t0, 1)
        session["steps"][1] = checkpoint_step(run)
        session["interrupted"] = status is None
        if status:
            session["exit_status"] = status
        with open(log_path) as f:
            steps = steps_from_log(f.read())
        if steps:
            state["steps_per_epoch"] = steps[0]
        save_state(run, state)
    check_not_killed(status, f"{arm.name}: train_main")
    if status != 0:
        ctx.log(f"{arm.name}: train_main failed (exit {status}); see {log_path}")
        return False
    state["trained"] = True
    state["train_command"] = cmd
    save_state(run, state)
    return True


def evaluate(arm: Arm, ctx: Context, state: dict) -> bool:
    """The arm's eval_main calls not done yet, one output file each. True when all have finished."""
    run = ctx.run_dir(arm)
    for call in arm.evals:
        if call.key in state["evals"]:
            continue
        out = os.path.join(run, "eval", call.key)
        shutil.rmtree(out, ignore_errors=True)  # a call interrupted halfway is redone whole
        os.makedirs(out)
        cmd = [ctx.python, "eval_main.py", f"--saved_model={os.path.join(run, arm.export_of(call))}",
               *call.args(ctx.data_dir), f"--output={os.path.join(out, 'results.json')}", "--quiet"]
        ctx.log(f"{arm.name}: evaluating {call.name} ({call.protocols} on {call.dataset})")
        t0 = time.monotonic()
        status = run_logged(cmd, os.path.join(run, "log.txt"), ctx)
        check_not_killed(status, f"{arm.name}: eval_main {call.name}")
        if status != 0:
            ctx.log(f"{arm.name}: eval_main {call.name} failed (exit {status}); see {os.path.join(run, 'log.txt')}")
            return False
        state["evals"][call.key] = {"key": call.key, "seconds": round(time.monotonic() - t0, 1), "command": cmd}
        save_state(run, state)
    return True


def model_name(name: str, arm: Arm, run: str) -> str:
    """eval_main names a model by its run directory, the training's id: the entry names it by the arm's id
    (a signature's suffix, ``:looc_plus_features``, kept)."""
    train = os.path.basename(run)
    return arm.id + name[len(train):] if name.startswith(train) else name


def make_entry(arm: Arm, ctx: Context, state: dict) -> dict:
    """The ledger entry of a finished arm (schema: reproduce/ledger/README.md)."""
    run = ctx.run_dir(arm)
    repl = ctx.replacements(arm)
    records = []
    for call in arm.evals:
        with open(os.path.join(run, "eval", call.key, "results.json")) as f:
            records += [ledger.clean_record(r, call.name, repl) | {"model": model_name(r["model"], arm, run)}
                        for r in json.load(f)]
    sessions = [{k: v for k, v in s.items() if k != "started"} for s in state["sessions"]]
    steps = sum(max(0, s["steps"][1] - s["steps"][0]) for s in sessions)
    seconds = sum(s["seconds"] for s in sessions)
    timed = [s for s in sessions if s["steps"][1] > s["steps"][0]]
    rate = sum(s["seconds"] for s in timed) / sum(s["steps"][1] - s["steps"][0] for s in timed) if timed else None
    tb = os.path.join(run, "tensorboard")
    spe = state["steps_per_epoch"]
    monitors = ledger.read_monitor_events(tb, spe) if os.path.isdir(tb) else {"step": [], "epoch": [], "values": {}}
    diagnostics = ledger.read_monitor_events(tb, spe, "collapse/") if os.path.isdir(tb) else {"step": []}
    return {
        "schema": ledger.SCHEMA,
        "arm": arm.id,
        "name": arm.name,
        "settings": arm.settings(),
        "git": sessions[0]["git"],
        "machine": machine_info(),
        "finished": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "training": {
            "seconds": round(seconds, 1),
            "steps": checkpoint_step(run),
            "steps_trained": steps,
            "steps_per_epoch": spe,
            "seconds_per_step": None if rate is None else round(rate, 4),
            **(ledger.read_time_split(tb, arm.budget.batch_size) if os.path.isdir(tb) else {}),
            "command": ledger.portable(state["train_command"], repl),
            "sessions": sessions,
        },
        "evaluation": {
            "seconds": round(sum(state["evals"][c.key]["seconds"] for c in arm.evals), 1),
            "calls": {c.name: {"seconds": state["evals"][c.key]["seconds"],
                               "command": ledger.portable(state["evals"][c.key]["command"], repl)}
                      for c in arm.evals},
        },
        "records": records,
        "monitors": monitors,
    } | ({"diagnostics": diagnostics} if diagnostics["step"] else {})


def run_arm(arm: Arm, ctx: Context) -> str:
    """Trains (or resumes), evaluates and writes the ledger entry of one arm.

    Returns "done" (entry written), "failed" (a command failed; see the run's log.txt) or "skipped"
    (another live process holds the arm's run directory).
    """
    run = ctx.run_dir(arm)
    os.makedirs(run, exist_ok=True)
    lock = Lock(run)
    if not lock.acquire():
        ctx.log(f"{arm.name}: skipped: its run directory is in use by {lock.holder()}")
        return "skipped"
    try:
        state = load_state(run)
        recover_sessions(run, state)
        t0 = time.monotonic()
        if not state["trained"]:
            step = checkpoint_step(run)
            ctx.log(f"{arm.name}: training {'from scratch' if step == 0 else f'resumed at step {step}'} "
                    f"({arm.budget.describe()}) in {run}")
            if not train(arm, ctx, state):
                return "failed"
        if not evaluate(arm, ctx, state):
            return "failed"
        entry = make_entry(arm, ctx, state)
        ledger.write_json(ledger.entry_path(ctx.ledger_dir, arm), entry)
        path = ledger.entry_path(ctx.ledger_dir, arm)
        ctx.log(f"{arm.name}: done in {(time.monotonic() - t0) / 60:.1f} min this time "
                f"(training {entry['training']['seconds'] / 60:.1f} min, evaluation "
                f"{entry['evaluation']['seconds'] / 60:.1f} min in all); wrote {path}")
        return "done"
    finally:
        lock.release()


def run_arms(arms: Sequence[Arm], ctx: Context, time_budget_minutes: float | None = None) -> dict[str, list[str]]:
    """Runs every arm without a ledger entry, in order; returns {"done", "skipped", "failed"} arm names.

    With a time budget, an arm starts only when its estimate (:func:`estimate`) fits in the time left.
    An arm whose command fails is counted as failed and the next arm starts; a command killed by a signal
    stops the run there (that arm counted as failed), to resume from its checkpoint when run again.
    """
    deadline = None if time_budget_minutes is None else time.monotonic() + 60 * time_budget_minutes
    result: dict[str, list[str]] = {"done": [], "skipped": [], "failed": []}
    todo = [a for a in arms if not ledger.has_entry(ctx.ledger_dir, a)]
    for a in arms:
        if a not in todo:
            ctx.log(f"{a.name}: in the ledger ({a.id}.json), not rerun")
    for i, arm in enumerate(todo):
        prefix = f"[{i + 1}/{len(todo)}] {arm.name}"
        if deadline is not None:
            left = deadline - time.monotonic()
            entries = ledger.load_entries(ctx.ledger_dir)
            try:
                est = estimate(arm, ctx, entries, allow_probe=True)
            except RuntimeError as e:
                ctx.log(f"{prefix}: skipped: {e}")
                result["skipped"].append(arm.name)
                continue
            assert est is not None
            if est.seconds > left:
                ctx.log(f"{prefix}: skipped: needs ~{est.seconds / 60:.0f} min ({est.why}), "
                        f"{max(0.0, left) / 60:.0f} min of the budget left")
                result["skipped"].append(arm.name)
                continue
            ctx.log(f"{prefix}: starting; needs ~{est.seconds / 60:.0f} min ({est.why}), "
                    f"{left / 60:.0f} min of the budget left")
        else:
            ctx.log(f"{prefix}: starting ({status_line(arm, ctx)})")
        try:
            result[run_arm(arm, ctx)].append(arm.name)
        except ChildKilledError as e:
            ctx.log(f"{e}; stopping here, before any other arm. Run the same command again to resume.")
            result["failed"].append(arm.name)
            break
    return result
