"""The arms of the ledger recipe's sweep (``--suite=recipe``): learning rate, weight decay, warm-up and head sizes per
method, judged on a split no reported evaluation reads.

At the paper's STL10 recipe cut to the ledger's budget, SimSiam's features stay at the never-trained floor. This
sweep looks for a CPU-scale recipe under which each base learns. Each arm pretrains on tiny-imagenet-mini's train
split at :data:`SCREEN_BUDGET` and has no evaluation call: its kNN monitor classifies the **val** split (the
partition's 10%, which no reported column reads: the tables' linear probes test on its 20% test split) against the
whole train split, every 2 epochs; SimSiam and DINO also log their collapse diagnostics (``collapse/``). The report
(reproduce/recipe_report.py) ranks the recipes by the last quarter of that curve and flags a curve that falls over
its second half.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence

from reproduce import arm_settings
from reproduce.arm_settings import Arm

SUITE = "recipe"
# A screen at a third of the ledger's 120 epochs (1,080 steps): seven recipes fit in a few hours of 2 cores; the
# winner then runs at the full budget in the comparison suites, where its kNN curve is checked again.
SCREEN_BUDGET = dataclasses.replace(arm_settings.TINY_BUDGET, epochs=40)
# kNN of the whole val split (500 images) against the whole train split (3,500): the held-out judge.
SWEEP_MONITOR_FLAGS = (("monitor", "auto"), ("monitor_every", "2"), ("monitor_splits", "train,val"),
                       ("monitor_bank_size", "3500"), ("monitor_query_size", "500"))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One point of the sweep: the train_main flags it sets (base lr scaled by batch/256, weight decay, warm-up
    epochs, the decay's exclusion rule, and optionally other settings: SimSiam's head sizes, DINO's optimizer or
    teacher), how the reports name those other settings, and where the recipe comes from."""

    label: str
    lr: float
    weight_decay: float
    warmup_epochs: float = 0.0
    weight_decay_exclude: str = "none"
    # Set after the rates; where one names a flag of the method's own (METHOD_FLAGS), it takes that flag's place.
    settings: tuple[tuple[str, str], ...] = ()
    settings_label: str = "the method's"
    source: str = ""

    @property
    def decay_on(self) -> str:
        """Which variables the weight decay reaches, as the reports say it."""
        return "all" if self.weight_decay_exclude == "none" else "≥ 2-d only"

    @property
    def rates(self) -> str:
        """``lr 0.3·B/256, weight decay 0.0001, 5 warm-up epochs``, as the reports say it."""
        return f"lr {self.lr:g}·B/256, weight decay {self.weight_decay:g}, {self.warmup_epochs:g} warm-up epochs"

    def describe(self) -> str:
        """``solo (lr 0.5·B/256, …, decay on all, other settings: the method's; solo-learn's …)``."""
        return (f"{self.label} ({self.rates}, decay on {self.decay_on}, other settings: {self.settings_label}; "
                f"{self.source})")

    def flags(self) -> tuple[tuple[str, str], ...]:
        """The train flags, in a fixed order (part of the arm's settings, so of its id)."""
        return (("lr", f"{self.lr:g}"), ("weight_decay", f"{self.weight_decay:g}"),
                ("warmup_epochs", f"{self.warmup_epochs:g}"), ("weight_decay_exclude", self.weight_decay_exclude),
                *self.settings)


def chosen_text(recipe: Recipe | None, whose: str) -> str:
    """How the reports name a base's ledger recipe, or say that ``whose`` sweep has not chosen one yet."""
    if recipe is None:
        return f"not chosen yet ({whose} sweep is not complete; its rows are not listed)"
    return recipe.describe()


# SimSiam's heads sized to the width-0.25 ResNet-18's 128-d feature (official SimSiam: hidden width = the
# backbone's feature size; projector 4x, predictor bottleneck 1/4 of it) instead of the paper's 2048/512.
SMALL_SIMSIAM_HEADS = (("projector_dim", "512"), ("predictor_hidden", "128"))
SMALL_HEADS_LABEL = "projector 512, predictor 128"

