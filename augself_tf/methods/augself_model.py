"""The one model class that owns the backbone, the AugSelf heads and the training step.

A method (SimSiam, MoCo, ...) subclasses `AugSelfModel` and writes only its own heads in `__init__` and
`build_heads`, and its loss in `method_loss` (or `method_forward` when view 2 does not go through the online
backbone, as in MoCo). Everything else — both AugSelf orders, λ, conditioned projectors (``--condition``),
cross-replica loss scaling, mixed-precision loss scaling, post-step updates — lives here; coupled L2 and the
constant-lr group are the optimizer's (:class:`augself_tf.training.optim.TorchSGD`), which reads
`constant_lr_variables`. docs/architecture.md ("Adding a method") walks through a new method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import keras
import tensorflow as tf

from augself_tf.augment import AugmentConfig, finish_views
from augself_tf.augment.views import TWO_VIEWS, ViewPlan
from augself_tf.flag_fields import flag_fields, help_text
from augself_tf.objectives import with_objective_views
from augself_tf.objectives.augself import AugSelf
from augself_tf.objectives.base import Forward, Objective
from augself_tf.objectives.conditioning import ConditionedHead, Conditioning, condition_head, head_input

__all__ = ["AugSelfModel", "Forward", "Losses", "PretrainData"]


@dataclasses.dataclass(frozen=True)
class PretrainData:
    """What a method may derive its options from: the pretraining data and the run's length.

    Attributes:
      name: the dataset spec (for messages).
      num_examples: images in the pretraining split.
      num_classes: classes of its ``label`` (0 = unlabelled).
      global_batch: the run's global batch size.
      total_steps, steps_per_epoch: the run's length.
    """

    name: str
    num_examples: int
    num_classes: int
    global_batch: int
    total_steps: int
    steps_per_epoch: int


class Losses(NamedTuple):
    """`compute_losses`' result: the total loss, every scalar to log, and the forward pass behind them."""

    total: tf.Tensor
    logs: dict[str, tf.Tensor]
    forward: Forward


