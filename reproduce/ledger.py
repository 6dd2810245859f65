"""The results ledger of the small reproduction: arms, their entries, and the report made from them alone.

An *arm* is one pretraining run plus its evaluations: data, method, AugSelf set, conditioning set, seed and
budget. Its *settings* (everything that decides its numbers) hash to a stable id; a finished arm writes one
small JSON entry ``<ledger>/<arm id>.json`` (schema in reproduce/ledger/README.md). The report -- the
tables, the wall-time table, the curve picture and the generated block of docs/results.md -- is a function
of the ledger entries only, so it can be rebuilt anywhere from the committed files.

Running arms is in reproduce/ledger_runner.py; the command is reproduce/reproduce_small.py. Nothing here imports
TensorFlow except reading TensorBoard events (:func:`read_monitor_events`) and the paper's figures
(:func:`paper_pair`), both imported when used.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import statistics
import sys
from collections.abc import Iterable, Sequence

SCHEMA = 1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as `python reproduce/x.py`: read this checkout's augself_tf, not an installed one
    sys.path.insert(1, ROOT)
BEGIN, END = "<!-- reproduce_small:begin -->", "<!-- reproduce_small:end -->"
COMMAND = "python reproduce/reproduce_small.py"

# Logical dataset names: a spec is made from them with the data directory of the machine (--data), so
# neither an arm's id nor its ledger entry depends on where the images live.
FOLDER_DATASETS = ("tiny-imagenet-mini", "cifar10-mini", "flowers17")
DATA_NAMES = {"tiny": "tiny-imagenet-mini", "shapes": "shapes"}
METHOD_NAMES = {"simsiam": "SimSiam", "moco": "MoCo v2", "byol": "BYOL", "simclr": "SimCLR", "swav": "SwAV"}
DEFAULT_SET = "crop,color"


def dataset_spec(name: str, data_dir: str) -> str:
    """The dataset flag of a logical name: ``folder:<data_dir>/<name>`` for the shared folders, else as is."""
    return f"folder:{os.path.join(data_dir, name)}" if name in FOLDER_DATASETS else name


# ----------------------------------------------------------------------------------------------------
# Arms


@dataclasses.dataclass(frozen=True)
class Budget:
    """The compute of one pretraining run (``max_steps`` only for smoke runs)."""

    epochs: int
    width: float
    image_size: int
    batch_size: int
    backbone: str
    max_steps: int | None = None

    def describe(self) -> str:
        """``resnet18 width 0.25, 64 px, batch 128, 120 epochs``."""
        text = (f"{self.backbone} width {self.width:g}, {self.image_size} px, batch {self.batch_size}, "
                f"{self.epochs} epochs")
        return text + (f" (at most {self.max_steps} steps)" if self.max_steps else "")


@dataclasses.dataclass(frozen=True)
class EvalCall:
    """One eval_main call on an arm's SavedModel; its records are tagged with ``name``."""

    name: str
    protocols: str
    dataset: str  # logical name (see dataset_spec)
    image_size: int
    flags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``<name>-<8 hex digits of the call's hash>``: where a run directory keeps the call's output, so a call
        whose flags change is redone while the others (and the training) are kept."""
        return f"{self.name}-{settings_hash(dataclasses.asdict(self) | {'flags': list(self.flags)})}"

    def args(self, data_dir: str) -> list[str]:
        """eval_main arguments except --saved_model and --output."""
        return [f"--protocol={self.protocols}", f"--dataset={dataset_spec(self.dataset, data_dir)}",
                f"--image_size={self.image_size}", *self.flags]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One pretraining run and its evaluations.

    ``augself`` and ``condition`` are comma lists of ω names or ``none``; ``train_flags`` are further
    train_main flags that change the result (queue size, monitor cadence, LooC's left-out set), as (name, value)
    pairs. ``suite`` names the arm set the arm belongs to ("" = issue 20's; "looc" = issue 33's): it is in the
    settings (and so the id) only when not empty, and each suite's report reads only its own entries.
    """

    data: str
    method: str
    augself: str
    condition: str
    seed: int
    budget: Budget
    evals: tuple[EvalCall, ...]
    train_flags: tuple[tuple[str, str], ...] = ()
    suite: str = ""

    @property
    def variant(self) -> str:
        """``base``, ``augself``, ``cond``, ``augself+cond`` (with the set when it is not crop,color); for LooC
        its left-out set (``color_rotation``), with ``+augself`` when AugSelf is on too."""
        parts = []
        if self.method == "looc":
            parts.append(dict(self.train_flags).get("looc_augmentations", "default").replace(",", "_"))
        for label, value in (("augself", self.augself), ("cond", self.condition)):
            if value != "none":
                parts.append(label if value == DEFAULT_SET else f"{label}_{value.replace(',', '_')}")
        return "+".join(parts) or "base"

    @property
    def name(self) -> str:
        """Readable name, what ``--arms`` globs match: ``tiny-simsiam-augself-s0``."""
        return f"{self.data}-{self.method}-{self.variant}-s{self.seed}"

    def settings(self) -> dict:
        """Everything that decides the arm's numbers, as plain JSON (what the id hashes)."""
        return {
            "data": self.data,
            "dataset": DATA_NAMES[self.data],
            "split": "train",
            "method": self.method,
            "augself": self.augself,
            "condition": self.condition,
            "seed": self.seed,
            "budget": dataclasses.asdict(self.budget),
            "train_flags": dict(self.train_flags),
            "evals": [dataclasses.asdict(e) | {"flags": list(e.flags)} for e in self.evals],
        } | ({"suite": self.suite} if self.suite else {})

    @property
    def id(self) -> str:
        """``<name>-<8 hex digits of the settings' hash>``: the file name of its ledger entry."""
        return f"{self.name}-{settings_hash(self.settings())}"

    @property
    def train_id(self) -> str:
        """``<name>-<8 hex digits of the training settings' hash>``: its run directory. The evaluations and the
        suite are left out, so arms that train alike share one training, and a changed evaluation list
        re-evaluates a trained arm instead of training it again."""
        train = {k: v for k, v in self.settings().items() if k not in ("evals", "suite")}
        return f"{self.name}-t{settings_hash(train)}"

    def train_args(self, data_dir: str, model_dir: str) -> list[str]:
        """train_main arguments (``--condition`` only when conditioning is on, so older code still runs)."""
        b = self.budget
        args = [f"--method={self.method}", f"--augself={self.augself}", f"--seed={self.seed}",
                f"--dataset={dataset_spec(DATA_NAMES[self.data], data_dir)}", "--split=train",
                f"--backbone={b.backbone}", f"--width={b.width}", f"--image_size={b.image_size}",
                f"--batch_size={b.batch_size}", f"--epochs={b.epochs}", f"--model_dir={model_dir}"]
        if self.condition != "none":
            args.append(f"--condition={self.condition}")
        if b.max_steps:
            args.append(f"--max_steps={b.max_steps}")
        args += [f"--{k}={v}" for k, v in self.train_flags]
        return args


