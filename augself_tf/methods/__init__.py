"""Pretraining methods: one short file per method over `AugSelfModel`, and one line per method in `METHODS`.

Each method declares its options once, as `option` fields of its ``Options`` dataclass; so does each
augmentation-aware objective (`augself_tf.objectives.OBJECTIVES`). train_main has one flag per option name:
methods that share a name (``--temperature`` of MoCo, SimCLR and SwAV) share the flag, so they must declare it
with one type and one help line (`METHODS` refuses a method that does not), and the flag's help lists each
method's default. The options travel together as the run's ``method_options`` (run.json records them; a resume
checks them). How to add a method: docs/architecture.md, "Adding a method"; an objective: "Adding an
augmentation-aware objective".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from augself_tf.augment.views import ViewPlan
from augself_tf.flag_fields import declared_options, define_flag, flag_fields, flag_kind, help_text
from augself_tf.methods.augself_model import AugSelfModel, PretrainData
from augself_tf.methods.byol import BYOL
from augself_tf.methods.dino import DINO
from augself_tf.methods.looc import LooC
from augself_tf.methods.moco import MoCo
from augself_tf.methods.mocov3 import MoCoV3
from augself_tf.methods.simclr import SimCLR
from augself_tf.methods.simsiam import SimSiam
from augself_tf.methods.supervised import Supervised
from augself_tf.methods.swav import SwAV
from augself_tf.objectives import OBJECTIVES, enabled_objectives, extend_views
from augself_tf.registries import Registry


@dataclasses.dataclass(frozen=True)
class MethodOption:
    """One train_main flag of the methods' options: its kind, help and each declaring method's default."""

    name: str
    kind: type
    help: str
    choices: tuple[str, ...] | None
    defaults: dict[str, Any]

    def help_line(self) -> str:
        """The help followed by every declaring method's default, e.g. ``... (default moco: 0.2, swav: 0.1)``."""
        return f"{self.help} (default {', '.join(f'{m}: {v}' for m, v in self.defaults.items())})"


def _declared(method: str, cls: type) -> dict[str, MethodOption]:
    return {f.name: MethodOption(f.name, flag_kind(cls.Options, f), help_text(f), f.metadata["choices"],
                                 {method: f.default}) for f in flag_fields(cls.Options)}


def _check_method(name: str, cls: type[AugSelfModel], registered: Registry) -> None:
    """Refuses a method whose option shares a name with another method's but not its type, choices or help."""
    if not (isinstance(cls, type) and issubclass(cls, AugSelfModel)):
        raise TypeError(f"method {name!r} must be an AugSelfModel subclass, got {cls!r}")
    for other, other_cls in registered.items():
        theirs = _declared(other, other_cls)
        for option_name, mine in _declared(name, cls).items():
            if option_name not in theirs:
                continue
            for what in ("kind", "choices", "help"):
                a, b = getattr(mine, what), getattr(theirs[option_name], what)
                if a != b:
                    show = (lambda v: v.__name__) if what == "kind" else repr
                    raise ValueError(f"method {name!r}: option --{option_name} has {what} {show(a)} but method "
                                     f"{other!r} declares it with {show(b)}; a shared option has one {what}")


METHODS: Registry[type[AugSelfModel]] = Registry("method", {
    "none": AugSelfModel,
    "simsiam": SimSiam,
    "moco": MoCo,
    "byol": BYOL,
    "simclr": SimCLR,
    "swav": SwAV,
    "supervised": Supervised,
    "looc": LooC,
    "mocov3": MoCoV3,
    "dino": DINO,
}, check=_check_method)


def method_options() -> dict[str, MethodOption]:
    """Every option name of the registered methods and objectives (in registration order), with each declarer's
    default."""
    merged: dict[str, MethodOption] = {}
    for method, cls in [*METHODS.items(), *OBJECTIVES.items()]:
        for name, declared in _declared(method, cls).items():
            known = merged.get(name)
            merged[name] = declared if known is None else dataclasses.replace(
                known, defaults={**known.defaults, **declared.defaults})
    return merged


def define_method_flags(flag_values: Any, module_name: str) -> None:
    """One flag per method option name, default None (unset: each method's own default applies)."""
    for option in method_options().values():
        define_flag(option.name, option.kind, None, option.help_line(), flag_values, module_name, option.choices)


def method_options_from_flags(flag_values: Any) -> dict[str, Any]:
    """``{name: value}`` of every method-option flag, None where unset (TrainConfig.method_options)."""
    return {name: flag_values[name].value for name in method_options()}


def build_method(name: str, backbone, *, options: dict | None = None, **common) -> AugSelfModel:
    """Instantiates method `name` with its ``Options``, and every objective the `options` switch on with its own.

    Raises:
      ValueError: an unknown method, or an objective that does not compose with it (one line).
    """
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; choose from {', '.join(METHODS)}")
    cls = METHODS[name]
    objectives = tuple(o(declared_options(o, options)) for o in enabled_objectives(options or {}))
    return cls(backbone, options=declared_options(cls, options), objectives=objectives, **common)


def view_plan(method: str, options: dict[str, Any]) -> ViewPlan:
    """The views of a run: the method's declaration, then the views its objectives add (one declaration the
    input pipeline, the device stage and ω follow)."""
    return extend_views(METHODS.get(method, AugSelfModel).view_plan(options), options)


def required_steps(method: str, options: dict[str, Any]) -> tuple[str, ...]:
    """Augmentation steps the method and its objectives need switched on (each at its predicted default)."""
    steps = list(METHODS.get(method, AugSelfModel).required_steps(options))
    for objective in enabled_objectives(options):
        steps += [s for s in objective.required_steps(options) if s not in steps]
    return tuple(steps)


def derived_options(method: str, options: dict[str, Any], data: PretrainData) -> dict[str, Any]:
    """The option flags of ``method`` that ``options`` leaves unset and the method derives from ``data`` (MoCo's
    and LooC's ``queue_size`` from the dataset and the global batch): what run.json records so that a resume
    with another batch rebuilds the same variables. Values the loop passes that are not flags (``total_steps``,
    ``steps_per_epoch``, ``num_classes``) follow the run's length and data, as the learning-rate schedule does."""
    cls = METHODS.get(method, AugSelfModel)
    completed = cls.complete_options(options, data)
    flags = {f.name for f in flag_fields(cls.Options)}
    return {k: v for k, v in completed.items() if k in flags and options.get(k) is None and v is not None}
