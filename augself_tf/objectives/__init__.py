"""The augmentation-aware family's home: what a run adds to its method to make it aware of the augmentations.

Two ways an objective can be aware of ω, each with one way in:
- a loss added to the method's (`base.Objective`): AugSelf (``augself``, predicting ω differences; its flags are
  ``--augself`` and ``--augself_weight``) and every objective of `OBJECTIVES`, each switched on by its weight
  flag (``--<key>_weight``): EquiMod, E-SSL, STL as they land;
- a head conditioned on ω (``conditioning``: CASSLE, ``--condition``), which wraps the method's projector.
LooC is a method of its own (``augself_tf.methods.looc``): it replaces MoCo's loss rather than adding to one.

Adding an objective: its file here (an `Objective` subclass) and its line in `OBJECTIVES`; its flags (the run's
``objective_options``, apart from the method's), views, run.json record and resume check follow
(docs/architecture.md, "Adding an augmentation-aware objective").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from augself_tf.augment.views import ViewPlan
from augself_tf.flag_fields import SharedOption, declared_options, define_shared_flags, shared_options
from augself_tf.objectives.base import Forward, Objective
from augself_tf.objectives.equimod import EquiMod
from augself_tf.objectives.essl import ESSL
from augself_tf.objectives.stl import STL
from augself_tf.registries import Registry


def _check_objective(name: str, cls: type[Objective], registered: Registry) -> None:
    del registered
    if not (isinstance(cls, type) and issubclass(cls, Objective)):
        raise TypeError(f"objective {name!r} must be an Objective subclass, got {cls!r}")
    if cls.key != name or cls.weight_option != f"{name}_weight":
        raise ValueError(f"objective {name!r} must have key {name!r} and weight option '{name}_weight'")


OBJECTIVES: Registry[type[Objective]] = Registry("objective", {
    "equimod": EquiMod,
    "stl": STL,
    "essl": ESSL,
}, check=_check_objective)


def objective_options() -> dict[str, SharedOption]:
    """Every option name of the registered objectives (in registration order): one train_main flag each."""
    return shared_options([(name, cls.Options) for name, cls in OBJECTIVES.items()])


def define_objective_flags(flag_values: Any, module_name: str) -> None:
    """One flag per objective option name, default None (unset: the objective's own default applies)."""
    define_shared_flags(objective_options(), flag_values, module_name)


def objective_options_from_flags(flag_values: Any) -> dict[str, Any]:
    """``{name: value}`` of every objective-option flag, None where unset (``ModelConfig.objective_options``)."""
    return {name: flag_values[name].value for name in objective_options()}


def enabled_objectives(options: dict[str, Any]) -> list[type[Objective]]:
    """The objectives the run's objective options switch on, in registration order."""
    return [cls for cls in OBJECTIVES.values() if cls.enabled(options)]


def extend_views(plan: ViewPlan, options: dict[str, Any]) -> ViewPlan:
    """The method's views with every enabled objective's own added, each objective's recorded on the plan as its
    own (`ViewPlan.objective_views`, what its loss reads)."""
    return with_objective_views(plan, [(cls, declared_options(cls, options)) for cls in enabled_objectives(options)])


def with_objective_views(plan: ViewPlan, objectives: Sequence[tuple[type[Objective], Any]]) -> ViewPlan:
    """``plan`` extended by each ``(objective class, its Options)`` in turn, each one's views recorded as its own."""
    for cls, options in objectives:
        plan = plan.extended_by(cls.key, cls.extend_views(plan, options))
    return plan


def required_steps(options: dict[str, Any]) -> tuple[str, ...]:
    """Augmentation steps the enabled objectives need switched on (each at its predicted default)."""
    steps: list[str] = []
    for cls in enabled_objectives(options):
        steps += [s for s in cls.required_steps(declared_options(cls, options)) if s not in steps]
    return tuple(steps)


__all__ = ["OBJECTIVES", "Forward", "Objective", "define_objective_flags", "enabled_objectives", "extend_views",
           "objective_options", "objective_options_from_flags", "required_steps", "with_objective_views"]