def settings_hash(settings: dict) -> str:
    """8 hex digits of the SHA-256 of the settings' canonical JSON."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


TINY_BUDGET = Budget(epochs=120, width=0.25, image_size=64, batch_size=128, backbone="resnet18")
SHAPES_BUDGET = Budget(epochs=10, width=0.125, image_size=32, batch_size=256, backbone="resnet18_cifar")
QUICK_BUDGET = Budget(epochs=1, width=0.0625, image_size=32, batch_size=32, backbone="resnet18_cifar", max_steps=2)

TINY_EVALS = (
    EvalCall("flowers17", "linear", "flowers17", 64),
    EvalCall("cifar10", "linear", "cifar10-mini", 64),
    EvalCall("tiny_probes", "colorperm,rotation,localization,invariance", "tiny-imagenet-mini", 64),
    # The held-out part of tiny-imagenet-mini has 10 images per class: 5 queries leave room for 5 shots.
    EvalCall("tiny_fewshot", "fewshot", "tiny-imagenet-mini", 64, ("--fewshot_queries=5", "--fewshot_episodes=2000")),
)
SHAPES_EVALS = (
    EvalCall("shapes", "linear,localization,colorperm", "shapes", 32),
    EvalCall("shapes_color", "linear", "shapes", 32, ("--label_key=color",)),
)
QUICK_EVALS = (EvalCall("shapes", "linear,colorperm", "shapes", 32, ("--max_examples=200",)),)
# The paper's 65536-key queue is 0.62x STL10's 105k images; on these few thousand images a queue that long
# fills with stale keys of the very images it contrasts against (docs/results.md, "MoCo queue").
MOCO_QUEUE = 2048
MONITOR_FLAGS = (("monitor", "auto"), ("monitor_every", "2"))
QUICK_MONITOR_FLAGS = (("monitor", "auto"), ("monitor_every", "1"), ("monitor_bank_size", "64"),
                       ("monitor_query_size", "32"))


def _arm(data: str, method: str, augself: str, condition: str, seed: int, budget: Budget,
         evals: tuple[EvalCall, ...], monitor_flags: tuple[tuple[str, str], ...], queue: int) -> Arm:
    flags = (("queue_size", str(queue)),) if method == "moco" else ()
    return Arm(data, method, augself, condition, seed, budget, evals, flags + monitor_flags)


def default_arms(epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The arms of issue 20, cheapest and most informative first (each seed's pair before the next seed).

    ``epochs`` / ``width`` replace the tiny-imagenet budget's (new settings, so new ids and entries).
    """
    tiny = dataclasses.replace(TINY_BUDGET, **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    arms = [_arm("shapes", "moco", a, "none", 0, SHAPES_BUDGET, SHAPES_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
            for a in ("none", DEFAULT_SET)]
    pairs = [("simsiam", 0), ("moco", 0), ("simsiam", 1), ("simsiam", 2)]
    for method, seed in pairs:
        arms += [_arm("tiny", method, a, "none", seed, tiny, TINY_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
                 for a in ("none", DEFAULT_SET)]
    # The ω-conditioned projector (CASSLE, issue 21) in AugSelf's place.
    arms += [_arm("tiny", m, "none", DEFAULT_SET, 0, tiny, TINY_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
             for m in ("simsiam", "moco")]
    return arms


def quick_arms() -> list[Arm]:
    """The smoke version: MoCo ± AugSelf on `shapes`, 2 steps at width 1/16, one small evaluation."""
    return [_arm("shapes", "moco", a, "none", 0, QUICK_BUDGET, QUICK_EVALS, QUICK_MONITOR_FLAGS, 64)
            for a in ("none", DEFAULT_SET)]


def select_arms(arms: Sequence[Arm], patterns: str | None) -> list[Arm]:
    """The arms whose name or id matches one of the comma-separated globs (all arms for None/empty).

    Raises:
      ValueError: a pattern that matches no arm (a typo would otherwise run nothing, silently).
    """
    globs = [p.strip() for p in (patterns or "").split(",") if p.strip()]
    if not globs:
        return list(arms)
    for g in globs:
        if not any(fnmatch.fnmatchcase(a.name, g) or fnmatch.fnmatchcase(a.id, g) for a in arms):
            raise ValueError(f"--arms: {g!r} matches none of: {', '.join(a.name for a in arms)}")
    return [a for a in arms if any(fnmatch.fnmatchcase(a.name, g) or fnmatch.fnmatchcase(a.id, g) for g in globs)]


# ----------------------------------------------------------------------------------------------------
# Ledger files


def entry_path(ledger_dir: str, arm: Arm) -> str:
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


def read_monitor_events(tensorboard_dir: str, steps_per_epoch: int) -> dict:
    """The ``monitor/*`` scalars of a run (``monitor/seconds`` aside) as columns per evaluated step.

    Returns ``{"step": [...], "epoch": [...], "values": {name: [...]}}`` sorted by step; a step written
    twice (a resumed run redoing it) keeps its last value. Read with ``augself_tf.runtime.tensorboard``.
    """
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    from augself_tf.runtime.tensorboard import last_per_step, read_scalars

    events = read_scalars(tensorboard_dir, lambda tag: tag.startswith("monitor/") and tag != "monitor/seconds")
    series = {tag[len("monitor/"):]: dict(last_per_step(points)) for tag, points in events.items()}
    steps = sorted({s for points in series.values() for s in points})
    return {
        "step": steps,
        "epoch": [round(s / steps_per_epoch, 4) for s in steps],
        "values": {name: [None if s not in points else round(points[s], 6) for s in steps]
                   for name, points in sorted(series.items())},
    }


# ----------------------------------------------------------------------------------------------------
# Report


@dataclasses.dataclass
class Group:
    """The seeds of one (data, budget, method, AugSelf, conditioning) setting."""

    entries: list[dict]

    @property
    def seeds(self) -> list[int]:
        return sorted(e["settings"]["seed"] for e in self.entries)

    def values(self, row: tuple[str, str, str]) -> list[float]:
        out = []
        for e in self.entries:
            for r in e["records"]:
                if (r["call"], r["protocol"], r["metric"]) == row and r["value"] is not None:
                    out.append(float(r["value"]))
        return out


def mean_half_range(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half of max − min): the seed spread the report shows."""
    return statistics.fmean(values), (max(values) - min(values)) / 2


def difference(variant: Sequence[float], base: Sequence[float]) -> tuple[float, bool | None]:
    """(mean(variant) − mean(base), noise): noise is whether |Δ| is within the sum of the two half-ranges,
    judged only when both sides have at least two seeds (else None: one seed has no spread to judge by)."""
    (mv, hv), (mb, hb) = mean_half_range(variant), mean_half_range(base)
    delta = mv - mb
    if len(variant) < 2 or len(base) < 2:
        return delta, None
    return delta, abs(delta) <= hv + hb


def decimals(metric: str) -> int:
    """Accuracies (%) with one decimal; errors and cosines with four."""
    return 1 if metric.endswith("%") else 4


def cell(values: Sequence[float], metric: str) -> str:
    if not values:
        return "—"
    d = decimals(metric)
    if len(values) == 1:
        return f"{values[0]:.{d}f}"
    mean, half = mean_half_range(values)
    return f"{mean:.{d}f} ± {half:.{d}f}"


def delta_cell(variant: Sequence[float], base: Sequence[float], metric: str) -> str:
    if not variant or not base:
        return "—"
    delta, noise = difference(variant, base)
    return f"{delta:+.{decimals(metric)}f}" + (" (noise)" if noise else "")


# Where the paper reports the same protocol, the figure shown beside ours: (our protocol, our dataset) ->
# (paper protocol, paper dataset key or None = not stated, pretraining, label). The datasets differ (the
# paper's models are STL10 ResNet-18s at 96 px, 200 epochs), so the paper's *gap* is what compares.
PAPER_COMPARABLE: dict[tuple[str, str], tuple[str, str | None, str, str]] = {
    ("linear", "flowers17"): ("linear", "oxford_flowers102", "STL10 ResNet-18", "Flowers102"),
    ("linear", "cifar10-mini"): ("linear", "cifar10", "STL10 ResNet-18", "CIFAR10"),
    ("colorperm", "tiny-imagenet-mini"): ("colorperm", None, "STL10 ResNet-18", "pretext table"),
    ("rotation", "tiny-imagenet-mini"): ("rotation", None, "STL10 ResNet-18", "pretext table"),
    ("fewshot_5way_1shot", "tiny-imagenet-mini"): ("fewshot_5way_1shot", "fc100", "STL10 ResNet-18", "FC100"),
    ("fewshot_5way_5shot", "tiny-imagenet-mini"): ("fewshot_5way_5shot", "fc100", "STL10 ResNet-18", "FC100"),
    ("localization", "tiny-imagenet-mini"): ("localization", "caltech_birds2011", "ImageNet100 ResNet-50",
                                             "CUB200, ImageNet100 ResNet-50"),
}


def paper_pair(protocol: str, dataset: str, method: str) -> str:
    """``base → AugSelf (where)`` from augself_tf/evaluation/paper_results.py, or '' when not comparable."""
    if (protocol, dataset) not in PAPER_COMPARABLE or method not in METHOD_NAMES:
        return ""
    from augself_tf.evaluation import paper_results

    proto, ds, pretrain, label = PAPER_COMPARABLE[(protocol, dataset)]
    name = METHOD_NAMES[method]

    def figure(m: str) -> float | None:
        for e in paper_results.ENTRIES:
            if (e.protocol, e.dataset, e.pretrain, e.method) == (proto, ds, pretrain, m) and (
                    proto != "linear" or e.table == "transfer_linear"):
                return e.value
        return None

    base, aug = figure(name), figure(name + "+AugSelf")
    if base is None or aug is None:
        return ""
    return f"{base:g} → {aug:g} ({label})"


VARIANT_ORDER = ("base", "augself", "cond", "augself+cond")
DATA_ORDER = ("tiny", "shapes")
METHOD_ORDER = ("simsiam", "moco", "byol", "simclr", "swav")


def _order(seq: Sequence[str], item: str) -> tuple[int, str]:
    return (seq.index(item) if item in seq else len(seq), item)


def variant_of(settings: dict) -> str:
    return Arm(settings["data"], settings["method"], settings["augself"], settings["condition"], 0,
               Budget(**settings["budget"]), ()).variant


def variant_label(settings: dict) -> str:
    """Column header of a variant: ``base``, ``+AugSelf{crop,color}``, ``+cond{crop,color}``."""
    parts = []
    if settings["augself"] != "none":
        parts.append(f"+AugSelf{{{settings['augself']}}}")
    if settings["condition"] != "none":
        parts.append(f"+cond{{{settings['condition']}}}")
    return "".join(parts) or "base"


def short_label(settings: dict) -> str:
    """``AugSelf``, ``cond``, ``AugSelf+cond``: the variant in a Δ column's header."""
    return "+".join(name for name, key in (("AugSelf", "augself"), ("cond", "condition"))
                    if settings[key] != "none") or "base"


def sort_key(entry: dict) -> tuple:
    s = entry["settings"]
    return (_order(DATA_ORDER, s["data"]), json.dumps(s["budget"], sort_keys=True), _order(METHOD_ORDER, s["method"]),
            _order(VARIANT_ORDER, variant_of(s)), s["seed"], entry["arm"])


def _sections(entries: Iterable[dict]) -> dict[tuple[str, str], dict[str, dict[str, Group]]]:
    """{(data, budget json): {method: {variant: Group}}} in report order."""
    out: dict[tuple[str, str], dict[str, dict[str, Group]]] = {}
    for e in sorted(entries, key=sort_key):
        s = e["settings"]
        section = out.setdefault((s["data"], json.dumps(s["budget"], sort_keys=True)), {})
        section.setdefault(s["method"], {}).setdefault(variant_of(s), Group([])).entries.append(e)
    return out


def _rows(groups: Iterable[Group]) -> list[tuple[str, str, str]]:
    """(call, protocol, metric) in the order the evaluations ran."""
    rows: list[tuple[str, str, str]] = []
    for g in groups:
        for e in g.entries:
            for r in e["records"]:
                key = (r["call"], r["protocol"], r["metric"])
                if key not in rows:
                    rows.append(key)
    return rows


def method_table(method: str, groups: dict[str, Group]) -> str:
    """One method's table: a column per variant (mean ± half-range over seeds), Δ against the base, the paper."""
    variants = [v for v in VARIANT_ORDER if v in groups] + sorted(v for v in groups if v not in VARIANT_ORDER)
    base = groups.get("base")
    first = next(iter(groups.values())).entries[0]
    calls = {c["name"]: c for c in first["settings"]["evals"]}
    head = ["evaluation", "metric"]
    for v in variants:
        g = groups[v]
        head.append(f"{variant_label(g.entries[0]['settings'])} (seed{'s' if len(g.seeds) > 1 else ''} "
                    f"{', '.join(map(str, g.seeds))})")
        if base is not None and v != "base":
            head.append(f"Δ {short_label(g.entries[0]['settings'])} − base")
    with_paper = base is not None and "augself" in groups
    if with_paper:
        head.append("paper: base → AugSelf")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for call, protocol, metric in _rows(groups.values()):
        spec = calls.get(call, {})
        dataset = spec.get("dataset", call)
        label = next((f.split("=", 1)[1] for f in spec.get("flags", []) if f.startswith("--label_key=")), None)
        row = [f"{dataset} {protocol}" + (f" ({label})" if label else ""), metric.replace("_%", " %")]
        for v in variants:
            values = groups[v].values((call, protocol, metric))
            row.append(cell(values, metric))
            if base is not None and v != "base":
                row.append(delta_cell(values, base.values((call, protocol, metric)), metric))
        if with_paper:
            row.append(paper_pair(protocol, dataset, method))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def machine_label(machine: dict) -> str:
    return (f"{machine.get('cores')} cores ({machine.get('cpu')}), Python {machine.get('python')}, "
            f"TensorFlow {machine.get('tensorflow')}")


def commit_label(git: dict) -> str:
    commit = (git.get("commit") or "unknown")[:10]
    return commit + ("-dirty" if git.get("dirty") else "")


def wall_table(entries: Sequence[dict]) -> tuple[str, list[str]]:
    """The wall time of every arm with its machines and commits; returns (table, machine legend lines)."""
    machines: list[str] = []
    lines = ["| arm | training (min) | s/step | evaluation (min) | machine | commit |", "|---|---|---|---|---|---|"]
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
        lines.append(f"| {e['arm']} | {t['seconds'] / 60:.1f} | {'—' if sps is None else f'{sps:.3g}'} | "
                     f"{e['evaluation']['seconds'] / 60:.1f} | {', '.join(labels)} | {', '.join(commits)} |")
    legend = [f"- {chr(ord('A') + i)}: {m}" for i, m in enumerate(machines)]
    return "\n".join(lines), legend


DATA_TITLES = {"tiny": "tiny-imagenet-mini (train split)", "shapes": "embedded `shapes`"}


def render_block(entries: Sequence[dict], pending: Sequence[Arm], curves_link: str | None,
                 ledger_label: str = "reproduce/ledger/", command: str = COMMAND) -> str:
    """The generated block of docs/results.md: a function of the ledger entries (and the pending arms) only."""
    out = ["## Small-scale reproduction (generated from the ledger)", ""]
    if not entries:
        out += [
            f"The ledger (`{ledger_label}`) is empty: no arm has finished yet. Fill it with `{command}`: it runs",
            "the arms that have no entry, resumes an interrupted arm from its checkpoint, and writes one JSON",
            "entry per finished arm (commit them). `--time_budget=MINUTES` starts only arms that fit, so the",
            f"experiment advances in pieces; `{command} --report_only` then regenerates this block.",
            "",
        ]
    else:
        total = sum(e["training"]["seconds"] + e["evaluation"]["seconds"] for e in entries)
        out += [
            f"Generated by `{command} --report_only` from the {len(entries)} "
            f"entr{'y' if len(entries) == 1 else 'ies'} of `{ledger_label}` "
            f"({total / 3600:.1f} h of training and evaluation in all).",
            "Cells: mean ± half-range over the seeds in the column header (one seed: its value). Δ is the",
            "difference of the means; \"(noise)\" marks a Δ within the seed spread (|Δ| ≤ the sum of the two",
            "half-ranges), judged only where both sides have at least two seeds. The paper's figures are its",
            "STL10 ResNet-18 models (localization: ImageNet100 ResNet-50) on the dataset named: a different",
            "dataset and budget, so compare the direction and size of the gap, not the level.",
            "",
        ]
        for (data, budget_json), methods in _sections(entries).items():
            budget = Budget(**json.loads(budget_json))
            out += [f"### {DATA_TITLES.get(data, data)}: {budget.describe()}", ""]
            for method, groups in methods.items():
                out += [f"**{METHOD_NAMES.get(method, method)}**", "", method_table(method, groups), ""]
        if curves_link:
            out += [f"![online monitors per epoch, every seed a line]({curves_link})", "",
                    "Monitor curves (TensorBoard `monitor/*`, weighted kNN on frozen features) per evaluated epoch.",
                    ""]
        table, legend = wall_table(entries)
        out += ["### Wall time, machines and commits", "", table, "", "Machines:", *legend, ""]
    if pending:
        out += ["Arms not yet in the ledger: " + ", ".join(f"`{a.name}`" for a in pending)
                + ". `python reproduce/reproduce_small.py` runs them.", ""]
    return "\n".join(out).rstrip("\n")


def plot_curves(entries: Sequence[dict], path: str) -> str | None:
    """monitor value against epoch, one panel per (data, budget, method) × monitor, one line per seed.

    Returns the path written, or None when no entry has monitor points.
    """
    sections = _sections([e for e in entries if e.get("monitors", {}).get("step")])
    if not sections:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(key, method, groups) for key, methods in sections.items() for method, groups in methods.items()]
    tags_of = {key: sorted({t for methods in [sections[key]] for groups in methods.values()
                            for g in groups.values() for e in g.entries for t in e["monitors"]["values"]})
               for key in sections}
    ncols = max(len(t) for t in tags_of.values())
    fig, axes = plt.subplots(len(rows), ncols, figsize=(4.4 * ncols, 3.2 * len(rows)), squeeze=False)
    colors = {"base": "tab:blue", "augself": "tab:orange", "cond": "tab:green", "augself+cond": "tab:red"}
    for r, (key, method, groups) in enumerate(rows):
        tags = tags_of[key]
        for c in range(ncols):
            ax = axes[r][c]
            if c >= len(tags):
                ax.axis("off")
                continue
            for variant, g in groups.items():
                color = colors.get(variant, "tab:gray")
                for i, e in enumerate(sorted(g.entries, key=lambda x: x["settings"]["seed"])):
                    m = e["monitors"]
                    pts = [(x, y) for x, y in zip(m["epoch"], m["values"].get(tags[c], []), strict=False)
                           if y is not None]
                    if not pts:
                        continue
                    label = f"{variant_label(e['settings'])} ({len(g.seeds)} seed{'s' if len(g.seeds) > 1 else ''})"
                    ax.plot(*zip(*pts, strict=True), color=color, lw=1.2, alpha=0.85, marker="o", markersize=2,
                            label=label if i == 0 else None)
            ax.set_title(f"{key[0]} {METHOD_NAMES.get(method, method)}: monitor/{tags[c]}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def replace_block(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the part between the markers replaced by ``block`` (markers appended if absent)."""
    if begin not in text or end not in text:
        text = text.rstrip("\n") + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    return f"{head}{begin}\n{block}\n{end}{tail}"


def current_block(text: str, begin: str = BEGIN, end: str = END) -> str | None:
    """The generated block of a document, or None without markers."""
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def curves_link(entries: Sequence[dict], results_md: str, curves_png: str) -> str | None:
    """The picture's path relative to the document, when some entry has monitor points to draw."""
    if not any(e.get("monitors", {}).get("step") for e in entries):
        return None
    return os.path.relpath(os.path.abspath(curves_png), os.path.dirname(os.path.abspath(results_md))).replace(
        os.sep, "/")


def suite_entries(entries: Iterable[dict], suite: str = "") -> list[dict]:
    """The entries of one arm set (settings ``suite``, absent = issue 20's): each suite's report reads its own."""
    return [e for e in entries if e["settings"].get("suite", "") == suite]


def report_block(ledger_dir: str, arms: Sequence[Arm], results_md: str, curves_png: str,
                 command: str = COMMAND) -> str:
    """The block ``--report_only`` writes into ``results_md``, from the ledger alone (no picture drawn)."""
    entries = suite_entries(load_entries(ledger_dir))
    done = {e["arm"] for e in entries}
    label = os.path.relpath(os.path.abspath(ledger_dir), ROOT).replace(os.sep, "/") + "/"
    return render_block(entries, [a for a in arms if a.id not in done],
                        curves_link(entries, results_md, curves_png), label, command)


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, curves_png: str,
                 command: str = COMMAND) -> str:
    """Regenerates the curve picture and the block of ``results_md`` from the ledger; returns the block."""
    plot_curves(suite_entries(load_entries(ledger_dir)), curves_png)
    block = report_block(ledger_dir, arms, results_md, curves_png, command)
    text = open(results_md).read() if os.path.exists(results_md) else ""
    new = replace_block(text, block)
    if new != text:
        os.makedirs(os.path.dirname(os.path.abspath(results_md)), exist_ok=True)
        with open(results_md, "w") as f:
            f.write(new)
    return block
