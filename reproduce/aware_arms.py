"""The arms of the augmentation-aware family's comparison (``--suite=aware``): AugSelf, CASSLE, EquiMod, E-SSL and
STL on one pipeline, budget and evaluation.

Two bases. SimSiam, where AugSelf's effect shows at the ledger's scale, over 3 seeds: SimSiam; + AugSelf{crop,color};
+ CASSLE (a seed-0 pilot of the four condition kinds, then seeds 1 and 2 of the pilot's winner); + EquiMod; + E-SSL;
+ STL. SimCLR, the base of EquiMod's, E-SSL's and STL's papers, at seed 0: SimCLR; + AugSelf; + EquiMod; + E-SSL;
+ STL. Evaluations are the LooC comparison's (:data:`looc_arms.TABLE_EVALS`).

SimSiam ± AugSelf are the LooC comparison's own arms (its settings, its suite tag): the ledger's rule (an entry is
reused when its settings equal an arm's) then serves them from its entries instead of training them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from reproduce import arm_settings, looc_arms
from reproduce.arm_settings import Arm, Budget, EvalCall

SUITE = "aware"
CONDITION_KINDS = ("concat", "add", "mul", "hypernet")
CASSLE_SET = arm_settings.DEFAULT_SET  # the descriptors CASSLE's projector reads: AugSelf's ω, for a like comparison
# Each family member's switch and the weight of its paper's headline setting (E-SSL: 0.4 on ImageNet; STL's and
# EquiMod's: 1). What each flag does: docs/experiments.md (its EquiMod, STL and E-SSL sections).
OBJECTIVE_FLAGS = {"equimod": ("equimod_weight", "1"), "essl": ("essl_weight", "0.4"), "stl": ("stl_weight", "1")}
SEEDS = (0, 1, 2)
# The table's columns, (call, protocol), all top-1 or accuracy %: the LooC table's evaluations in one row. The pilot's
# score (:func:`pilot_score`) is their mean, and the report's columns are these in this order.
TABLE_COLUMNS = (("in_domain", "linear"), ("in_domain", "colorperm"), ("in_domain", "rotation"),
                 ("flowers", "linear"), ("flowers", "lowshot_5shot"), ("flowers", "lowshot_10shot"),
                 ("cifar10", "linear"))
# N, the images per source image a step's backbone sees, by each objective's design (docs/experiments.md, its
# EquiMod, STL and E-SSL sections): EquiMod adds the unaugmented view x0; E-SSL one small extra crop in its four
# rotations; STL pairs images that share a transformation, not extra views of one image.
VIEWS_PER_IMAGE = {"equimod": "3", "essl": "2 + 4 small", "stl": "2"}


def aware_arm(method: str, seed: int, budget: Budget, *, augself: str = "none", condition: str = "none",
              flags: tuple[tuple[str, str], ...] = (), evals: tuple[EvalCall, ...] = looc_arms.TABLE_EVALS,
              monitor_flags: tuple[tuple[str, str], ...] = arm_settings.MONITOR_FLAGS, data: str = "tiny") -> Arm:
    """One arm of the suite."""
    return Arm(data, method, augself, condition, seed, budget, evals, flags + monitor_flags, SUITE)


def cassle_flags(kind: str) -> tuple[tuple[str, str], ...]:
    """The train flags of a CASSLE arm with condition kind ``kind``."""
    return (("condition_kind", kind),)


def pilot_score(entry: dict) -> float:
    """A pilot entry's score: the mean of its values in the :data:`TABLE_COLUMNS` (a column it lacks counts as 0,
    so an entry cannot win by a missing evaluation)."""
    found = {(r["call"], r["protocol"]): float(r["value"]) for r in entry["records"] if r["value"] is not None}
    return sum(found.get(c, 0.0) for c in TABLE_COLUMNS) / len(TABLE_COLUMNS)


def views_per_image(arm: Arm) -> str:
    """The table's N of an arm: 2 for the two-view methods, ± AugSelf or CASSLE; each family member's own."""
    flags = dict(arm.train_flags)
    if flags.get("equimod_control") == "negatives":  # the control that leaves x0 out
        return "2"
    if "local_crops" in flags:  # multi-crop: the global crops and the local ones
        return str(int(flags.get("global_crops", "2")) + int(flags["local_crops"]))
    return next((VIEWS_PER_IMAGE[n] for n, (flag, _) in OBJECTIVE_FLAGS.items() if flag in flags), "2")


def pilot(arms: Iterable[Arm]) -> list[Arm]:
    """The CASSLE pilot among ``arms``: the seed-0 arms with a condition kind, in :data:`CONDITION_KINDS` order."""
    return [a for a in arms if a.seed == 0 and "condition_kind" in dict(a.train_flags)]


def winner(entries: Iterable[dict], arms: Iterable[Arm]) -> str | None:
    """The CASSLE pilot's winner among ``arms`` by :func:`pilot_score` (None until every pilot arm has its entry)."""
    return pilot_winner(entries, pilot(arms), pilot_score)


