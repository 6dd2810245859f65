"""The arms of the Vision Transformer and DINO evidence at CPU scale (``--suite=vit``).

MoCo v3 and DINO, each ± AugSelf{crop,color}, on the CPU-scale ViT (``vit_pico``: width 96, 4 blocks, 3 heads,
patch 8 at 64 px) and on the ledger's ResNet-18 at width 0.25, at the ledger's budget (tiny-imagenet-mini, 64 px,
batch 128, 120 epochs), with the LooC comparison's three evaluation calls, the recipe sweep's held-out kNN monitor
and BN statistics recomputed as in the comparison suite (a ViT has none to recompute; its LayerNorms are kept).

Each method trains at its own published recipe scaled to the budget (flags/tiny_mocov3_vit_pico_augself.cfg and
flags/base/dino_tiny.cfg; docs/experiments.md, "The ViT and DINO evidence"), except where stated:

- MoCo v3 on the ResNet trains at MoCo v2's ledger recipe (the recipe sweep's choice), so beside MoCo v2 only the
  method differs (symmetric loss, predictor, no queue); its rows wait for MoCo v2's sweep;
- DINO runs 4 local crops of 32 px, not the flagfile's 8: half the student's cost on 2 cores, and AugSelf reads only
  the two global crops;
- DINO on the ResNet: DINO's ResNet-50 recipe (SGD 0.03·B/256, weight decay 1e-4, global crops 0.14-1, local
  0.05-0.14) without its per-parameter clipping (our SGD did not clip when the arm ran), the CPU head of its ViT
  setting; its base stayed at the floor over this budget, so DINO ± AugSelf also train at the recipe sweep's choice
  for DINO (tagged ``ledger``), listed once that sweep is complete.

Each architecture has its never-trained floor at the floor's seeds: the ViT with MoCo v3's fixed sin-cos position
embedding and frozen patch projection (``+sincos``), the ViT with DINO's learned position embedding (``+learned``),
and the ResNet's, which is the LooC comparison's. Seed 0 of every trained row to start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from reproduce import arm_settings, looc_arms, recipe_arms
from reproduce.arm_settings import Arm, Budget

SUITE = "vit"
SEEDS = (0,)
VIT_BUDGET = dataclasses.replace(arm_settings.TINY_BUDGET, backbone="vit_pico", width=1.0)
AUG = arm_settings.DEFAULT_SET

# The ViT's architecture as each method builds it (flags/tiny_mocov3_vit_pico_augself.cfg, flags/base/dino_tiny.cfg).
SINCOS_VIT = (("patch_size", "8"), ("pos_embed", "sincos"), ("stop_grad_conv1", "true"))
LEARNED_VIT = (("patch_size", "8"), ("pos_embed", "learned"), ("drop_path", "0.1"))
# MoCo v3's method (facebookresearch/moco-v3 builder.py, main_moco.py) with its heads at a quarter of their width.
MOCOV3 = (("projector_hidden", "1024"), ("projector_dim", "256"), ("predictor_hidden", "1024"),
          ("moco_momentum", "0.99"), ("momentum_cosine", "true"), ("asymmetric_views", "true"))
# MoCo v3's ViT recipe (its CONFIG.md: AdamW 1.5e-4·B/256, weight decay 0.1, T 0.2), 40 of 300 warm-up epochs kept
# as the same fraction of 120.
MOCOV3_VIT = (*SINCOS_VIT, ("optimizer", "adamw"), ("lr", "1.5e-4"), ("weight_decay", "0.1"),
              ("weight_decay_exclude", "none"), ("warmup_epochs", "16"), ("temperature", "0.2"),
              ("crop_min_scale", "0.08"), *MOCOV3)
# MoCo v3's ResNet-50 setting (CONFIG.md, 100 epochs: T 1.0, its default; crop min 0.2), at MoCo v2's ledger recipe.
MOCOV3_RESNET = (("temperature", "1.0"), ("crop_min_scale", "0.2"), *MOCOV3)
# DINO's method with its own recipe's decay rule and warm-up (12 of 120 epochs: DINO's 10 of 100).
DINO = (*arm_settings.DINO_METHOD, ("weight_decay_exclude", "1d"), ("warmup_epochs", "12"))
DINO_VIT = (*LEARNED_VIT, ("optimizer", "adamw"), ("lr", "0.0005"), ("weight_decay", "0.04"),
            ("weight_decay_end", "0.4"), ("clip_grad", "3.0"), ("global_crop_scale", "0.4,1"),
            ("local_crop_scale", "0.05,0.4"), *DINO)
# DINO's ResNet-50 recipe (its README: SGD 0.03·B/256, weight decay 1e-4), unclipped: the recipe sweep's "own".
DINO_RESNET = (("optimizer", "sgd"), ("lr", "0.03"), ("weight_decay", "1e-4"), *arm_settings.DINO_RESNET_CROPS, *DINO)
# The tag of the DINO ResNet arms at the recipe sweep's choice (its own recipe stays at the floor over this budget).
LEDGER_TAG = "ledger"
# What every trained arm adds: the comparison suite's recomputed BN statistics and the held-out kNN monitor.
COMMON = (*arm_settings.PRECISE_BN_FLAGS, *recipe_arms.SWEEP_MONITOR_FLAGS)


def arm(method: str, augself: str, seed: int, budget: Budget, flags: tuple[tuple[str, str], ...],
        tag: str = "") -> Arm:
    """One trained arm of the suite."""
    return Arm("tiny", method, augself, "none", seed, budget, looc_arms.TABLE_EVALS, flags + COMMON, SUITE, tag=tag)


def vit_floor(tag: str, architecture: tuple[tuple[str, str], ...], seed: int) -> Arm:
    """The never-trained ViT of one architecture (``tag``), exported without a step and evaluated as every arm."""
    return Arm("tiny", "simsiam", "none", "none", seed, dataclasses.replace(VIT_BUDGET, max_steps=0),
               looc_arms.TABLE_EVALS, architecture + arm_settings.PRECISE_BN_FLAGS, SUITE, tag=tag)


def moco_v2_resnet_recipe(entries: Iterable[dict]) -> recipe_arms.Recipe | None:
    """MoCo v2's ledger recipe, which MoCo v3 on the ResNet trains at (None until MoCo v2's sweep is complete)."""
    return recipe_arms.ledger_recipe(entries, "moco")


def dino_resnet_recipe(entries: Iterable[dict]) -> recipe_arms.Recipe | None:
    """DINO's ledger recipe on the ResNet (None until its sweep is complete)."""
    return recipe_arms.ledger_recipe(entries, "dino")


