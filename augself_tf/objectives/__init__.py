"""The augmentation-aware family's home: what a run adds to its method to make it aware of the augmentations.

Two ways an objective can be aware of ω, each with one way in:
- a loss added to the method's (`base.Objective`): AugSelf (``augself``, predicting ω differences; its flags are
  ``--augself`` and ``--augself_weight``) and every objective of `OBJECTIVES`, each switched on by its weight
  flag (``--<key>_weight``): EquiMod, E-SSL, STL as they land;
- a head conditioned on ω (``conditioning``: CASSLE, ``--condition``), which wraps the method's projector.
LooC is a method of its own (``augself_tf.methods.looc``): it replaces MoCo's loss rather than adding to one.

Adding an objective: its file here (an `Objective` subclass) and its line in `OBJECTIVES`; its flags, views,
run.json record and resume check follow (docs/architecture.md, "Adding an augmentation-aware objective").
"""

from __future__ import annotations

from typing import Any

from augself_tf.augment.views import ViewPlan
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


def enabled_objectives(options: dict[str, Any]) -> list[type[Objective]]:
    """The objectives the run's option flags switch on, in registration order."""
    return [cls for cls in OBJECTIVES.values() if cls.enabled(options)]


def extend_views(plan: ViewPlan, options: dict[str, Any]) -> ViewPlan:
    """The method's views with every enabled objective's own added."""
    for cls in enabled_objectives(options):
        plan = cls.extend_views(plan, options)
    return plan


__all__ = ["OBJECTIVES", "Forward", "Objective", "enabled_objectives", "extend_views"]