def suite_arms(entries: Iterable[dict], epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The suite's arms as the ledger now stands: :func:`aware_arms` with the pilot's winner read from
    ``entries``."""
    entries = list(entries)
    return aware_arms(epochs, width, winner(entries, aware_arms(epochs, width)))


def pilot_winner(entries: Iterable[dict], pilot: list[Arm], score) -> str | None:
    """The condition kind whose seed-0 pilot entry scores highest (``score(entry)``), or None until every pilot arm
    has its entry, or without a pilot (ties: the first kind in :data:`CONDITION_KINDS`)."""
    if not pilot:
        return None
    by_id = {e["arm"]: e for e in entries}
    scores = []
    for arm in pilot:
        if arm.id not in by_id:
            return None
        scores.append((score(by_id[arm.id]), -CONDITION_KINDS.index(dict(arm.train_flags)["condition_kind"]),
                       dict(arm.train_flags)["condition_kind"]))
    return max(scores)[2]


def aware_arms(epochs: int | None = None, width: float | None = None, winner: str | None = None) -> list[Arm]:
    """The suite's arms, most informative first (the runs advance over several sessions): seed 0 of every SimSiam
    row (the family beside AugSelf, then the CASSLE pilot), the SimCLR rows, then seeds 1 and 2.

    ``winner`` is the CASSLE kind that won the seed-0 pilot (:func:`pilot_winner`); its seeds 1 and 2 are listed
    once it is known. ``epochs`` / ``width`` replace the budget's (new settings, so new ids).
    """
    tiny = dataclasses.replace(arm_settings.TINY_BUDGET,
                               **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    aug = arm_settings.DEFAULT_SET

    def simsiam_pair(seed: int) -> list[Arm]:  # the LooC comparison's own arms: reused from the ledger
        return [looc_arms.table_arm("tiny", "simsiam", seed, tiny, a, monitor_flags=arm_settings.MONITOR_FLAGS)
                for a in ("none", aug)]

    def family(method: str, seed: int) -> list[Arm]:
        return [aware_arm(method, seed, tiny, flags=(OBJECTIVE_FLAGS[name],)) for name in OBJECTIVE_FLAGS]

    arms = looc_arms.floor_arms(epochs, width) + simsiam_pair(0) + family("simsiam", 0)
    arms += [aware_arm("simsiam", 0, tiny, condition=CASSLE_SET, flags=cassle_flags(k)) for k in CONDITION_KINDS]
    arms += [aware_arm("simclr", 0, tiny), aware_arm("simclr", 0, tiny, augself=aug)] + family("simclr", 0)
    for seed in SEEDS[1:]:
        arms += simsiam_pair(seed)
        if winner:
            arms.append(aware_arm("simsiam", seed, tiny, condition=CASSLE_SET, flags=cassle_flags(winner)))
        arms += family("simsiam", seed)
    return arms


def quick_aware_arms() -> list[Arm]:
    """The smoke version: SimSiam + CASSLE (hypernet) and SimSiam + each family member on `shapes`, 2 steps."""
    def arm(condition: str = "none", flags: tuple[tuple[str, str], ...] = ()) -> Arm:
        return aware_arm("simsiam", 0, arm_settings.QUICK_BUDGET, condition=condition, flags=flags,
                         evals=looc_arms.QUICK_EVALS, monitor_flags=arm_settings.QUICK_MONITOR_FLAGS, data="shapes")
    return [arm(CASSLE_SET, cassle_flags("hypernet")), *(arm(flags=(f,)) for f in OBJECTIVE_FLAGS.values())]
