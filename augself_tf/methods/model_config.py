"""The settings that define a pretraining model, written once: the model is built from them whole.

`ModelConfig` holds the backbone, its input statistics, the method and its options, the AugSelf tasks with a
weight each, and the ω-conditioned projector. Every field is a flag of augself-train (`TrainConfig` nests it
as it nests `AugmentConfig`), and every field is a setting a resumed run must keep: ``run.json`` records
`ModelConfig.checked_settings`, so a setting added here is checked on resume without being listed anywhere else.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from augself_tf.augment import registry
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.views import ViewPlan
from augself_tf.flag_fields import names_text, option
from augself_tf.methods import METHODS, build_method, required_steps, view_plan
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models import backbones
from augself_tf.models.backbones import BACKBONES
from augself_tf.models.vit import MIN_GRID, POS_EMBEDDINGS, VIT_SIZES, default_patch_size
from augself_tf.objectives.conditioning import (
    CONDITION_KINDS,
    DEFAULT_DEPTH,
    DEFAULT_WIDTH,
    DESCRIPTOR_MODES,
    Conditioning,
    kinds_help,
)

#: --width's default: the only value a ViT backbone accepts (its width is its size's).
WIDTH_DEFAULT = 0.125


class AugSelfTask(NamedTuple):
    """One predicted augmentation and its weight in the total loss (None: the run's λ, ``--augself_weight``)."""

    name: str
    weight: float | None = None


def parse_augself_tasks(text: str | None) -> tuple[AugSelfTask, ...]:
    """``"crop:1.0,color:0.5"`` or ``"crop,color"`` -> AugSelf tasks; '' or 'none' -> ().

    A bare name takes ``--augself_weight``; a name given twice keeps its first occurrence.

    Raises:
      ValueError: an unknown augmentation, or a weight that is not a finite number >= 0.
    """
    tasks: dict[str, AugSelfTask] = {}
    for raw in (text or "").split(","):
        name, sep, weight_text = raw.partition(":")
        names = registry.parse_augself(name)
        if not names:
            if sep:
                raise ValueError(f"--augself: a weight needs an augmentation name, got {raw.strip()!r}")
            continue
        weight = None
        if sep:
            try:
                weight = float(weight_text)
            except ValueError:
                weight = math.nan
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"--augself: the weight of {names[0]!r} must be a finite number >= 0, got "
                                 f"{weight_text.strip()!r}")
        tasks.setdefault(names[0], AugSelfTask(names[0], weight))
    return tuple(tasks.values())


def augself_text(tasks: tuple[AugSelfTask, ...]) -> str:
    """The tasks as ``--augself`` writes them: ``crop,color:0.5`` (bare where the weight is λ), ``none`` when off."""
    return names_text([t.name if t.weight is None else f"{t.name}:{t.weight:g}" for t in _tasks(tasks)])


def _tasks(items: Any) -> tuple[AugSelfTask, ...]:
    """AugSelf tasks from tasks, (name, weight) pairs or bare names (programs and tests write names)."""
    return tuple(t if isinstance(t, AugSelfTask) else AugSelfTask(t) if isinstance(t, str) else AugSelfTask(*t)
                 for t in items)


def _augself_help() -> str:
    return (f"Comma-separated ω to predict ({', '.join(registry.AUGSELF_CHOICES)}), each optionally with its own "
            "weight as name:weight (crop:1.0,color:0.5); a bare name takes --augself_weight; '' or 'none' turns "
            "AugSelf off.")


