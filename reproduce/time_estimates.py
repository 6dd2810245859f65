"""How long an arm still needs: its own sessions' rate, the ledger's similar entries, or a short probe run.

``--time_budget`` starts an arm only when its estimate fits, and ``--list`` shows the estimates; ``--time_steps``
(reproduce/step_times.py) times settings back to back with :func:`timed_steps`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
from collections.abc import Sequence

from reproduce import ledger
from reproduce.arm_settings import OBJECTIVE_WEIGHT_FLAGS, Arm
from reproduce.child_process import run_logged
from reproduce.provenance import machine_info
from reproduce.run_directory import (
    Context,
    checkpoint_step,
    load_state,
    recover_sessions,
    steps_from_log,
    total_steps,
)

STARTUP_SECONDS = 60.0  # a train_main process's start, data reading, tracing and export (measured 20-60 s)
MONITOR_OVERHEAD = 1.05  # a probe runs without monitors; they cost about 5% of a run (docs/monitors.md)
PROBE_STEPS = 25
RECENT = 3  # a tier's newest entries only: the code's speed changes, and older entries ran older code
EVAL_GUESS_SECONDS = 90.0  # per eval_main call, when nothing like it has been measured yet
# LooC's step against MoCo v2's at N views per image, before any LooC arm is in the ledger: the middles of the
# measured 1.22-1.26x (N = 3) and 1.42-1.51x (N = 4) of docs/benchmarks.md §6 (the input pipeline's extra
# views not included there).
LOOC_STEP_RATIO = {3: 1.24, 4: 1.47}


@dataclasses.dataclass
class Estimate:
    """Seconds an arm still needs, and where the figures come from."""

    seconds: float
    why: str


def _same_speed(a: dict, b: dict) -> bool:
    """Settings whose steps cost the same: data and budget apart from its length."""
    keep = ("width", "image_size", "batch_size", "backbone")
    return a["data"] == b["data"] and all(a["budget"][k] == b["budget"][k] for k in keep)


# Train flags that change what a step computes: its objectives, views and LooC's heads (the recipe's do not).
STEP_COST_FLAGS = (*OBJECTIVE_WEIGHT_FLAGS, "equimod_control", "condition_kind", "looc_augmentations")


def _objective(settings: dict, monitors: bool) -> tuple:
    """What a step computes: the method, AugSelf, conditioning and the step-cost flags; with ``monitors``, the
    monitor flags too (an entry's s/step includes its monitors' time)."""
    flags = settings["train_flags"]
    return (settings["method"], settings["augself"], settings["condition"], tuple(sorted(
        (k, v) for k, v in flags.items() if k in STEP_COST_FLAGS or (monitors and k.startswith("monitor")))))


def measured_rate(arm: Arm, state: dict, entries: Sequence[dict], machine: dict) -> tuple[float, str] | None:
    """Seconds per step: this arm's own sessions, else the median of the newest of the most similar ledger entries
    (the same objective and monitors before the same method: SimSiam + EquiMod's three views cost more than two)."""
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
    likeness = (("same objective and monitors", lambda st: _objective(st, monitors=True)),
                ("same objective", lambda st: _objective(st, monitors=False)),
                ("same method", lambda st: st["method"]), ("any method", lambda st: None))
    mine = {**settings, "method": method}
    for label, key in likeness:
        wanted = key(mine)
        for where, same_cpu in ((", this CPU", True), ("", False)):
            keep = [e for e in alike if key(e["settings"]) == wanted
                    and (not same_cpu or (e["machine"]["cpu"], e["machine"]["cores"]) == here)]
            picked = [e["training"]["seconds_per_step"] for e in sorted(keep, key=lambda e: e["finished"])[-RECENT:]]
            if picked:
                noun = "entry" if len(picked) == 1 else "entries"
                shown = label.replace("same method", METHOD_LABEL.get(method, method)) if scaled else label
                return (scale * statistics.median(picked),
                        f"median of {len(picked)} ledger {noun} ({shown}{where}){scaled}")
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
        spec = call.settings()
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


