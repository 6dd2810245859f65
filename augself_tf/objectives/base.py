"""The one way an augmentation-aware objective enters a run: an `Objective` the model adds to its method's loss.

total = L_method + Σ_objectives weight · L_objective. An objective is a Keras layer that owns its heads. It reads
what the method's forward pass computed (`Forward`: the features of views 1 and 2) and the batch, which holds
every view the run's `ViewPlan` declares with each view's ω. An objective that needs views of its own (EquiMod's
unaugmented view, E-SSL's rotated crop, STL's aligned pairs) declares them in `extend_views`, so the input
pipeline, the device stage and ω follow from that one declaration and the two-view batches of a run without it
stay as they are. docs/architecture.md ("Adding an augmentation-aware objective") walks through a new one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import keras
import tensorflow as tf

from augself_tf.augment.views import ViewPlan
from augself_tf.flag_fields import flag_fields


@dataclasses.dataclass(frozen=True)
class Forward:
    """What a method's forward pass computes on one (per-replica) batch.

    Attributes:
      f1, f2: the features of view 1 and view 2 that the AugSelf heads and the objectives read.
      loss: the method's own loss.
      logs: scalars to log under their names.
      aux: tensors `post_step` needs (MoCo's keys). They travel here, through the replica's own call,
        because replicas run concurrently: a per-replica value stored on `self` would be overwritten.
    """

    f1: tf.Tensor
    f2: tf.Tensor
    loss: tf.Tensor
    logs: dict[str, tf.Tensor] = dataclasses.field(default_factory=dict)
    aux: dict[str, tf.Tensor] = dataclasses.field(default_factory=dict)


class Objective(keras.layers.Layer):
    """An augmentation-aware loss added to the method's: its heads, its views, its weight.

    The ``model`` its hooks receive is the method's `AugSelfModel` (its caller: objectives never import the methods
    package), e.g. ``model.backbone``, ``model.feature_dim``, ``model.synchronized_bn``, ``model.augment_config``.

    A subclass sets ``key`` (its registry name, the prefix of its logs), declares its flags as ``option`` fields
    of its ``Options`` dataclass, one of them ``weight_option`` (its switch: 0 = off), and writes `build_objective`
    and `objective_loss`; `extend_views`, `required_steps` and `check_method` when it needs them. Its flags
    are train_main flags apart from the methods' options: the run's ``objective_options`` (one flag per name,
    recorded in run.json and checked on resume), which no method reads.
    """

    key: ClassVar[str] = ""
    weight_option: ClassVar[str] = ""
    #: methods (``method_name``) the objective composes with; empty = every method. Others are refused in one line.
    methods: ClassVar[tuple[str, ...]] = ()

    @dataclasses.dataclass(frozen=True)
    class Options:
        """The objective's flags (``option`` fields)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        names = {f.name for f in flag_fields(cls.Options)}
        if cls.weight_option and cls.weight_option not in names:
            raise TypeError(f"{cls.__name__}.Options must declare its weight option {cls.weight_option!r}")

    @classmethod
    def enabled(cls, options: dict[str, Any]) -> bool:
        """Whether the run's flags switch the objective on (its weight option set above 0).

        Raises:
          ValueError: a weight below 0 or not finite (one line naming the flag).
        """
        weight = options.get(cls.weight_option)
        if weight is None:
            return False
        if not (math.isfinite(float(weight)) and float(weight) >= 0):
            raise ValueError(f"--{cls.weight_option} must be a finite number >= 0 (0 = off), got {weight}")
        return float(weight) > 0

    @classmethod
    def extend_views(cls, plan: ViewPlan, options: Any) -> ViewPlan:
        """The run's views with the objective's own appended (`ViewPlan.with_view`) or its pairs aligned, from its
        ``Options`` ``options``; the views it appends are recorded on the plan as its own (`view_index`).
        Default: unchanged."""
        del options
        return plan

    @classmethod
    def required_steps(cls, options: Any) -> tuple[str, ...]:
        """Augmentation steps the objective needs switched on (each at its predicted default), from its ``Options``.
        Default: none."""
        del options
        return ()

    @classmethod
    def check_method(cls, method_name: str) -> None:
        """Raises ValueError (one line naming the flag and the methods allowed) unless the objective composes with
        method ``method_name``."""
        if cls.methods and method_name not in cls.methods:
            raise ValueError(f"--{cls.weight_option} does not compose with --method={method_name}; it composes with "
                             f"{', '.join(cls.methods)}")

    def __init__(self, options: Any = None, **kwargs) -> None:
        super().__init__(name=kwargs.pop("name", self.key), **kwargs)
        self.options = self.Options() if options is None else options
        self.weight = float(getattr(self.options, self.weight_option)) if self.weight_option else 1.0

    def view_index(self, model: keras.Model) -> int:
        """Where the view this objective's `extend_views` appended sits in the batch (0-based: ``view{j+1}``), as
        the model's view plan recorded it (``model.plan.views_of``).

        Raises:
          ValueError: the plan records no view, or several, of this objective (read ``model.plan.views_of``).
        """
        views = model.plan.views_of(self.key)
        if len(views) != 1:
            raise ValueError(f"objective {self.key!r} has {len(views)} views in the model's plan, not one; read "
                             "model.plan.views_of")
        return views[0]

    def build_objective(self, model: keras.Model) -> None:
        """Creates the objective's variables (heads) from the built model (``model.feature_dim``, ...)."""
        del model

    def objective_loss(self, model: keras.Model, batch: dict, forward: Forward, training: bool
                       ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The objective's unweighted loss on one per-replica batch and its logs (names ``<key>/...``)."""
        raise NotImplementedError
