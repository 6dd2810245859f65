"""Result records, the results JSON, and the markdown table with the paper's figures beside ours.

A record is one (model, protocol, dataset) result::

    {"model", "protocol", "dataset", "metric", "value", "ci95", "n_train", "n_test", "settings", "seconds"}

``value`` uses the paper's units (accuracies in %, localization error as is, invariance as a cosine);
``ci95`` is the half-width of the 95% interval or None; pictures are listed in ``settings["figure"]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from augself_tf.data.catalog import canonical_key
from augself_tf.evaluation import paper_results
from augself_tf.runtime import files

RECORD_KEYS: tuple[str, ...] = (
    "model", "protocol", "dataset", "metric", "value", "ci95", "n_train", "n_test", "settings", "seconds",
)


def make_record(
    *,
    model: str,
    protocol: str,
    dataset: str,
    metric: str,
    value: float,
    ci95: float | None = None,
    n_train: int | None = None,
    n_test: int | None = None,
    settings: dict | None = None,
    seconds: float = 0.0,
) -> dict:
    """One JSON-ready result record (numbers made plain Python floats/ints)."""
    return {
        "model": model,
        "protocol": protocol,
        "dataset": dataset,
        "metric": metric,
        "value": float(value),
        "ci95": None if ci95 is None else float(ci95),
        "n_train": None if n_train is None else int(n_train),
        "n_test": None if n_test is None else int(n_test),
        "settings": _plain(settings or {}),
        "seconds": round(float(seconds), 3),
    }


def _plain(obj: object) -> object:
    """numpy scalars/arrays -> Python values, recursively (JSON-safe; NaN -> None)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _plain(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def record_key(record: dict) -> tuple[str, str, str]:
    """Identity of a record: (model, protocol, dataset)."""
    return record["model"], record["protocol"], record["dataset"]


def save_records(records: Sequence[dict], path: str, *, merge: bool = True) -> list[dict]:
    """Write records as a JSON list; with ``merge``, keep existing records of other (model, protocol, dataset).

    Returns:
      The records written (existing ones first, in their order, replaced in place when re-run).
    """
    existing: list[dict] = []
    if merge and files.exists(path):
        try:
            loaded = json.loads(files.read_text(path))
            if isinstance(loaded, list):
                existing = [r for r in loaded if isinstance(r, dict) and all(k in r for k in RECORD_KEYS[:3])]
        except (OSError, ValueError):
            existing = []
    new = {record_key(r): r for r in records}
    out = [new.pop(record_key(r), r) for r in existing]
    out.extend(r for r in records if record_key(r) in new)
    files.makedirs(files.parent(path))
    files.replace_text(path, json.dumps(out, indent=1))
    return out


def format_value(metric: str, value: float | None, ci95: float | None = None) -> str:
    """Display a value in the paper's precision for its metric."""
    if value is None:
        return "—"
    if metric.endswith("%"):
        digits = 2
    elif metric in ("cosine",):
        digits = 4
    else:
        digits = 5
    text = f"{value:.{digits}f}"
    if ci95 is not None:
        text += f" ± {ci95:.{digits}f}"
    return text


def _short_pretrain(pretrain: str) -> str:
    return pretrain.replace("ImageNet100 ResNet-50", "IN100 R50").replace("STL10 ResNet-18", "STL10 R18")


def paper_summary(protocol: str, dataset: str) -> str:
    """Compact paper figures for a table cell: the SimSiam → +AugSelf pair (STL10 R18 preferred)."""
    entries = paper_results.lookup(protocol, dataset)
    if not entries:
        return ""
    for pre in dict.fromkeys([paper_results.STL, paper_results.IN100, *(e.pretrain for e in entries)]):
        base = [e for e in entries if e.pretrain == pre and e.method == "SimSiam"]
        ours = [e for e in entries if e.pretrain == pre and e.method == "SimSiam+AugSelf"]
        if base and ours:
            b, o = base[0], ours[0]
            return f"SimSiam {b.value:g} → +AugSelf {o.value:g} ({_short_pretrain(pre)})"
    e = entries[0]
    return f"{e.method} {e.value:g} ({_short_pretrain(e.pretrain)})"


def markdown_table(records: Iterable[dict], *, paper: bool = True) -> str:
    """One row per (protocol, dataset, metric), one column per model, plus the paper's figures.

    A cell shows value ± ci95, or value ± std when the record's settings give ``std_%`` (a standard deviation
    over draws, as the paper's LooC table gives its ±).

    Below the table, every paper entry for the rows shown is listed (method, pretraining, value).
    """
    records = list(records)
    if not records:
        return "(no results)"
    models: list[str] = []
    rows: list[tuple[str, str, str]] = []
    cells: dict[tuple[tuple[str, str, str], str], str] = {}
    for r in records:
        if r["model"] not in models:
            models.append(r["model"])
        row = (r["protocol"], r["dataset"], r["metric"])
        if row not in rows:
            rows.append(row)
        std = (r.get("settings") or {}).get("std_%")  # a spread over draws (lowshot): shown as LooC shows it
        cells[(row, r["model"])] = format_value(r["metric"], r["value"], r.get("ci95")) if std is None \
            else f"{format_value(r['metric'], r['value'])} ± {std:.2f} sd"
    header = ["protocol", "dataset", "metric", *models]
    if paper:
        header.append("paper")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        line = [*row, *(cells.get((row, m), "") for m in models)]
        if paper:
            line.append(paper_summary(row[0], row[1]))
        lines.append("| " + " | ".join(line) + " |")
    if paper:
        details = []
        for proto, ds, _metric in rows:
            entries = paper_results.lookup(proto, ds)
            if not entries:
                continue
            by_pre: dict[str, list[str]] = {}
            for e in entries:
                val = f"{e.value:g}" + (f" ± {e.ci95:g}" if e.ci95 is not None else "") \
                    + (f" ± {e.std:g} sd" if e.std is not None else "")
                by_pre.setdefault(_short_pretrain(e.pretrain), []).append(f"{e.method} {val}")
            where = canonical_key(ds) if entries[0].dataset else "dataset not stated"
            parts = "; ".join(f"{pre}: " + ", ".join(v) for pre, v in by_pre.items())
            details.append(f"- {proto} / {where}: {parts}")
        if details:
            lines += ["", "Paper figures (same protocol and dataset):", *details]
    return "\n".join(lines)
