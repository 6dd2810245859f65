"""The arms of the comparison at the ledger recipe (``--suite=comparison``): the README's rows, the augmentation-aware
family with its controls, and the SimCLR rows, each base at the recipe its sweep chose, BN statistics recomputed.

Every arm trains at its base's ledger recipe (:func:`recipe_arms.ledger_recipe`, read from the sweep's entries: a
base is listed once its sweep is complete), at the ledger's budget, with the LooC comparison's three evaluation calls,
the sweep's held-out kNN monitor (the val split, which no column reads: the report checks that each base learned on
it), and its BN statistics recomputed on the train split's images before any evaluation reads them
(:data:`arm_settings.PRECISE_BN_FLAGS`), so no objective's extra views reach the statistics evaluation reads. The
never-trained floor is the LooC comparison's. Rows:

- the README's: SimSiam ± AugSelf{crop,color} and MoCo v2 ± AugSelf;
- the family on SimSiam: CASSLE (the pilot's winner, concat), EquiMod, E-SSL at its SimSiam weight 0.08 and at the
  ImageNet SimCLR weight 0.4 the family's suite ran, STL; and two controls of EquiMod: its NT-Xent between the two
  views' heads alone (no x0, no ω: the negatives it brings), and EquiMod with each view given another image's ω;
- the SimCLR rows: SimCLR ± AugSelf, + EquiMod, + E-SSL (0.4, its SimCLR weight), + STL.

Seeds 0, 1 and 2 of each; the order is the evidence's: the README's rows, the family, then SimCLR. On the seed-0
arm of each row, both exports are evaluated (``@running_bn``: the running statistics training left), so the
report can say how far recomputing the statistics moved each column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from reproduce import arm_settings, looc_arms, recipe_arms
from reproduce.arm_settings import Arm, Budget, EvalCall

SUITE = "comparison"
SEEDS = (0, 1, 2)
RUNNING_BN = "@running_bn"  # the suffix of a call that reads the running statistics (``saved_model``)
CASSLE_KIND = "concat"  # the family suite's pilot winner (docs/results.md, the family's table)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: its label, its base method and what it adds (AugSelf, conditioning, train flags, a tag
    naming a control or a weight), and the label of the row its Δ is taken to."""

    label: str
    method: str
    augself: str = "none"
    condition: str = "none"
    flags: tuple[tuple[str, str], ...] = ()
    tag: str = ""
    baseline: str | None = None

    @property
    def variant(self) -> str:
        """The :attr:`Arm.variant` of the row's arms."""
        return Arm("tiny", self.method, self.augself, self.condition, 0, arm_settings.TINY_BUDGET, (), self.flags,
                   tag=self.tag).variant


AUG = arm_settings.DEFAULT_SET
EQUIMOD, STL = (("equimod_weight", "1"),), (("stl_weight", "1"),)
README_ROWS = (Row("SimSiam", "simsiam"), Row("SimSiam + AugSelf", "simsiam", AUG, baseline="SimSiam"),
               Row("MoCo v2", "moco"), Row("MoCo v2 + AugSelf", "moco", AUG, baseline="MoCo v2"))
EQUIMOD_ROW, NEGATIVES_ROW, SHUFFLED_ROW = ("SimSiam + EquiMod", "SimSiam + EquiMod's negatives alone (control)",
                                            "SimSiam + EquiMod, ω of another image (control)")
