"""Pretraining methods: one short file per method over `AugSelfModel`, and one line per method in `METHODS`.

Each method declares its options once, as `option` fields of its ``Options`` dataclass; so does each
augmentation-aware objective (`augself_tf.objectives.OBJECTIVES`). train_main has one flag per option name: methods
that share a name (``--temperature`` of MoCo, SimCLR and SwAV) share the flag, so they must declare it with one type
and one help line (`METHODS` refuses a method that does not), and the flag's help lists each method's default. The
options are the run's ``method_options``, the objectives' its ``objective_options``: no method reads an objective's,
nor the reverse, and no name is both (run.json records both; a resume checks them). How to add a method:
docs/architecture.md, "Adding a method"; an objective: "Adding an augmentation-aware objective".
"""

from __future__ import annotations

from typing import Any

from augself_tf.augment.views import ViewPlan
from augself_tf.flag_fields import (
    SharedOption,
    declared_flags,
    declared_options,
    define_shared_flags,
    flag_fields,
    shared_options,
)
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
from augself_tf.objectives import enabled_objectives, extend_views
from augself_tf.objectives import objective_options as objective_flags
from augself_tf.objectives import required_steps as objective_required_steps
from augself_tf.registries import Registry


def _check_method(name: str, cls: type[AugSelfModel], registered: Registry) -> None:
    """Refuses a method whose option shares a name with another method's but not its type, choices or help."""
    if not (isinstance(cls, type) and issubclass(cls, AugSelfModel)):
        raise TypeError(f"method {name!r} must be an AugSelfModel subclass, got {cls!r}")
    mine_all = declared_flags(name, cls.Options)
    clash = next((o for o in mine_all if o in objective_flags()), None)
    if clash is not None:  # one flag, one reader: a method never reads an objective's option, nor the reverse
        raise ValueError(f"method {name!r}: option --{clash} is an objective's option; name it otherwise")
    for other, other_cls in registered.items():
        theirs = declared_flags(other, other_cls.Options)
        for option_name, mine in mine_all.items():
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


def method_options() -> dict[str, SharedOption]:
    """Every option name of the registered methods (in registration order), with each declarer's default; the
    objectives' are `augself_tf.objectives.objective_options`."""
    return shared_options([(name, cls.Options) for name, cls in METHODS.items()])


def define_method_flags(flag_values: Any, module_name: str) -> None:
    """One flag per method option name, default None (unset: each method's own default applies)."""
    define_shared_flags(method_options(), flag_values, module_name)


def method_options_from_flags(flag_values: Any) -> dict[str, Any]:
    """``{name: value}`` of every method-option flag, None where unset (``ModelConfig.method_options``)."""
    return {name: flag_values[name].value for name in method_options()}


def build_method(name: str, backbone, *, options: dict | None = None, objective_options: dict | None = None,
                 **common) -> AugSelfModel:
    """Instantiates method `name` with its ``Options`` from ``options``, and every objective ``objective_options``
    switches on with its own, handing the model the run's `view_plan`.

    Raises:
      ValueError: an unknown method, an objective's option among the method's ``options``, or an objective that
        does not compose with the method (one line).
    """
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; choose from {', '.join(METHODS)}")
    misplaced = [k for k, v in (options or {}).items() if v is not None and k in objective_flags()]
    if misplaced:
        raise ValueError(f"--{misplaced[0]} is an objective's option: pass it in objective_options, not the "
                         "method's options")
    cls = METHODS[name]
    objective_options = objective_options or {}
    objectives = tuple(o(declared_options(o, objective_options)) for o in enabled_objectives(objective_options))
    return cls(backbone, options=declared_options(cls, options), objectives=objectives,
               plan=view_plan(name, options or {}, objective_options), **common)


def view_plan(method: str, options: dict[str, Any], objective_options: dict[str, Any] | None = None) -> ViewPlan:
    """The views of a run: the method's declaration from its ``options``, then the views the objectives that
    ``objective_options`` switches on add, each recorded as its objective's (one declaration the input pipeline,
    the device stage, ω and the objectives' losses follow)."""
    return extend_views(METHODS.get(method, AugSelfModel).view_plan(options), objective_options or {})


def required_steps(method: str, options: dict[str, Any], objective_options: dict[str, Any] | None = None
                   ) -> tuple[str, ...]:
    """Augmentation steps the method and its objectives need switched on (each at its predicted default)."""
    steps = list(METHODS.get(method, AugSelfModel).required_steps(options))
    steps += [s for s in objective_required_steps(objective_options or {}) if s not in steps]
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
