"""An arm of the ledger and its settings: what one pretraining run and its evaluations are, and the id they hash to.

An *arm* is one pretraining run plus its evaluations: data, method, AugSelf set, conditioning set, seed and
budget. Its *settings* (everything that decides its numbers) hash to a stable id, the file name of its ledger
entry (reproduce/ledger.py). Here too: the budgets and monitor flags both arm sets share (the main reproduction's
in reproduce/main_arms.py, the LooC table's in reproduce/looc_arms.py), choosing arms by glob (``--arms``), and the
order the reports list entries in.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
from collections.abc import Sequence

# Logical dataset names: a spec is made from them with the data directory of the machine (--data), so
# neither an arm's id nor its ledger entry depends on where the images live.
FOLDER_DATASETS = ("tiny-imagenet-mini", "cifar10-mini", "flowers17")
DATA_NAMES = {"tiny": "tiny-imagenet-mini", "shapes": "shapes"}
DEFAULT_SET = "crop,color"
# The augmentation-aware objectives' switches: an arm that sets one is named after it (``tiny-simclr-equimod-s0``).
OBJECTIVE_WEIGHT_FLAGS = ("equimod_weight", "essl_weight", "stl_weight")
NEVER_TRAINED = "never_trained"  # the floor's variant and name: the initialised network, evaluated as every arm


def dataset_spec(name: str, data_dir: str) -> str:
    """The dataset flag of a logical name: ``folder:<data_dir>/<name>`` for the shared folders, else as is."""
    return f"folder:{os.path.join(data_dir, name)}" if name in FOLDER_DATASETS else name


# ----------------------------------------------------------------------------------------------------
# An arm and its id


@dataclasses.dataclass(frozen=True)
class Budget:
    """The compute of one pretraining run (``max_steps`` only for smoke runs)."""

    epochs: int
    width: float
    image_size: int
    batch_size: int
    backbone: str
    max_steps: int | None = None

    @property
    def is_vit(self) -> bool:
        """A Vision Transformer: sized by its name (``vit_pico``), so ``width`` is not passed to training."""
        return self.backbone.startswith("vit")

    def describe(self) -> str:
        """``resnet18 width 0.25, 64 px, batch 128, 120 epochs`` (``vit_pico, 64 px, …`` for a ViT)."""
        size = self.backbone if self.is_vit else f"{self.backbone} width {self.width:g}"
        text = f"{size}, {self.image_size} px, batch {self.batch_size}, "
        if self.max_steps == 0:
            return text + "never trained"
        return text + f"{self.epochs} epochs" + (f" (at most {self.max_steps} steps)" if self.max_steps else "")

    @property
    def never_trained(self) -> bool:
        """A floor's budget: the initialised network is exported without a step (``--max_steps=0``)."""
        return self.max_steps == 0


