"""The report of the ledger recipe's sweep (``--suite=recipe``): each recipe's held-out kNN curve, summarised, from the
committed ledger entries only.

One row per recipe of reproduce/recipe_arms.py, in its order: the flags it sets, the kNN monitor on the val split
(its first point, the never-trained network; its peak; the mean of its last quarter, the ranking figure), the change
over the second half (the last three points against the three around the middle: a curve that falls is marked), the
collapse diagnostic at the end (SimSiam's ``z_std``: 1/√d spread, 0 collapsed; DINO's teacher target entropy) and the
training rate. Rows without an entry read "not yet run". Written between its own markers of docs/results.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reproduce import doc_blocks, ledger
from reproduce.arm_settings import Arm
from reproduce.recipe_arms import FALL, SCREEN_BUDGET, SUITE, curve_summary, recipe_of
from reproduce.report_parts import NOT_RUN, markdown_table

BEGIN, END = "<!-- reproduce_small_recipe:begin -->", "<!-- reproduce_small_recipe:end -->"
COMMAND = ledger.COMMAND + " --suite=recipe"


def row(arm: Arm, entry: dict | None) -> list[str]:
    """The table row of one recipe's arm."""
    r = recipe_of(arm.settings())
    assert r is not None
    head = [f"{arm.method} {r.label}", f"{r.lr:g}", f"{r.weight_decay:g}", f"{r.warmup_epochs:g}", r.decay_on,
            r.settings_label]
    if entry is None:
        return head + [NOT_RUN, "", "", ""]
    knn = curve_summary(entry["monitors"]["values"].get("knn", []))
    collapse = collapse_at_end(entry)
    rate = entry["training"].get("seconds_per_step")
    if knn is None:
        return head + ["—", "", collapse, f"{rate:.3g}" if rate else "—"]
    fall = knn["second_half"] < -FALL
    curve = f"{100 * knn['start']:.1f} → {100 * knn['peak']:.1f} → **{100 * knn['last_quarter']:.1f}**"
    change = f"{100 * knn['second_half']:+.1f}" + (" (falls)" if fall else "")
    return head + [curve, change, collapse, f"{rate:.3g}" if rate else "—"]


def collapse_at_end(entry: dict) -> str:
    """The last logged collapse diagnostic: SimSiam's ``z_std``, or DINO's teacher target entropy ``H`` (nats)."""
    values = entry.get("diagnostics", {}).get("values", {})
    for name, label, digits in (("z_std", "", 4), ("teacher_entropy", "H ", 2)):
        logged = [x for x in values.get(name, []) if x is not None]
        if logged:
            return f"{label}{logged[-1]:.{digits}f}"
    return "—"


def report_block(ledger_dir: str, arms: Sequence[Arm], command: str = COMMAND) -> str:
    """The markdown block: the sweep's table, how it is judged and the command."""
    by_id = {e["arm"]: e for e in ledger.suite_entries(ledger.load_entries(ledger_dir), SUITE)}
    body = [row(a, by_id.get(a.id)) for a in arms]
    dims = sorted({int(dict(a.train_flags).get("projector_dim", 2048)) for a in arms})
    spread = ", ".join(f"{1 / math.sqrt(d):.4f} at d {d}" for d in dims)
    lines = [
        f"Recipe sweep, {SCREEN_BUDGET.describe()} on tiny-imagenet-mini's train split, seed 0, judged on the **val** "
        "split (no reported column reads it): kNN accuracy % of the val images against the train images, every 2 "
        "epochs, as start (the never-trained network) → peak → **mean of the last quarter** (the ranking figure); "
        f"second half: the last three points against the three around the middle, marked when it falls by more than "
        f"{100 * FALL:g} (one binomial standard deviation near 5% over 500 queries). Collapse at the end: SimSiam's "
        f"z_std (spread: {spread}; collapsed: 0); DINO's teacher target entropy H, in nats (ln K for uniform "
        "targets, 0 for one dominant dimension; the screens before it was logged read —). lr is the base rate "
        "(× batch/256).",
        "",
        *markdown_table(["recipe", "lr", "weight decay", "warm-up epochs", "decay on", "other settings", "kNN val %",
                         "second half", "collapse at end", "s/step"], body),
        "",
        f"Regenerate: `{command} --report_only`; run the rest: `{command}`.",
    ]
    return "\n".join(lines)


def write_report(ledger_dir: str, arms: Sequence[Arm], results_md: str, picture: str | None = None,
                 command: str = COMMAND) -> str:
    """Regenerates the block between this suite's markers of ``results_md``; returns the block (no picture)."""
    del picture
    block = report_block(ledger_dir, arms, command)
    doc_blocks.write_block(results_md, block, BEGIN, END)
    return block
