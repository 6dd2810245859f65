"""Running the arms of the ledger: resumable training, evaluation, time estimates, one entry per finished arm.

Each arm owns a run directory ``<out>/<arm id>`` (not committed) holding train_main's checkpoints,
TensorBoard events and SavedModel, the eval_main outputs, ``log.txt`` and ``state.json``: the training
sessions so far (machine, commit, wall time, steps) and the evaluation calls done. Running the command
again resumes where it stopped: train_main resumes from its checkpoints, finished evaluation calls are kept.
A ledger entry is written only when training and every evaluation have finished.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

if __package__:  # imported as reproduce.ledger_runner (python -m reproduce.reproduce_small, tests)
    from reproduce import ledger
    from reproduce.ledger import Arm
else:  # run as a script (python reproduce/reproduce_small.py), which put reproduce/ first on sys.path
    import ledger
    from ledger import Arm

STARTUP_SECONDS = 60.0  # a train_main process's start, data reading, tracing and export (measured 20-60 s)
MONITOR_OVERHEAD = 1.05  # a probe runs without monitors; they cost about 5% of a run (docs/monitors.md)
PROBE_STEPS = 25
EVAL_GUESS_SECONDS = 90.0  # per eval_main call, when nothing like it has been measured yet
# LooC's step against MoCo v2's at N views per image, before any LooC arm is in the ledger: the middles of the
# measured 1.22-1.26x (N = 3) and 1.42-1.51x (N = 4) of docs/benchmarks.md §6 (the input pipeline's extra
# views not included there).
LOOC_STEP_RATIO = {3: 1.24, 4: 1.47}


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


# ----------------------------------------------------------------------------------------------------
# Machine, commit, run-directory state


def machine_info() -> dict:
    """CPU model, cores, Python / TensorFlow / Keras versions (TensorFlow is not imported)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass

    def version(*packages: str) -> str | None:
        for package in packages:  # the same import under several distribution names
            try:
                return importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass
        return None

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": version("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
            "keras": version("keras"), "system": platform.system()}


def git_info(root: str) -> dict:
    """{"commit": HEAD or None, "dirty": whether tracked files differ from it}."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


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
    return min(steps, arm.budget.max_steps) if arm.budget.max_steps else steps


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


# ----------------------------------------------------------------------------------------------------
# Subprocesses


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_logged(cmd: list[str], log_path: str, ctx: Context, on_poll: Callable[[], None] | None = None) -> int:
    """Runs ``cmd`` in the repository with its output appended to ``log_path``; returns its exit status.

    An interruption of this process (Ctrl-C, SIGTERM turned into KeyboardInterrupt) stops the child with
    SIGINT first, so train_main's checkpoints stay whole, and is then raised again.
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        # A command started in the background by a shell inherits SIGINT ignored, and so would the child:
        # give it Python's default handling back, so that SIGINT below stops it between two steps.
        proc = subprocess.Popen(cmd, cwd=ctx.root, stdout=f, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=_default_sigint)
        try:
            while True:
                try:
                    return proc.wait(timeout=ctx.poll_seconds)
                except subprocess.TimeoutExpired:
                    if on_poll is not None:
                        on_poll()
        except BaseException:
            for stop in (lambda: proc.send_signal(signal.SIGINT), proc.terminate, proc.kill):
                if proc.poll() is not None:
                    break
                stop()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            raise


class ChildKilledError(RuntimeError):
    """A train_main or eval_main child ended by a signal (killed by hand, the OOM killer, a job scheduler)."""


def check_not_killed(status: int, what: str) -> None:
    """Raises :class:`ChildKilledError` when ``status`` (a Popen return code) says the child died of a signal.

    Whoever killed it meant the experiment to stop, or the machine is failing; either way the next arm
    should not start.
    """
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        raise ChildKilledError(f"{what} was killed by {name}")


# ----------------------------------------------------------------------------------------------------
# One arm


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
        cmd = [ctx.python, "eval_main.py", f"--saved_model={os.path.join(run, 'saved_model')}",
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
    }


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