# Most needed first: the paper's recipe as the control, then the published small-scale recipes, then the heads.
SIMSIAM_RECIPES = (
    Recipe("paper", 0.03, 5e-4, source="the paper's STL10 recipe (the ledger's until now)"),
    Recipe("solo", 0.5, 1e-5, 5, source="solo-learn's CIFAR SimSiam: lr 0.5·B/256, wd 1e-5, warm-up"),
    Recipe("lightly", 0.12, 5e-4, 5, source="lightly's CIFAR-10 benchmark: lr 0.06 at batch 128, wd 5e-4"),
    Recipe("lightly-small", 0.12, 5e-4, 5, settings=SMALL_SIMSIAM_HEADS, settings_label=SMALL_HEADS_LABEL,
           source="lightly's, heads sized to the feature"),
    Recipe("solo-small", 0.5, 1e-5, 5, settings=SMALL_SIMSIAM_HEADS, settings_label=SMALL_HEADS_LABEL,
           source="solo-learn's, heads sized to the feature"),
    Recipe("paper-warmup", 0.03, 5e-4, 5, source="the paper's with warm-up"),
    Recipe("solo-1d", 0.5, 1e-5, 5, "1d", source="solo-learn's, no decay on biases and BN"),
)
# The bases that already learn at the paper's recipe (MoCo v2, SimCLR: above the floor in every column) get the
# paper's recipe and solo-learn's CIFAR one (mocov2plus: lr 0.3·B/256, wd 1e-4; simclr: lr 0.4·B/256, wd 1e-5; both
# with warm-up), so that each base's ledger recipe is the better of its two on the same judge.
BASE_RECIPES = {
    "moco": (Recipe("paper", 0.03, 5e-4, source="the paper's STL10 recipe"),
             Recipe("solo", 0.3, 1e-4, 5, source="solo-learn's CIFAR MoCo v2+: lr 0.3·B/256, wd 1e-4, warm-up")),
    "simclr": (Recipe("paper", 0.03, 5e-4, source="the paper's STL10 recipe"),
               Recipe("solo", 0.4, 1e-5, 5, source="solo-learn's CIFAR SimCLR: lr 0.4·B/256, wd 1e-5, warm-up")),
}
# DINO on the ResNet: its own ResNet-50 recipe stayed at the never-trained floor over the ledger's budget (kNN val
# 5.0 → 6.4; docs/results.md), so its rate is swept up to the one MoCo v2's sweep chose, 10× DINO's, its decay rule
# and its warm-up (12 of 120 epochs) kept; then its own recipe with the per-parameter clipping DINO runs under SGD
# too (the first arms ran without it, when our SGD did not clip), and with BN in its head as well (DINO's
# --use_bn_in_head; the hypothesis: a ResNet's features, all positive after its last ReLU, are more alike across
# images at the start than a ViT's, and a BN head takes out what they share), at its rate and at 10×; then the two
# other published ways DINO trains: its ViT recipe (AdamW, the one that learned on the ViT at this budget) and
# solo-learn's CIFAR ResNet-18 (two crops, a softer teacher: τ_t 0.07), that one with BN in the head too.
DINO_OWN = "own"
DINO_BN_HEAD = (("clip_grad", "3.0"), ("use_bn_in_head", "true"))
DINO_BN_HEAD_LABEL = "gradients clipped at 3, BN in the head"
DINO_ADAMW = (("optimizer", "adamw"), ("weight_decay_end", "0.4"), ("clip_grad", "3.0"))
# solo-learn's scripts/pretrain/cifar/dino.yaml with solo/methods/dino.py's defaults (no local crops, crop area
# 0.08-1, τ_t 0.07 from the first step: its warm-up epochs default to 0), with SGD for its LARS (as SimCLR's "solo"),
# the blur of DINO's asymmetric pair (its CIFAR views are not blurred) and DINO's teacher momentum 0.996, not its
# 0.9995: over the screen's 1,080 steps a 0.9995 teacher, which is what the monitor and the export read, would average
# over about 2,000 steps, longer than the run.
DINO_SOLO = (("local_crops", "0"), ("global_crop_scale", "0.08,1"), ("teacher_temperature", "0.07"))
DINO_RECIPES = (Recipe(DINO_OWN, 0.03, 1e-4, 12, "1d", source="DINO's ResNet-50 recipe (its README), unclipped"),
                Recipe("own-clip", 0.03, 1e-4, 12, "1d", settings=(("clip_grad", "3.0"),),
                       settings_label="gradients clipped at 3",
                       source="DINO's ResNet-50 recipe with its clipping (main_dino.py --clip_grad 3.0)"),
                Recipe("bn-head", 0.03, 1e-4, 12, "1d", settings=DINO_BN_HEAD,
                       settings_label=DINO_BN_HEAD_LABEL,
                       source="DINO's ResNet-50 recipe with its clipping and its --use_bn_in_head"),
                Recipe("bn-head-x10", 0.3, 1e-4, 12, "1d", settings=DINO_BN_HEAD,
                       settings_label=DINO_BN_HEAD_LABEL,
                       source="the BN-head screen at 10× DINO's rate: MoCo v2's ledger rate"),
                Recipe("dino-x3", 0.1, 1e-4, 12, "1d", source="DINO's at 3× its rate"),
                Recipe("dino-x10", 0.3, 1e-4, 12, "1d", source="DINO's at 10× its rate: MoCo v2's ledger rate"),
                Recipe("adamw", 0.0005, 0.04, 12, "1d", settings=DINO_ADAMW,
                       settings_label="AdamW, weight decay → 0.4, clip 3", source="DINO's ViT recipe (its README)"),
                Recipe("solo", 0.3, 1e-6, 10, "1d", settings=DINO_SOLO,
                       settings_label="2 crops of area 0.08-1, τ_t 0.07",
                       source="solo-learn's CIFAR DINO ResNet-18, SGD for LARS"),
                Recipe("solo-bn", 0.3, 1e-6, 10, "1d", settings=(*DINO_SOLO, ("use_bn_in_head", "true")),
                       settings_label="2 crops of area 0.08-1, τ_t 0.07, BN in the head",
                       source="solo-learn's CIFAR DINO with its use_bn_in_head"))
