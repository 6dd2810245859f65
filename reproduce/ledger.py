"""The results ledger of the small reproduction: one JSON entry per finished arm, and reading and writing them.

A finished arm writes one small JSON entry ``<ledger>/<arm id>.json`` (schema in reproduce/ledger/README.md);
the reports (reproduce/main_report.py, reproduce/looc_report.py) are functions of these entries only, so they
can be rebuilt anywhere from the committed files. What an arm is and how its id is made: reproduce/arm_settings.py;
running arms into the ledger: reproduce/ledger_runner.py; the command: reproduce/reproduce_small.py. Beside the
entries, ``<ledger>/timings/<suite>.json`` holds a suite's step times (:func:`timings_path`).

The reproduction runs in a checkout: :data:`ROOT` is the folder above this package, which holds the committed
ledger, docs/results.md and the programs an arm runs (train_main.py, eval_main.py). That is where ``python -m
reproduce.reproduce_small`` from the checkout's root and ``augself-reproduce`` of an editable install
(``pip install -e .``) import the package from; an install elsewhere has none of it, which
:func:`checkout_error` says in one line. Nothing here imports TensorFlow except reading TensorBoard events
(:func:`read_monitor_events`), imported when used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from reproduce.arm_settings import Arm

SCHEMA = 1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = "augself-reproduce"
# What of the checkout the reproduction reads, writes or runs (folders end in /).
CHECKOUT_PATHS = ("train_main.py", "eval_main.py", "reproduce/ledger/", "docs/results.md")


def checkout_error(program: str, run_as: str, paths: Iterable[str] = CHECKOUT_PATHS) -> str | None:
    """One error line when :data:`ROOT` lacks any of ``paths`` (the package was installed outside a checkout),
    naming what is missing and ``run_as``, how to run the program instead; None when every path is there."""
    missing = [p for p in paths if not (os.path.isdir if p.endswith("/") else os.path.isfile)(os.path.join(ROOT, p))]
    if not missing:
        return None
    return f"{program}: error: {ROOT} is not an augself-tf checkout (no {', '.join(missing)}): in a checkout, {run_as}"


def entry_path(ledger_dir: str, arm: Arm) -> str:
    """``<ledger>/<arm id>.json``."""
    return os.path.join(ledger_dir, f"{arm.id}.json")


def load_entries(ledger_dir: str) -> list[dict]:
    """Every ledger entry (``*.json``), in file-name order; a missing directory is an empty ledger."""
    if not os.path.isdir(ledger_dir):
        return []
    entries = []
    for name in sorted(os.listdir(ledger_dir)):
        if name.endswith(".json"):
            with open(os.path.join(ledger_dir, name)) as f:
                entries.append(json.load(f))
    return entries


def suite_entries(entries: Iterable[dict], suite: str = "") -> list[dict]:
    """The entries of one arm set (settings ``suite``, absent = the main reproduction's): each suite's report reads
    its own."""
    return [e for e in entries if e["settings"].get("suite", "") == suite]


def timings_path(ledger_dir: str, suite: str) -> str:
    """``<ledger>/timings/<suite>.json``: a suite's step times (reproduce/step_times.py), committed beside the
    entries and outside their folder level, so it is never read as an entry."""
    return os.path.join(ledger_dir, "timings", f"{suite or 'main'}.json")


def load_timings(ledger_dir: str, suite: str) -> dict | None:
    """The suite's step times, or None when it was never timed."""
    try:
        with open(timings_path(ledger_dir, suite)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def has_entry(ledger_dir: str, arm: Arm) -> bool:
    """Whether the ledger holds this arm with exactly these settings."""
    path = entry_path(ledger_dir, arm)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f).get("settings") == arm.settings()


def dumps(obj: object, indent: str = "") -> str:
    """JSON with one item per line, except lists of plain values (numbers, strings), which stay on one line:
    ledger entries then read well and change in short diffs."""
    inner = indent + " "
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {dumps(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return json.dumps(list(obj), ensure_ascii=False)
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in obj) + f"\n{indent}]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path: str, obj: object) -> None:
    """Atomic write: a reader (or a second process) never sees half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(dumps(obj) + "\n")
    os.replace(tmp, path)


def portable(obj: object, replacements: dict[str, str]) -> object:
    """``obj`` with machine paths replaced by placeholders (``$DATA``, ``$RUN``), recursively."""
    if isinstance(obj, dict):
        return {k: portable(v, replacements) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, replacements) for v in obj]
    if isinstance(obj, str):
        for path, name in sorted(replacements.items(), key=lambda kv: -len(kv[0])):
            obj = obj.replace(path, name)
    return obj


def clean_record(record: dict, call: str, replacements: dict[str, str]) -> dict:
    """An eval_main record for the ledger: tagged with its call, paths made portable, pictures dropped
    (they stay in the run directory, which is not committed)."""
    settings = {k: v for k, v in record.get("settings", {}).items() if k not in ("figure", "figures")}
    return portable({**record, "settings": settings, "call": call}, replacements)


def read_monitor_events(tensorboard_dir: str, steps_per_epoch: int, prefix: str = "monitor/") -> dict:
    """The ``monitor/*`` scalars of a run (``monitor/seconds`` aside), or those under another ``prefix``
    (``collapse/``: the training steps' collapse diagnostics), as columns per logged step.

    Returns ``{"step": [...], "epoch": [...], "values": {name: [...]}}`` sorted by step; a step written
    twice (a resumed run redoing it) keeps its last value. Read with ``augself_tf.runtime.tensorboard``.
    """
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    from augself_tf.runtime.tensorboard import last_per_step, read_scalars

    events = read_scalars(tensorboard_dir, lambda tag: tag.startswith(prefix) and tag != "monitor/seconds")
    series = {tag[len(prefix):]: dict(last_per_step(points)) for tag, points in events.items()}
    steps = sorted({s for points in series.values() for s in points})
    return {
        "step": steps,
        "epoch": [round(s / steps_per_epoch, 4) for s in steps],
        "values": {name: [None if s not in points else round(points[s], 6) for s in steps]
                   for name, points in sorted(series.items())},
    }


def read_time_split(tensorboard_dir: str, batch_size: int) -> dict:
    """Where a run's training time went, from its TensorBoard scalars: ``step_seconds``, the time of the training
    steps (each logged window's steps × batch / its ``pairs_per_sec``, which leaves the monitors out), and
    ``monitor_seconds`` (the sum of ``monitor/seconds``). The rest of the training time is start-up, tracing of the
    first window aside, checkpoints outside the windows and the export."""
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    from augself_tf.runtime.tensorboard import last_per_step, read_scalars

    events = read_scalars(tensorboard_dir, lambda tag: tag in ("pairs_per_sec", "monitor/seconds"))
    rates = last_per_step(events.get("pairs_per_sec", []))
    steps, previous = 0.0, 0
    for step, rate in rates:
        steps += (step - previous) * batch_size / max(rate, 1e-9)
        previous = step
    monitors = sum(v for _, v in last_per_step(events.get("monitor/seconds", [])))
    return {"step_seconds": round(steps, 1), "monitor_seconds": round(monitors, 1)}