# ----------------------------------------------------------------------------------------------------
# Time estimates


@dataclasses.dataclass
class Estimate:
    """Seconds an arm still needs, and where the figures come from."""

    seconds: float
    why: str


def _same_speed(a: dict, b: dict) -> bool:
    """Settings whose steps cost the same: data and budget apart from its length."""
    keep = ("width", "image_size", "batch_size", "backbone")
    return a["data"] == b["data"] and all(a["budget"][k] == b["budget"][k] for k in keep)


def measured_rate(arm: Arm, state: dict, entries: Sequence[dict], machine: dict) -> tuple[float, str] | None:
    """Seconds per step: this arm's own sessions, else the median of the most similar ledger entries."""
    timed = [s for s in state["sessions"] if s.get("seconds") and s["steps"][1] and s["steps"][1] > s["steps"][0]]
    if timed:
        steps = sum(s["steps"][1] - s["steps"][0] for s in timed)
        return sum(s["seconds"] for s in timed) / steps, f"this arm's earlier sessions ({steps} steps)"
    settings = arm.settings()
    alike = [e for e in entries if _same_speed(e["settings"], settings) and e["training"].get("seconds_per_step")]
    here = (machine["cpu"], machine["cores"])
    method, scale, scaled = arm.method, 1.0, ""
    views = 2 + len(dict(arm.train_flags).get("looc_augmentations", "color").split(","))
    if method == "looc" and views in LOOC_STEP_RATIO and not any(e["settings"]["method"] == "looc" for e in alike):
        method, scale = "moco", LOOC_STEP_RATIO[views]  # no LooC measured yet: MoCo's step × the benchmark's ratio
        scaled = f", × {scale} for LooC's N = {views} (docs/benchmarks.md §6)"
    tiers = [
        ("same method, this CPU", lambda e: e["settings"]["method"] == method
         and (e["machine"]["cpu"], e["machine"]["cores"]) == here),
        ("same method", lambda e: e["settings"]["method"] == method),
        ("any method, this CPU", lambda e: (e["machine"]["cpu"], e["machine"]["cores"]) == here),
        ("any method", lambda e: True),
    ]
    for label, keep in tiers:
        picked = [e["training"]["seconds_per_step"] for e in alike if keep(e)]
        if picked:
            noun = "entry" if len(picked) == 1 else "entries"
            label = label.replace("same method", f"{METHOD_LABEL.get(method, method)}") if scaled else label
            return scale * statistics.median(picked), f"median of {len(picked)} ledger {noun} ({label}){scaled}"
    return None


METHOD_LABEL = {"moco": "MoCo v2"}


def known_steps_per_epoch(arm: Arm, ctx: Context, state: dict, entries: Sequence[dict]) -> int | None:
    if state.get("steps_per_epoch"):
        return state["steps_per_epoch"]
    for e in entries:
        s = e["settings"]
        if s["data"] == arm.data and s["budget"]["batch_size"] == arm.budget.batch_size:
            return e["training"]["steps_per_epoch"]
    return None


def probe_key(arm: Arm, machine: dict) -> str:
    b = arm.budget
    key = (f"{arm.data}|{arm.method}|{arm.augself}|{arm.condition}|{b.backbone}|{b.width}|{b.image_size}|"
           f"{b.batch_size}|{machine['cpu']}|{machine['cores']}")
    looc = dict(arm.train_flags).get("looc_augmentations")  # LooC's N views per image set its step's cost
    return key + (f"|looc={looc}" if looc else "")


