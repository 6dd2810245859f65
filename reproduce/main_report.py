"""The report of the main reproduction's arms (``--suite=main``), made from the ledger entries alone.

A table per (data, budget, method): a column per variant (base, +AugSelf, +cond) with mean ± half-range over
seeds, Δ against the base, and the paper's figures where it reports the same protocol; the online monitors'
curves as one picture; the wall-time table. Written between this suite's markers of docs/results.md, so it can
be rebuilt anywhere from the committed files. The LooC table's report is reproduce/looc_report.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from reproduce import doc_blocks, ledger
from reproduce.arm_settings import NEVER_TRAINED, VARIANT_ORDER, Arm, Budget, sort_key, variant_of
from reproduce.seed_cells import FLOOR_MARK, Group, at_floor, cell, delta_cell
from reproduce.wall_table import wall_table

BEGIN, END = "<!-- reproduce_small:begin -->", "<!-- reproduce_small:end -->"
METHOD_NAMES = {"simsiam": "SimSiam", "moco": "MoCo v2", "byol": "BYOL", "simclr": "SimCLR", "swav": "SwAV"}

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


def _section_key(settings: dict) -> tuple[str, str]:
    """(data, budget json); a floor's budget without its ``max_steps`` of 0: it joins the section it is the floor of."""
    budget = dict(settings["budget"])
    if budget.get("max_steps") == 0:
        budget["max_steps"] = None
    return settings["data"], json.dumps(budget, sort_keys=True)


def _sections(entries: Iterable[dict]) -> dict[tuple[str, str], dict[str, dict[str, Group]]]:
    """{(data, budget json): {method: {variant: Group}}} in report order; the never-trained floors left out
    (:func:`_floors`)."""
    out: dict[tuple[str, str], dict[str, dict[str, Group]]] = {}
    for e in sorted(entries, key=sort_key):
        s = e["settings"]
        if variant_of(s) == NEVER_TRAINED:
            continue
        section = out.setdefault(_section_key(s), {})
        section.setdefault(s["method"], {}).setdefault(variant_of(s), Group([])).entries.append(e)
    return out


def _floors(entries: Iterable[dict]) -> dict[tuple[str, str], Group]:
    """{(data, budget json): the never-trained floor's seeds} of the sections that have one."""
    out: dict[tuple[str, str], Group] = {}
    for e in sorted(entries, key=sort_key):
        if variant_of(e["settings"]) == NEVER_TRAINED:
            out.setdefault(_section_key(e["settings"]), Group([])).entries.append(e)
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


def method_table(method: str, groups: dict[str, Group], floor: Group | None = None) -> str:
    """One method's table: the never-trained floor's column when there is one, a column per variant (mean ±
    half-range over seeds, `` ≈ floor`` within the floor's spread), Δ against the base, the paper."""
    variants = [v for v in VARIANT_ORDER if v in groups] + sorted(v for v in groups if v not in VARIANT_ORDER)
    base = groups.get("base")
    first = next(iter(groups.values())).entries[0]
    calls = {c["name"]: c for c in first["settings"]["evals"]}
    head = ["evaluation", "metric"]
    if floor is not None:
        head.append(f"never trained (seed{'s' if len(floor.seeds) > 1 else ''} {', '.join(map(str, floor.seeds))})")
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
        floor_values = floor.values((call, protocol, metric)) if floor is not None else None
        if floor is not None:
            row.append(cell(floor_values, metric))
        for v in variants:
            values = groups[v].values((call, protocol, metric))
            row.append(cell(values, metric) + (FLOOR_MARK if at_floor(values, floor_values) else ""))
            if base is not None and v != "base":
                row.append(delta_cell(values, base.values((call, protocol, metric)), metric))
        if with_paper:
            row.append(paper_pair(protocol, dataset, method))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


DATA_TITLES = {"tiny": "tiny-imagenet-mini (train split)", "shapes": "embedded `shapes`"}


def render_block(entries: Sequence[dict], pending: Sequence[Arm], curves_link: str | None,
                 ledger_label: str = "reproduce/ledger/", command: str = ledger.COMMAND) -> str:
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
            "dataset and budget, so compare the direction and size of the gap, not the level. \"never trained\":",
            "the initialised network (no step), its BN statistics recomputed on the pretraining split's images",
            "(`--precise_bn_images`), evaluated by the same calls; \"≈ floor\" marks a cell within its seed spread",
            "(|Δ| to its mean ≤ the two half-ranges, judged where the floor has at least two seeds).",
            "",
        ]
        floors = _floors(entries)
        for key, methods in _sections(entries).items():
            budget = Budget(**json.loads(key[1]))
            out += [f"### {DATA_TITLES.get(key[0], key[0])}: {budget.describe()}", ""]
            for method, groups in methods.items():
                out += [f"**{METHOD_NAMES.get(method, method)}**", "", method_table(method, groups, floors.get(key)),
                        ""]
        if curves_link:
            out += [f"![online monitors per epoch, every seed a line]({curves_link})", "",
                    "Monitor curves (TensorBoard `monitor/*`, weighted kNN on frozen features) per evaluated epoch.",
                    ""]
        table, legend = wall_table(entries)
        out += ["### Wall time, machines and commits", "", table, "", "Machines:", *legend, ""]
    if pending:
        out += ["Arms not yet in the ledger: " + ", ".join(f"`{a.name}`" for a in pending)
                + f". `{command}` runs them.", ""]
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


def curves_link(entries: Sequence[dict], results_md: str, curves_png: str) -> str | None:
    """The picture's path relative to the document, when some entry has monitor points to draw."""
    if not any(e.get("monitors", {}).get("step") for e in entries):
        return None
    return doc_blocks.relative_link(curves_png, results_md)


def report_block(ledger_dir: str, arms: Sequence[Arm], results_md: str, curves_png: str,
                 command: str = ledger.COMMAND) -> str:
    """The block ``--report_only`` writes into ``results_md``, from the ledger alone (no picture drawn)."""
    entries = ledger.suite_entries(ledger.load_entries(ledger_dir))
    done = {e["arm"] for e in entries}
    label = os.path.relpath(os.path.abspath(ledger_dir), ledger.ROOT).replace(os.sep, "/") + "/"
    return render_block(entries, [a for a in arms if a.id not in done],
                        curves_link(entries, results_md, curves_png), label, command)


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, curves_png: str,
                 command: str = ledger.COMMAND) -> str:
    """Regenerates the curve picture and the block of ``results_md`` from the ledger; returns the block."""
    plot_curves(ledger.suite_entries(ledger.load_entries(ledger_dir)), curves_png)
    block = report_block(ledger_dir, arms, results_md, curves_png, command)
    doc_blocks.write_block(results_md, block, BEGIN, END)
    return block