class AugSelfModel(keras.Model):
    """Backbone f + AugSelf heads φ_aug + the method's own heads; `train_step` runs one SGD step.

    Args:
      backbone: a Keras model mapping images [N,H,W,3] to pooled features [N,d].
      augself: names of the augmentations whose ω difference is predicted (keys of `AUGMENTATIONS`), or a
        mapping of those names to each task's own weight w_aug.
      augself_weight: λ in L = L_method + Σ_aug w_aug·L_aug, the weight of every task given by name only.
      synchronized_bn: cross-replica batch statistics in the heads.
      augment: the augmentation settings, for the device stage of a batch made with
        ``photometric="device"`` (``finish_views`` runs at the start of every step, per replica), and for the
        descriptors of ``conditioning``.
      conditioning: the conditioned projector (CASSLE, `augself_tf.objectives.conditioning.Conditioning`, which
        `ModelConfig` builds from the ``--condition*`` flags): the descriptors each view's projector reads, the
        ω-embedding MLP, how the embedding enters the projector, and whether the predictor reads it too. None:
        the plain method.
      objectives: the run's augmentation-aware objectives besides AugSelf (`augself_tf.objectives.OBJECTIVES`),
        each added to the loss with its weight; one that does not compose with the method is refused (ValueError).
      options: the method's ``Options`` (default: ``Options()``), kept as ``self.method_options``.
      plan: the run's `ViewPlan`, each objective's views recorded on it (`ViewPlan.views_of`), kept as
        ``self.plan`` (default: the method's plan from ``options``, extended by ``objectives``).

    Conditioning: a method wraps the head that reads the features in ``self.conditioned(...)`` (identity when
    ``conditioning`` is None) and gets [f, d] instead of f in ``method_loss`` — ``head_input`` — where d is the
    view's description; a method with its own ``method_forward`` builds that input with ``head_input`` and
    passes ``describe(ω, ω_other)`` to its momentum encoder. A method with a predictor may wrap it in
    ``self.conditioned_predictor(...)`` and feed it ``predictor_input(z, head input)``.
    """

    method_name = "none"

    @dataclasses.dataclass(frozen=True)
    class Options:
        """The method's options: each `option` field is a train_main flag (``--<field>``, ``None`` when unset, so
        the default here applies); plain fields are values the training loop passes (``total_steps``, ...)."""

    #: name -> (default, help) of the Options' flags; derived for every subclass (read-only).
    options: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: whether the method's loss needs class labels in the batch (supervised pretraining).
    needs_labels = False

    @classmethod
    def complete_options(
        cls, options: dict[str, Any], data: PretrainData, log: Callable[[str], None] = lambda _m: None
    ) -> dict[str, Any]:
        """The constructor options of a run: ``options`` (its flags) completed from the pretraining ``data``.

        Every method is offered ``total_steps`` and ``steps_per_epoch`` (BYOL's τ schedule, SwAV's first epoch
        with frozen prototypes); one that `needs_labels` gets the data's ``num_classes``. A method that derives
        more from the data overrides this (MoCo sizes its queue); ``log`` reports what was derived.

        Raises:
          ValueError: a method that needs class labels on data without them.
        """
        del log
        options = dict(options)
        if cls.needs_labels:
            if not data.num_classes:
                raise ValueError(f"method '{cls.method_name}' needs class labels; '{data.name}' has none")
            options.setdefault("num_classes", data.num_classes)
        options.setdefault("total_steps", data.total_steps)
        options.setdefault("steps_per_epoch", data.steps_per_epoch)
        return options

    @classmethod
    def view_plan(cls, options: dict[str, Any]) -> ViewPlan:
        """The views of every example and the draws they share (``augself_tf.augment.views``), from the run's
        method-option flags: the input pipeline, the device stage and ω follow this one declaration. Default:
        two independent views (view1, view2); a method needing more overrides it (LooC)."""
        del options
        return TWO_VIEWS

    @classmethod
    def required_steps(cls, options: dict[str, Any]) -> tuple[str, ...]:
        """Augmentation steps the method needs switched on: each takes its AugSelf-predicted default probability
        (rotation, solarize: 0.5) unless its flag is set. Default: none."""
        del options
        return ()

    @property
    def evaluated_backbone(self) -> keras.Model:
        """The backbone a run exports and its monitors read: the trained one (DINO: its teacher, the network DINO
        evaluates)."""
        return self.backbone

    def exported_features(self) -> dict[str, keras.layers.Layer]:
        """Extra SavedModel signatures beside the backbone's: {signature name: layer mapping backbone features
        [N, d] to a representation [N, k]} (LooC's ``looc_plus_features``). Default: none."""
        return {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if not dataclasses.is_dataclass(cls.Options):
            raise TypeError(f"{cls.__name__}.Options must be a dataclass")
        cls.options = {f.name: (f.default, help_text(f)) for f in flag_fields(cls.Options)}

    def __init__(
        self,
        backbone: keras.Model,
        augself: tuple[str, ...] | Mapping[str, float] = (),
        augself_weight: float = 1.0,
        synchronized_bn: bool = False,
        augment: AugmentConfig | None = None,
        conditioning: Conditioning | None = None,
        objectives: tuple[Objective, ...] = (),
        options: Any = None,
        plan: ViewPlan | None = None,
        **kwargs,
    ) -> None:
        super().__init__(name=kwargs.pop("name", self.method_name), **kwargs)
        self.method_options = self.Options() if options is None else options
        if not isinstance(self.method_options, self.Options):
            raise TypeError(f"options of {type(self).__name__} must be a {type(self).__name__}.Options, got "
                            f"{type(options).__name__}")
        self.backbone = backbone
        self.feature_dim = int(backbone.output_shape[-1])
        self.augself = tuple(augself)
        self.augself_weight = float(augself_weight)
        weights = augself if isinstance(augself, Mapping) else dict.fromkeys(augself, augself_weight)
        self.synchronized_bn = synchronized_bn
        self.augment_config = augment or AugmentConfig()
        self.conditioning = conditioning
        self.predictor_conditioned = False  # set by conditioned_predictor; build_all refuses a flag left unused
        # Every added loss, one way in (`augself_tf.objectives`): AugSelf's heads, then the run's other objectives.
        added = [AugSelf(weights, synchronized_bn=synchronized_bn)] if weights else []
        for objective in objectives:
            objective.check_method(self.method_name)
            added.append(objective)
        self.objectives = {objective.key: objective for objective in added}
        # The run's views, each objective's recorded as its own (what its loss reads); `build_method` hands the plan
        # the input pipeline draws, a model made without one plans the same from its options and objectives.
        self.plan = plan if plan is not None else with_objective_views(
            type(self).view_plan(dataclasses.asdict(self.method_options)),
            [(type(o), o.options) for o in objectives])
        self.augself_weights = dict(added[0].task_weights) if weights else {}

    # ----------------------------------------------------------------- hooks for methods
    def method_loss(self, f1: tf.Tensor, f2: tf.Tensor, batch: dict, training: bool) -> tuple[tf.Tensor, dict]:
        """The invariance objective on the head inputs of both views: the backbone features, with each view's
        description appended when conditioned (`head_input`). Default: none (AugSelf alone)."""
        del f1, f2, batch, training
        return tf.constant(0.0), {}

    def method_forward(self, batch: dict, training: bool) -> Forward:
        """Both views through the backbone, then `method_loss`. Override when view 2 uses another encoder."""
        f1 = self.backbone(batch["view1"], training=training)
        f2 = self.backbone(batch["view2"], training=training)
        omega1, omega2 = batch["omega1"], batch["omega2"]
        loss, logs = self.method_loss(self.head_input(f1, omega1, omega2), self.head_input(f2, omega2, omega1),
                                      batch, training)
        return Forward(f1, f2, loss, logs)

    def build_heads(self, feature_dim: int) -> None:
        """Creates the variables of the method's own layers (so the optimizer sees every one before step 1);
        `feature_dim` is the size of the head input (`head_input_dim`)."""
        del feature_dim

    def constant_lr_variables(self) -> list[tf.Variable]:
        """Variables trained at the base learning rate whatever the schedule (SimSiam's predictor)."""
        return []

    def held_variables(self) -> tuple[list[tf.Variable], int]:
        """(variables, N): variables the optimizer leaves out of its update for the first N steps, neither decayed
        nor moved (DINO's last layer in its first epoch). Default: none."""
        return [], 0

    def target_variables(self) -> list[tf.Variable]:
        """Variables updated outside the optimizer (momentum encoders); excluded from gradients."""
        return []

    def optimized_variables(self) -> list[tf.Variable]:
        """Trainable variables the optimizer updates."""
        excluded = {id(v) for v in self.target_variables()}
        return [v for v in self.trainable_variables if id(v) not in excluded]

    def post_step(self, batch: dict, forward: Forward) -> None:
        """Runs after the optimizer step inside the replica (EMA targets, queues); `forward` is this
        replica's `method_forward` result."""
        del batch, forward

    # ----------------------------------------------------------------- conditioning (CASSLE)
    def conditioned(self, head: keras.layers.Layer) -> keras.layers.Layer:
        """`head` reading [f, e(d)] from the head input [f, d] when conditioned, else `head` itself."""
        return condition_head(head, self.conditioning, synchronized_bn=self.synchronized_bn)

    def conditioned_predictor(self, predictor: keras.layers.Layer) -> keras.layers.Layer:
        """`predictor` reading [z, e(d)] (concat, its own ω-MLP) from `predictor_input` when the run conditions the
        predictor (``--condition_predictor``), else `predictor` itself."""
        if self.conditioning is None or not self.conditioning.predictor:
            return predictor
        self.predictor_conditioned = True
        # Concatenation whatever --condition_kind: the reference's AugSSPredictor has proj-cat only.
        return condition_head(predictor, self.conditioning, synchronized_bn=self.synchronized_bn, kind="concat")

    def predictor_input(self, projection: tf.Tensor, head_in: tf.Tensor) -> tf.Tensor:
        """What a `conditioned_predictor` reads: the projection, and the description the view's head input
        [f, d] carries when the predictor is conditioned."""
        if not self.predictor_conditioned:
            return projection
        return head_input(projection, head_in[..., -self.conditioning.size :])

    def describe(self, omega: dict, other: dict | None = None) -> tf.Tensor | None:
        """The views' descriptions [B, n] from their ω (relative ones also from the other views' ω, ``other``),
        or None when not conditioned."""
        if self.conditioning is None:
            return None
        return self.conditioning.describe(omega, self.augment_config, other)

    def head_input(self, features: tf.Tensor, omega: dict, other: dict | None = None) -> tf.Tensor:
        """What the method's heads read of a view: its features, and its description when conditioned (``other``:
        the ω of the other view of each pair, for relative descriptors)."""
        return features if self.conditioning is None else head_input(features, self.describe(omega, other))

    @property
    def head_input_dim(self) -> int:
        """Size of `head_input`."""
        return self.feature_dim + (0 if self.conditioning is None else self.conditioning.size)

    @property
    def augself_heads(self) -> dict[str, keras.layers.Layer]:
        """AugSelf's head φ_aug of every predicted augmentation (empty when AugSelf is off)."""
        return self.objectives["augself"].heads if "augself" in self.objectives else {}

    # ----------------------------------------------------------------- assembly
    def build_all(self, image_size: int) -> None:
        """Creates every variable (backbone, method heads, objectives' heads) before training starts."""
        x = tf.zeros([2, image_size, image_size, 3])
        f = self.backbone(x, training=False)
        self.build_heads(self.head_input_dim)
        for objective in self.objectives.values():
            objective.build_objective(self)
        del f
        if self.conditioning is not None and not any(
                isinstance(layer, ConditionedHead) for layer in self._flatten_layers(include_self=False)):
            # Its heads would read the raw description unembedded: refuse rather than train something else.
            raise ValueError(f"--condition: method '{self.method_name}' conditions no head (a method wraps its "
                             "projector in self.conditioned(...))")
        if self.conditioning is not None and self.conditioning.predictor and not self.predictor_conditioned:
            raise ValueError(f"--condition_predictor: method '{self.method_name}' has no predictor that reads the "
                             "description (SimSiam's does)")
        self.built = True

    def compute_losses(self, batch: dict, training: bool = True) -> Losses:
        """Total loss, a dict of scalar logs and the forward pass, for one (per-replica) batch."""
        batch = finish_views(batch, self.augment_config)
        forward = self.method_forward(batch, training)
        total = forward.loss
        logs = {"loss/method": forward.loss, "loss/augself": tf.constant(0.0), **forward.logs}
        for key, objective in self.objectives.items():
            loss, objective_logs = objective.objective_loss(self, batch, forward, training)
            if objective.weight_option:  # AugSelf weighs its own tasks
                objective_logs = {f"{key}/loss": loss, **objective_logs}
                loss = objective.weight * loss
            total += loss
            logs.update(objective_logs)
        logs = {"loss/total": total, **logs}
        return Losses(total, logs, forward)

    def train_step(self, batch: dict) -> dict:
        """One optimizer step on a per-replica batch; returns per-replica scalar logs."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        variables = self.optimized_variables()
        with tf.GradientTape() as tape:
            total, logs, forward = self.compute_losses(batch, training=True)
            # Gradients are all-reduced by SUM across replicas, so each replica contributes 1/R.
            scaled = total / replicas
            scaled = self.optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        # The rate this step applies: read before `apply` advances the schedule's step counter.
        logs["lr"] = tf.cast(self.optimizer.learning_rate, tf.float32)
        self.optimizer.apply(grads, variables)
        self.post_step(batch, forward)
        return logs