@dataclasses.dataclass
class ModelConfig:
    """What defines the model's variables and its function; `TrainConfig.model` (flags of the same names).

    ``method_options`` holds the method-option flags ({name: value}, None where unset: the method's default), and
    ``objective_options`` the objectives' (`augself_tf.objectives.OBJECTIVES`: each one's weight switches it on),
    apart, so that a method never reads an objective's option nor an objective a method's.
    """

    method: str = option("moco", "Invariance objective ('none' = AugSelf alone).", choices=tuple(METHODS))
    augself: tuple[AugSelfTask, ...] = option(
        (AugSelfTask("crop"), AugSelfTask("color")), _augself_help, parse=parse_augself_tasks, text=augself_text)
    augself_weight: float = option(1.0, "λ: total = L_method + λ·Σ L_aug (paper: 1.0 STL10, 0.5 ImageNet100).",
                                   minimum=0)
    # CASSLE: descriptors of each view's augmentations that its projector reads (registry.DESCRIPTORS); () = off.
    condition: tuple[str, ...] = option(
        (), lambda: "Comma-separated augmentation descriptors each view's projector is conditioned on (CASSLE; "
                    f"{', '.join(registry.CONDITION_CHOICES)}); '' or 'none' turns conditioning off.",
        parse=registry.parse_condition, text=names_text)
    condition_width: int = option(DEFAULT_WIDTH, "Units per layer of the --condition ω-embedding MLP (CASSLE: 64).",
                                  minimum=1)
    condition_depth: int = option(DEFAULT_DEPTH, "Linear layers of the --condition ω-embedding MLP (CASSLE: 6).",
                                  minimum=1)
    condition_kind: str = option("concat", lambda: f"How the --condition ω-embedding e(d) enters the projector: "
                                                   f"{kinds_help()}.", choices=tuple(CONDITION_KINDS))
    condition_descriptor: str = option(
        "absolute", "What --condition describes of a view: its own augmentations (absolute) or each relative to the "
                    "other view of its pair (relative; CASSLE's --aug-desc-type rel).", choices=DESCRIPTOR_MODES)
    condition_predictor: bool = option(
        False, "Condition SimSiam's predictor on the view's description too, [z, e(d)] with its own ω-embedding "
               "MLP (CASSLE's --ss-aug-inj-type proj-cat).")
    backbone: str = option("resnet18_cifar", "Backbone: a ResNet, or a Vision Transformer (vit_pico is a CPU size).",
                           choices=BACKBONES)
    width: float = option(WIDTH_DEFAULT, "Channel multiplier of a ResNet backbone (1.0 = standard ResNet); a ViT's "
                                         "width is its --backbone's, and another value is refused.", above=0)
    patch_size: int = option(0, f"ViT patch side in pixels; 0: chosen by --image_size, the backbone's own patch "
                                f"(16; 8 for vit_pico) where {MIN_GRID} of them fit a side, else the largest power "
                                f"of two of which {MIN_GRID} do (16 at 224 px, 8 at 96 and 64, 4 at 32, 2 at 16).",
                             minimum=0)
    pos_embed: str = option("sincos", "ViT position embedding: fixed 2-D sin-cos (MoCo v3) or learned (DINO); "
                                      "interpolated bicubically for another image size.", choices=POS_EMBEDDINGS)
    drop_path: float = option(0.0, "ViT stochastic-depth rate of the last block, rising linearly from 0 at the first "
                                   "(DINO: 0.1).", minimum=0)
    stop_grad_conv1: bool = option(False, "ViT: keep the random patch projection as initialised, out of the optimizer "
                                          "(MoCo v3's --stop-grad-conv1).")
    input_mean: str | None = option(None, "Per-channel mean R,G,B the backbone's first layer subtracts from [0, 1] "
                                          "pixels (default: the pretraining data's; STL10 0.43,0.42,0.39, else "
                                          "ImageNet's 0.485,0.456,0.406, as the paper's code).")
    input_std: str | None = option(None, "Per-channel std R,G,B the backbone's first layer divides by (default: the "
                                         "pretraining data's; STL10 0.27,0.26,0.27, else ImageNet's "
                                         "0.229,0.224,0.225).")
    method_options: dict = dataclasses.field(default_factory=dict)
    objective_options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.augself = _tasks(self.augself)
        # Built once, here: settings that do not make one (a kind or descriptor mode without --condition) fail at
        # parse, and `build` hands the model this object. Not a field: run.json records the flags it came from.
        self._conditioning = Conditioning.create(self.condition, self.condition_width, self.condition_depth,
                                                 kind=self.condition_kind, descriptor=self.condition_descriptor,
                                                 predictor=self.condition_predictor)
        self.input_statistics((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # a malformed --input_mean/std fails here, at parse
        if not backbones.is_vit(self.backbone):
            vit_only = [f"--{name}" for name, default in VIT_DEFAULTS.items() if getattr(self, name) != default]
            if vit_only:
                raise ValueError(f"{', '.join(vit_only)} set for backbone {self.backbone}: only a ViT backbone reads "
                                 "it")
        else:
            if self.width != WIDTH_DEFAULT:
                # A ResNet's multiplier has no meaning for a ViT, whose width is its named size's (VIT_SIZES).
                raise ValueError(f"--width={self.width:g} set for backbone {self.backbone}: a ViT's width is its "
                                 f"size's ({', '.join(f'{n} {s.dim}' for n, s in VIT_SIZES.items())}); choose it "
                                 "with --backbone and leave --width unset")
            if self.drop_path >= 1:
                raise ValueError(f"--drop_path must be below 1, got {self.drop_path}")

    @property
    def augself_names(self) -> tuple[str, ...]:
        """The predicted augmentations, in order."""
        return tuple(t.name for t in self.augself)

    def task_weights(self) -> dict[str, float]:
        """Each task's weight in the total loss: its own, else λ (``augself_weight``)."""
        return {t.name: self.augself_weight if t.weight is None else t.weight for t in self.augself}

    def input_statistics(self, data_mean: tuple[float, ...], data_std: tuple[float, ...]
                         ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(mean, std) the backbone normalises with: the flags where set, else the pretraining data's.

        Raises:
          ValueError: a flag that is not three numbers (std positive).
        """
        return (_three("input_mean", self.input_mean, data_mean),
                _three("input_std", self.input_std, data_std, positive=True))

    def patch_for(self, image_size: int) -> int:
        """The ViT patch a run at ``image_size`` takes: ``patch_size``, or where 0 the image size's default
        (`augself_tf.models.vit.default_patch_size`); 0 for a ResNet."""
        if not backbones.is_vit(self.backbone):
            return 0
        return self.patch_size or default_patch_size(self.backbone, image_size)

    def conditioning(self) -> Conditioning | None:
        """The conditioned projector these settings ask for, built when the settings were made (None: not
        conditioned)."""
        return self._conditioning

    def views(self) -> ViewPlan:
        """The run's views: the method's plan and its objectives' views (`augself_tf.methods.view_plan`), what
        the input pipeline draws and the model is handed."""
        return view_plan(self.method, self.method_options, self.objective_options)

    def required_steps(self) -> tuple[str, ...]:
        """Augmentation steps the method and its objectives need switched on (each at its predicted default)."""
        return required_steps(self.method, self.method_options, self.objective_options)

    def checked_settings(self, input_mean: tuple[float, ...], input_std: tuple[float, ...]) -> dict[str, Any]:
        """Every field by its flag's name as run.json records it, the input statistics resolved (a resumed run
        must match them all; an unset method or objective option is its default and is not recorded)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.update(augself=[augself_text((t,)) for t in self.augself], input_mean=input_mean,
                      input_std=input_std)
        return {k: _jsonable(v) for k, v in values.items()}

    def build(self, *, options: Mapping[str, Any], input_mean: tuple[float, ...], input_std: tuple[float, ...],
              synchronized_bn: bool, augment: AugmentConfig) -> AugSelfModel:
        """The backbone and the method of these settings, with the method's completed ``options``
        (`AugSelfModel.complete_options`), normalising its input with ``input_mean`` / ``input_std``, the
        built `Conditioning` of the ``condition*`` fields and the objectives of ``objective_options``."""
        backbone = backbones.build(self.backbone, width=self.width, synchronized_bn=synchronized_bn,
                                   input_mean=input_mean, input_std=input_std, image_size=augment.image_size,
                                   patch_size=self.patch_for(augment.image_size), position=self.pos_embed,
                                   drop_path=self.drop_path, frozen_patch_projection=self.stop_grad_conv1)
        return build_method(self.method, backbone, options=dict(options), objective_options=self.objective_options,
                            augself=self.task_weights(), augself_weight=self.augself_weight,
                            conditioning=self.conditioning(), synchronized_bn=synchronized_bn, augment=augment)


#: The ViT settings and their defaults: another value on a ResNet is refused.
VIT_DEFAULTS = {"patch_size": 0, "pos_embed": "sincos", "drop_path": 0.0, "stop_grad_conv1": False}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):  # unset options (None) are the method's defaults: not recorded
        return {str(k): _jsonable(v) for k, v in sorted(value.items()) if v is not None}
    return value


def _three(flag: str, text: str | None, default: tuple[float, ...], positive: bool = False) -> tuple[float, ...]:
    if text is None or not str(text).strip():
        return tuple(float(v) for v in default)
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or (positive and min(values) <= 0):
        kind = "positive numbers" if positive else "numbers"
        raise ValueError(f"--{flag} must be three comma-separated {kind} (R,G,B), got {text!r}")
    return values