def dino_resnet_arms(recipe: recipe_arms.Recipe | None, seed: int, budget: Budget) -> list[Arm]:
    """DINO on the ResNet: at its own ResNet-50 recipe, then ± AugSelf at the sweep's choice once it is known (tagged
    ``ledger``; if the choice is DINO's own recipe, AugSelf beside that arm instead)."""
    arms = [arm("dino", "none", seed, budget, DINO_RESNET)]
    if recipe is not None and recipe.label == recipe_arms.DINO_OWN:
        arms.append(arm("dino", AUG, seed, budget, DINO_RESNET))
    elif recipe is not None:
        flags = recipe_arms.training_flags("dino", recipe)  # the screened run at the full budget
        arms += [arm("dino", aug, seed, budget, flags, LEDGER_TAG) for aug in ("none", AUG)]
    return arms


def vit_arms(moco_recipe: recipe_arms.Recipe | None, epochs: int | None = None,
             width: float | None = None, dino_recipe: recipe_arms.Recipe | None = None) -> list[Arm]:
    """The suite's arms: the floors, MoCo v3 ± AugSelf on the ViT, MoCo v3 on the ResNet (once MoCo v2's recipe is
    known), DINO ± AugSelf on the ViT, then DINO on the ResNet (:func:`dino_resnet_arms`). ``epochs`` replaces both
    budgets', ``width`` the ResNet's."""
    resnet = dataclasses.replace(arm_settings.TINY_BUDGET,
                                 **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    vit = dataclasses.replace(VIT_BUDGET, epochs=epochs or VIT_BUDGET.epochs)
    arms = [vit_floor(tag, a, s) for tag, a in (("sincos", SINCOS_VIT), ("learned", LEARNED_VIT))
            for s in arm_settings.FLOOR_SEEDS]
    arms += looc_arms.floor_arms(epochs, width)
    for seed in SEEDS:
        arms += [arm("mocov3", aug, seed, vit, MOCOV3_VIT) for aug in ("none", AUG)]
        if moco_recipe is not None:
            arms.append(arm("mocov3", "none", seed, resnet, moco_recipe.flags() + MOCOV3_RESNET))
        arms += [arm("dino", aug, seed, vit, DINO_VIT) for aug in ("none", AUG)]
        arms += dino_resnet_arms(dino_recipe, seed, resnet)
    return arms


def suite_arms(entries: Iterable[dict], epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The suite's arms as the ledger now stands (MoCo v3 on the ResNet listed once MoCo v2's sweep is complete,
    DINO's ResNet arms at the ledger recipe once DINO's is)."""
    entries = list(entries)
    return vit_arms(moco_v2_resnet_recipe(entries), epochs, width, dino_resnet_recipe(entries))