RECIPES = {"simsiam": SIMSIAM_RECIPES, **BASE_RECIPES, "dino": DINO_RECIPES}
# What a method's arm needs besides the recipe: MoCo's queue at the ledger's length (reproduce/arm_settings.py);
# DINO's method, its ResNet crops and SGD.
METHOD_FLAGS = {"moco": (("queue_size", str(arm_settings.MOCO_QUEUE)),),
                "dino": (("optimizer", "sgd"), *arm_settings.DINO_RESNET_CROPS, *arm_settings.DINO_METHOD)}


def training_flags(method: str, recipe: Recipe) -> tuple[tuple[str, str], ...]:
    """What ``method`` trains with at ``recipe``: the recipe's flags, then the method's own (METHOD_FLAGS) that the
    recipe does not set."""
    own = {k for k, _ in recipe.flags()}
    return recipe.flags() + tuple((k, v) for k, v in METHOD_FLAGS.get(method, ()) if k not in own)


def recipe_arm(method: str, recipe: Recipe, seed: int = 0) -> Arm:
    """The sweep's arm of ``recipe`` for ``method``: no evaluation calls, the held-out kNN monitor."""
    flags = training_flags(method, recipe) + SWEEP_MONITOR_FLAGS
    return Arm("tiny", method, "none", "none", seed, SCREEN_BUDGET, (), flags, SUITE, tag=recipe.label)


def recipe_of(settings: dict) -> Recipe | None:
    """The recipe of a sweep entry's settings (by its method and train flags), or None."""
    flags = dict(settings["train_flags"])
    return next((r for r in RECIPES.get(settings["method"], ())
                 if dict(recipe_arm(settings["method"], r).train_flags) == flags), None)


def sweep_arms() -> list[Arm]:
    """Every method's recipes, in :data:`RECIPES` order (SimSiam's first: the base that does not learn yet)."""
    return [recipe_arm(method, r) for method, recipes in RECIPES.items() for r in recipes]


# A fall over the second half larger than this is marked: about one binomial standard deviation of a kNN accuracy
# near 5% over the 500 val queries (sqrt(0.05·0.95/500) = 0.0097).
FALL = 0.01


def curve_summary(values: Sequence[float | None]) -> dict[str, float] | None:
    """start, peak, last-quarter mean and second-half change of a monitor curve (None points dropped)."""
    v = [x for x in values if x is not None]
    if len(v) < 4:
        return None
    mid = len(v) // 2
    change = statistics.fmean(v[-3:]) - statistics.fmean(v[max(0, mid - 1):mid + 2])
    # Rounded so that a change of exactly FALL (monitor values are multiples of 1/queries) is not marked by float noise.
    return {"start": v[0], "peak": max(v), "last_quarter": statistics.fmean(v[-max(1, len(v) // 4):]),
            "second_half": round(change, 9)}


def ledger_recipe(entries: Iterable[dict], method: str) -> Recipe | None:
    """The ledger recipe of ``method``, read from its sweep entries: the recipe whose held-out kNN curve has the
    highest last-quarter mean among those that do not fall over the second half (by more than :data:`FALL`); if
    every curve falls, the highest of all. None until every recipe of the method has its entry (as the CASSLE
    pilot's winner, the choice is made once, on the whole sweep)."""
    by_id = {e["arm"]: e for e in entries}
    scored = []
    for order, recipe in enumerate(RECIPES.get(method, ())):
        entry = by_id.get(recipe_arm(method, recipe).id)
        if entry is None:
            return None
        s = curve_summary(entry["monitors"]["values"].get("knn", []))
        if s is not None:
            scored.append((s["second_half"] >= -FALL, s["last_quarter"], -order, recipe))
    return max(scored, key=lambda x: x[:3])[3] if scored else None
