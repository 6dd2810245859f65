"""The arms of the LooC comparison: the paper's ``table:looc_comparison`` at the ledger's budget.

A second arm set beside the main reproduction's (:func:`main_arms.default_arms`), run by ``reproduce_small.py
--suite=looc``: MoCo v2 ± AugSelf{crop,color}, LooC with each left-out set of the table, and SimSiam ± AugSelf, on
the train split of tiny-imagenet-mini with :data:`arm_settings.TINY_BUDGET`. Every arm carries ``suite="looc"`` and
the table's evaluation list, so its id differs from the main reproduction's arm of the same method and seed: the
ledger's rule (an arm's id hashes its settings, evaluations included) runs it afresh, and the main reproduction's
entries stay where they are and keep serving its report.
"""

from __future__ import annotations

import dataclasses

from reproduce import arm_settings
from reproduce.arm_settings import Arm, Budget, EvalCall

SUITE = "looc"
PLUS_SIGNATURE = "looc_plus_features"
PLUS_SUFFIX = "@plus"  # a LooC++ call's name: the LooC call's name + this (its records carry it as "call")
LOOC_SETS = ("color", "rotation", "color,rotation")

# The table's evaluations, by role; the report finds its columns by these call names. The in-domain call is the
# table's ImageNet-100 column at our scale (linear on the held-out part of the pretraining data set), with the
# probes read off the same features; flowers17 stands in for Flowers-102 (LooC's 5-/10-shot protocol, k images of
# every class, 5 draws), and its full linear probe and cifar10-mini's are the main reproduction's
# transfer columns.
TABLE_EVALS = (
    EvalCall("in_domain", "linear,colorperm,rotation,omega_probe", "tiny-imagenet-mini", 64),
    EvalCall("flowers", "linear,lowshot", "flowers17", 64, ("--lowshot_shots=5,10", "--lowshot_draws=5")),
    EvalCall("cifar10", "linear", "cifar10-mini", 64),
)
# --quick: the same roles on `shapes` (200 images each, 2 draws), so the report's cells fill from a smoke run.
QUICK_EVALS = (
    EvalCall("in_domain", "linear,colorperm,rotation,omega_probe", "shapes", 32,
             ("--max_examples=200", "--omega_probe_max_train_pairs=200")),
    EvalCall("flowers", "lowshot", "shapes", 32, ("--max_examples=200", "--lowshot_shots=5,10", "--lowshot_draws=2")),
)


def plus_calls(calls: tuple[EvalCall, ...]) -> tuple[EvalCall, ...]:
    """Every call twice: on ``serving_default`` (LooC: the backbone) and on ``looc_plus_features`` (LooC++)."""
    plus = tuple(dataclasses.replace(c, name=c.name + PLUS_SUFFIX, flags=(*c.flags, f"--signature={PLUS_SIGNATURE}"))
                 for c in calls)
    return calls + plus


def views_per_image(method: str, looc: str | None) -> int:
    """The table's N: 2 for the two-view methods (± AugSelf), 2 + the left-out augmentations for LooC."""
    return 2 + len(looc.split(",")) if method == "looc" and looc else 2


def table_arm(data: str, method: str, seed: int, budget: Budget, augself: str = "none", looc: str | None = None,
              evals: tuple[EvalCall, ...] = TABLE_EVALS, monitor_flags: tuple[tuple[str, str], ...] = (),
              queue: int = arm_settings.MOCO_QUEUE) -> Arm:
    """One arm of the suite. MoCo and LooC get the ledger's queue (LooC: that many keys in each space's queue)."""
    flags: tuple[tuple[str, str], ...] = (("queue_size", str(queue)),) if method in ("moco", "looc") else ()
    if method == "looc":
        if not looc:
            raise ValueError("a LooC arm needs its left-out set (looc=...)")
        flags += (("looc_augmentations", looc),)
        evals = plus_calls(evals)
    return Arm(data, method, augself, "none", seed, budget, evals, flags + monitor_flags, SUITE)


def floor_arms(epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The table's never-trained floor at every seed of :data:`arm_settings.FLOOR_SEEDS` (the aware suite's too)."""
    tiny = dataclasses.replace(arm_settings.TINY_BUDGET,
                               **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    return [arm_settings.floor_arm(table_arm("tiny", "simsiam", seed, tiny)) for seed in arm_settings.FLOOR_SEEDS]


def looc_table_arms(epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The arms of the LooC comparison, cheapest and most informative first (the runs advance over several sessions).

    The never-trained floor, seed 0 of every row of the table, then seeds 1 and 2 of the MoCo pair, of the SimSiam
    pair, and of LooC (color, rotation). ``epochs`` / ``width`` replace the budget's (new settings, so new ids).
    """
    tiny = dataclasses.replace(arm_settings.TINY_BUDGET,
                               **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})

    def arm(method: str, seed: int, augself: str = "none", looc: str | None = None) -> Arm:
        return table_arm("tiny", method, seed, tiny, augself, looc, monitor_flags=arm_settings.MONITOR_FLAGS)

    aug = arm_settings.DEFAULT_SET
    arms = floor_arms(epochs, width)
    arms += [arm("moco", 0), arm("moco", 0, aug)]
    arms += [arm("looc", 0, looc=s) for s in LOOC_SETS]
    arms += [arm("simsiam", 0), arm("simsiam", 0, aug)]
    for method in ("moco", "simsiam"):
        arms += [arm(method, seed, a) for seed in (1, 2) for a in ("none", aug)]
    arms += [arm("looc", seed, looc="color,rotation") for seed in (1, 2)]
    return arms


def quick_looc_arms() -> list[Arm]:
    """The smoke version: LooC(color) and MoCo v2 on `shapes`, 2 steps at width 1/16, tiny evaluations."""
    return [table_arm("shapes", m, 0, arm_settings.QUICK_BUDGET, looc=s, evals=QUICK_EVALS,
                      monitor_flags=arm_settings.QUICK_MONITOR_FLAGS, queue=64)
            for m, s in (("moco", None), ("looc", "color"))]