def timed_steps(arm: Arm, ctx: Context, steps: int, run: str) -> tuple[float, int]:
    """(seconds per step, steps per epoch) of ``steps`` steps of the arm's settings, trained afresh into ``run``
    (removed after) without monitors or export; the rate is the TensorBoard wall time between its logged steps
    after the first (which traces the step function)."""
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    cmd = [ctx.python, "train_main.py", *arm.train_args(ctx.data_dir, run), f"--max_steps={steps}",
           "--monitor=none", "--export=false", "--log_every=5"]
    log_path = os.path.join(run, "log.txt")
    if run_logged(cmd, log_path, ctx) != 0:
        raise RuntimeError(f"timing {arm.name} failed; see {log_path}")
    with open(log_path) as f:
        found = steps_from_log(f.read())
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    from augself_tf.runtime.tensorboard import read_scalars

    events = sorted(read_scalars(os.path.join(run, "tensorboard"), ["loss/total"]).get("loss/total", []),
                    key=lambda e: e.step)
    if len(events) < 2 or not found:
        raise RuntimeError(f"timing {arm.name}: it logged too little to time; see {log_path}")
    rate = (events[-1].wall_time - events[0].wall_time) / (events[-1].step - events[0].step)
    shutil.rmtree(run, ignore_errors=True)
    return rate, found[0]


def probe(arm: Arm, ctx: Context) -> tuple[float, int]:
    """(seconds per step, steps per epoch) measured by a short run of the arm's settings (cached per machine).

    The probe is :func:`timed_steps` of PROBE_STEPS steps in ``<out>/_probe``.
    """
    machine = machine_info()
    cache_path = os.path.join(ctx.out_dir, "probes.json")
    try:
        with open(cache_path) as f:
            cache = json.load(f)
    except (OSError, json.JSONDecodeError):
        cache = {}
    key = probe_key(arm, machine)
    if key in cache:
        return cache[key]["seconds_per_step"], cache[key]["steps_per_epoch"]
    ctx.log(f"{arm.name}: probing the speed of these settings ({PROBE_STEPS} steps)")
    rate, spe = timed_steps(arm, ctx, PROBE_STEPS, os.path.join(ctx.out_dir, "_probe", arm.id))
    cache[key] = {"seconds_per_step": rate, "steps_per_epoch": spe}
    ledger.write_json(cache_path, cache)
    return rate, spe


def estimate(arm: Arm, ctx: Context, entries: Sequence[dict], allow_probe: bool) -> Estimate | None:
    """Seconds the arm still needs (training left, startup, evaluations left); None when nothing is measured
    and probing is not allowed."""
    run = ctx.run_dir(arm)
    state = load_state(run)
    recover_sessions(run, state)
    why = []
    seconds = 0.0
    if not state["trained"]:
        rate_src = measured_rate(arm, state, entries, machine_info())
        spe = known_steps_per_epoch(arm, ctx, state, entries)
        if rate_src is None or spe is None:
            if not allow_probe:
                return None
            rate, spe = probe(arm, ctx)
            rate_src = (rate * MONITOR_OVERHEAD,
                        f"a {PROBE_STEPS}-step probe, +{MONITOR_OVERHEAD - 1:.0%} for monitors")
        rate, source = rate_src
        left = max(0, total_steps(arm, spe) - checkpoint_step(run))
        seconds += left * rate + STARTUP_SECONDS
        why.append(f"{left} steps × {rate:.3g} s/step from {source}")
    guessed = 0
    for call in arm.evals:
        if call.key in state["evals"]:
            continue
        spec = dataclasses.asdict(call) | {"flags": list(call.flags)}
        seen = [e["evaluation"]["calls"][call.name]["seconds"] for e in entries
                if spec in e["settings"]["evals"] and call.name in e["evaluation"]["calls"]]
        if seen:
            seconds += statistics.median(seen)
        else:
            seconds += EVAL_GUESS_SECONDS
            guessed += 1
    left_calls = sum(call.key not in state["evals"] for call in arm.evals)
    if left_calls:
        why.append(f"{left_calls} evaluation call(s)" + (f", {guessed} of them guessed at "
                                                         f"{EVAL_GUESS_SECONDS / 60:.1f} min each" if guessed else ""))
    return Estimate(seconds, "; ".join(why))


# ----------------------------------------------------------------------------------------------------
# Many arms


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