@dataclasses.dataclass(frozen=True)
class EvalCall:
    """One eval_main call on an arm's SavedModel; its records are tagged with ``name``."""

    name: str
    protocols: str
    dataset: str  # logical name (see dataset_spec)
    image_size: int
    flags: tuple[str, ...] = ()
    # The export the call reads, when not the arm's own choice (Arm.saved_model): "saved_model" on an arm that
    # recomputes its BN statistics reads the running statistics training left, to measure what recomputing moved.
    export: str = ""

    def settings(self) -> dict:
        """The call as plain JSON, part of its arm's settings (``export`` only when set, so the calls that read
        the arm's own export keep the ids they had before the field existed)."""
        out = dataclasses.asdict(self) | {"flags": list(self.flags)}
        return out if self.export else {k: v for k, v in out.items() if k != "export"}

    @property
    def key(self) -> str:
        """``<name>-<8 hex digits of the call's hash>``: where a run directory keeps the call's output, so a call
        whose flags change is redone while the others (and the training) are kept."""
        return f"{self.name}-{settings_hash(self.settings())}"

    def args(self, data_dir: str) -> list[str]:
        """eval_main arguments except --saved_model and --output."""
        return [f"--protocol={self.protocols}", f"--dataset={dataset_spec(self.dataset, data_dir)}",
                f"--image_size={self.image_size}", *self.flags]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One pretraining run and its evaluations.

    ``augself`` and ``condition`` are comma lists of ω names or ``none``; ``train_flags`` are further
    train_main flags that change the result (queue size, monitor cadence, LooC's left-out set), as (name, value)
    pairs. ``suite`` names the arm set the arm belongs to ("" = the main reproduction's; "looc" = the LooC
    comparison's): it is in the
    settings (and so the id) only when not empty, and each suite's report reads only its own entries. ``tag`` names
    what the name would not show (a recipe sweep's point); it is in the name, not in the settings.
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
    tag: str = ""  # a name for what the settings vary that the name does not show (a sweep's recipe); not hashed

    @property
    def saved_model(self) -> str:
        """The export its evaluations read: ``saved_model_precise_bn`` when the arm recomputes its BN statistics
        (``--precise_bn_images``, the comparisons' arms), else the run's own ``saved_model``."""
        return "saved_model_precise_bn" if "precise_bn_images" in dict(self.train_flags) else "saved_model"

    def export_of(self, call: EvalCall) -> str:
        """The export ``call`` reads: its own ``export`` when set, else :attr:`saved_model`."""
        return call.export or self.saved_model

    @property
    def variant(self) -> str:
        """``base``, ``augself``, ``cond``, ``augself+cond`` (with the set when it is not crop,color); for LooC
        its left-out set (``color_rotation``), with ``+augself`` when AugSelf is on too; then the condition kind
        when set (``cond+hypernet``) and each augmentation-aware objective switched on (``equimod``); ``never_trained``
        for a floor, whatever its method."""
        if self.budget.never_trained:
            return NEVER_TRAINED
        parts = []
        if self.method == "looc":
            parts.append(dict(self.train_flags).get("looc_augmentations", "default").replace(",", "_"))
        for label, value in (("augself", self.augself), ("cond", self.condition)):
            if value != "none":
                parts.append(label if value == DEFAULT_SET else f"{label}_{value.replace(',', '_')}")
        flags = dict(self.train_flags)
        if "condition_kind" in flags:
            parts.append(flags["condition_kind"])
        parts += [flag.removesuffix("_weight") for flag in OBJECTIVE_WEIGHT_FLAGS if flag in flags]
        parts += [self.tag] if self.tag else []
        return "+".join(parts) or "base"

    @property
    def data_label(self) -> str:
        """The data, and for a ViT its backbone (``tiny``, ``tiny-vit_pico``): what the name and the step setting
        start with."""
        return f"{self.data}-{self.budget.backbone}" if self.budget.is_vit else self.data

    @property
    def name(self) -> str:
        """Readable name, what ``--arms`` globs match: ``tiny-simsiam-augself-s0``; a ViT's names its backbone
        (``tiny-vit_pico-mocov3-base-s0``); a floor's has no method, and its tag when it has one
        (``tiny-never_trained-s0``, ``tiny-vit_pico-never_trained+sincos-s0``)."""
        if self.budget.never_trained:
            return f"{self.data_label}-{NEVER_TRAINED}{'+' + self.tag if self.tag else ''}-s{self.seed}"
        return f"{self.data_label}-{self.method}-{self.variant}-s{self.seed}"

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
            "evals": [e.settings() for e in self.evals],
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
                f"--backbone={b.backbone}", *([] if b.is_vit else [f"--width={b.width}"]),
                f"--image_size={b.image_size}", f"--batch_size={b.batch_size}", f"--epochs={b.epochs}",
                f"--model_dir={model_dir}"]
        if self.condition != "none":
            args.append(f"--condition={self.condition}")
        if b.max_steps is not None:
            args.append(f"--max_steps={b.max_steps}")
        args += [f"--{k}={v}" for k, v in self.train_flags]
        return args


def step_setting(arm: Arm) -> str:
    """What decides a training step's cost, by name: ``tiny-looc-color_rotation`` (the arm's name without its
    seed). ``--time_steps`` times one arm per step setting, and the LooC table reads its rows' times by it."""
    return f"{arm.data_label}-{arm.method}-{arm.variant}"


def settings_hash(settings: dict) -> str:
    """8 hex digits of the SHA-256 of the settings' canonical JSON."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


# ----------------------------------------------------------------------------------------------------
# What both arm sets share

TINY_BUDGET = Budget(epochs=120, width=0.25, image_size=64, batch_size=128, backbone="resnet18")
QUICK_BUDGET = Budget(epochs=1, width=0.0625, image_size=32, batch_size=32, backbone="resnet18_cifar", max_steps=2)
# The paper's 65536-key queue is 0.62x STL10's 105k images; on these few thousand images a queue that long
# fills with stale keys of the very images it contrasts against (docs/results.md, "MoCo queue").
MOCO_QUEUE = 2048
MONITOR_FLAGS = (("monitor", "auto"), ("monitor_every", "2"))
# DINO's method (facebookresearch/dino main_dino.py defaults) with the CPU head (a quarter of its width, K = 4096) and
# 4 local crops of 32 px: what every DINO arm sets besides its recipe and its architecture's crop scales.
DINO_METHOD = (("dino_out_dim", "4096"), ("dino_hidden", "512"), ("dino_bottleneck", "256"),
               ("norm_last_layer", "true"), ("student_temperature", "0.1"), ("warmup_teacher_temperature", "0.04"),
               ("teacher_temperature", "0.04"), ("teacher_temperature_epochs", "0"), ("center_momentum", "0.9"),
               ("teacher_momentum", "0.996"), ("freeze_last_layer_epochs", "1"), ("global_crops", "2"),
               ("local_crops", "4"), ("local_crop_size", "32"), ("asymmetric_views", "true"), ("blur_prob", "0.5"),
               ("solarize_prob", "0.0"))
# DINO's ResNet-50 crops (its README command): global 0.14-1, local 0.05-0.14.
DINO_RESNET_CROPS = (("global_crop_scale", "0.14,1"), ("local_crop_scale", "0.05,0.14"))
FLOOR_SEEDS = (0, 1, 2)
# BN statistics recomputed on the first 3,500 images of the pretraining split (all of tiny-imagenet-mini's train split:
# 27 batches of 128) under the evaluation transform, for every arm of a comparison: no objective's extra views reach
# what evaluation reads.
PRECISE_BN_FLAGS = (("precise_bn_images", "3500"),)


def floor_arm(arm: Arm) -> Arm:
    """The never-trained floor beside ``arm``: its data, seed, width, size and evaluations, no training step, and
    BN statistics recomputed as every compared arm's (whatever ``arm`` does)."""
    return dataclasses.replace(arm, method="simsiam", augself="none", condition="none",
                               budget=dataclasses.replace(arm.budget, max_steps=0), train_flags=PRECISE_BN_FLAGS)
QUICK_MONITOR_FLAGS = (("monitor", "auto"), ("monitor_every", "1"), ("monitor_bank_size", "64"),
                       ("monitor_query_size", "32"))


def select_arms(arms: Sequence[Arm], patterns: str | None) -> list[Arm]:
    """The arms whose name or id matches one of the comma-separated globs (all arms for None/empty), in the
    order of ``arms`` (the suite's, cheapest and most needed first), not the order of the globs.

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
# The order reports list entries in

VARIANT_ORDER = (NEVER_TRAINED, "base", "augself", "cond", "augself+cond")
DATA_ORDER = ("tiny", "shapes")
METHOD_ORDER = ("simsiam", "moco", "byol", "simclr", "swav")


def _order(seq: Sequence[str], item: str) -> tuple[int, str]:
    return (seq.index(item) if item in seq else len(seq), item)


def variant_of(settings: dict) -> str:
    """The :attr:`Arm.variant` of an entry's settings without its train flags (so every LooC entry reads ``base``:
    the main suite's report and the wall-time table order entries by it; looc_report has its own reading)."""
    return Arm(settings["data"], settings["method"], settings["augself"], settings["condition"], 0,
               Budget(**settings["budget"]), ()).variant


def sort_key(entry: dict) -> tuple:
    """Entries in report order: data, budget, method, variant, seed."""
    s = entry["settings"]
    return (_order(DATA_ORDER, s["data"]), json.dumps(s["budget"], sort_keys=True), _order(METHOD_ORDER, s["method"]),
            _order(VARIANT_ORDER, variant_of(s)), s["seed"], entry["arm"])