ESSL_OWN_ROW, ESSL_ROW = "SimSiam + E-SSL (λ 0.08, its SimSiam weight)", "SimSiam + E-SSL (λ 0.4)"
FAMILY_ROWS = tuple(Row(label, "simsiam", condition=condition, flags=flags, tag=tag, baseline="SimSiam") for
                    label, condition, flags, tag in (
    (f"SimSiam + CASSLE ({CASSLE_KIND})", AUG, (("condition_kind", CASSLE_KIND),), ""),
    (EQUIMOD_ROW, "none", EQUIMOD, ""),
    (NEGATIVES_ROW, "none", (*EQUIMOD, ("equimod_control", "negatives")), "negatives"),
    (SHUFFLED_ROW, "none", (*EQUIMOD, ("equimod_control", "shuffled_omega")), "shuffled_omega"),
    (ESSL_OWN_ROW, "none", (("essl_weight", "0.08"),), "w0.08"),
    (ESSL_ROW, "none", (("essl_weight", "0.4"),), "w0.4"),
    ("SimSiam + STL", "none", STL, ""),
))
SIMCLR_ROWS = (Row("SimCLR", "simclr"), Row("SimCLR + AugSelf", "simclr", AUG, baseline="SimCLR"),
               Row("SimCLR + EquiMod", "simclr", flags=EQUIMOD, baseline="SimCLR"),
               Row("SimCLR + E-SSL (λ 0.4)", "simclr", flags=(("essl_weight", "0.4"),), baseline="SimCLR"),
               Row("SimCLR + STL", "simclr", flags=STL, baseline="SimCLR"))
ROWS = README_ROWS + FAMILY_ROWS + SIMCLR_ROWS
#: What the controls separate, each a difference of two rows (label, row, minus row). EquiMod's three parts add up to
#: its Δ to SimSiam: the negatives its NT-Xent brings, then x0 and its module fed another image's ω, then ω itself.
PARTS = (("EquiMod's negatives (its NT-Xent between the two views, no x0, no ω)", NEGATIVES_ROW, "SimSiam"),
         ("EquiMod's x0 and module, ω of another image", SHUFFLED_ROW, NEGATIVES_ROW),
         ("EquiMod's ω, the true one", EQUIMOD_ROW, SHUFFLED_ROW),
         ("E-SSL at λ 0.4 instead of its SimSiam weight 0.08", ESSL_ROW, ESSL_OWN_ROW))


def running_bn_calls(calls: tuple[EvalCall, ...]) -> tuple[EvalCall, ...]:
    """Every call twice: on the recomputed statistics (the arm's export) and on the running ones (``@running_bn``)."""
    return calls + tuple(dataclasses.replace(c, name=c.name + RUNNING_BN, export="saved_model") for c in calls)


def row_arm(row: Row, seed: int, budget: Budget, recipe: recipe_arms.Recipe,
            evals: tuple[EvalCall, ...] = looc_arms.TABLE_EVALS) -> Arm:
    """The arm of ``row`` at ``seed``, trained at ``recipe``."""
    flags = (recipe_arms.training_flags(row.method, recipe) + row.flags
             + arm_settings.PRECISE_BN_FLAGS + recipe_arms.SWEEP_MONITOR_FLAGS)
    return Arm("tiny", row.method, row.augself, row.condition, seed, budget, evals, flags, SUITE, tag=row.tag)


def comparison_arms(recipes: dict[str, recipe_arms.Recipe | None], epochs: int | None = None,
                    width: float | None = None) -> list[Arm]:
    """The suite's arms for the bases whose recipe is known (``recipes``: method → its ledger recipe or None), in
    the evidence's order: the floor, the README's rows at every seed, the family, then the SimCLR rows; the first
    seed of each row evaluates its running statistics too. ``epochs`` / ``width`` replace the budget's."""
    tiny = dataclasses.replace(arm_settings.TINY_BUDGET,
                               **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    arms = looc_arms.floor_arms(epochs, width)
    both = running_bn_calls(looc_arms.TABLE_EVALS)
    for rows in (README_ROWS, FAMILY_ROWS, SIMCLR_ROWS):
        for seed in SEEDS:
            arms += [row_arm(r, seed, tiny, recipes[r.method], both if seed == SEEDS[0] else looc_arms.TABLE_EVALS)
                     for r in rows if recipes.get(r.method) is not None]
    return arms


def ledger_recipes(entries: Iterable[dict]) -> dict[str, recipe_arms.Recipe | None]:
    """Each base's ledger recipe as the sweep's entries stand (None: its sweep is not complete)."""
    entries = list(entries)
    return {method: recipe_arms.ledger_recipe(entries, method) for method in dict.fromkeys(r.method for r in ROWS)}


def suite_arms(entries: Iterable[dict], epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The suite's arms as the ledger now stands: :func:`comparison_arms` at the recipes its sweep chose."""
    return comparison_arms(ledger_recipes(entries), epochs, width)
