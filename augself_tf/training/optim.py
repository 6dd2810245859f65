"""SGD with momentum 0.9 on a cosine schedule without restarts (after an optional linear warm-up), with
`torch.optim.SGD`'s semantics.

The paper's numbers come from PyTorch's SGD, which differs from `keras.optimizers.SGD` in two ways that
change what trains:
- weight decay is COUPLED (g ← g + wd·θ, so it passes through the momentum); Keras' is decoupled;
- the momentum buffer is kept in gradient units (b ← μ·b + g; θ ← θ − lr·b), so a new lr applies to the
  whole buffer. Keras folds lr into the buffer (v ← μ·v − lr·g; θ ← θ + v): the two agree only while lr is
  constant, and near the end of a cosine schedule Keras keeps applying steps taken at larger rates.
:class:`TorchSGD` does both, plus the reference's parameter group at a constant lr (SimSiam's predictor).
"""

from __future__ import annotations

from collections.abc import Iterable

import keras
import tensorflow as tf

from augself_tf.training.loss_scale import CrossReplicaLossScaleOptimizer
from augself_tf.training.optimizer_parts import (
    AUTO_EXCLUDE,
    HeldVariables,
    checked_shared_settings,
    count_steps_per_replica,
    decay_exclusion,
    is_decayed,
)
from augself_tf.training.torch_optimizers import LARS, TorchAdamW, clip_by_own_norm

#: --optimizer's choices: ``sgd`` (:class:`TorchSGD`, the paper's), ``adamw`` and ``lars`` (torch_optimizers.py: the
#: ViT recipes' of MoCo v3 and DINO).
OPTIMIZERS = ("sgd", "adamw", "lars")


def warmup_cosine(peak_lr: float, total_steps: int, warmup_steps: int = 0) -> keras.optimizers.schedules.CosineDecay:
    """The learning rate of step t (0-based): ``peak·t/W`` for t < W, then ``peak·½(1 + cos(π(t − W)/(T − W)))``,
    MoCo v3's ``adjust_learning_rate`` and DINO's ``cosine_scheduler`` (final value 0) per iteration. Keras'
    `CosineDecay` computes exactly this; without warm-up it is the plain cosine of the paper's runs."""
    total_steps = max(1, total_steps)
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(f"warm-up must be shorter than the run: {warmup_steps} warm-up steps of {total_steps}")
    if not warmup_steps:
        return keras.optimizers.schedules.CosineDecay(peak_lr, decay_steps=total_steps)
    return keras.optimizers.schedules.CosineDecay(0.0, decay_steps=total_steps - warmup_steps,
                                                  warmup_target=peak_lr, warmup_steps=warmup_steps)


def scaled_learning_rate(base_lr: float, global_batch_size: int) -> float:
    """The linear scaling rule lr = base_lr · batch / 256 used by SimSiam, MoCo and the paper."""
    return base_lr * global_batch_size / 256.0


class TorchSGD(keras.optimizers.Optimizer):
    """`torch.optim.SGD(momentum, weight_decay)` (dampening 0, no Nesterov) as a Keras optimizer.

    Args:
      learning_rate: a float or a schedule of the optimizer's step.
      momentum: μ of b ← μ·b + g.
      l2: coupled weight decay: g ← g + l2·θ on every variable (BN and biases too, as the reference) unless
        ``decay_exclude`` leaves some out.
      decay_exclude: which variables the decay skips (``optimizer_parts.WEIGHT_DECAY_EXCLUDE``).
      constant_lr: the learning rate of `constant_lr_variables`, whatever the schedule says.
      constant_lr_variables: the variables of the reference's constant-lr parameter group.
      held_variables, held_steps: variables left out of the update (no decay, no momentum) for the first
        ``held_steps`` steps, as torch's SGD skips a parameter without a gradient (DINO's frozen last layer).
      clip_grad: DINO's per-variable clipping (`utils.clip_gradients`, which its ResNet recipe runs under SGD too):
        each gradient scaled to norm at most this, before the decay is added; 0: off (the paper's).
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 0.01,
        momentum: float = 0.9,
        l2: float = 0.0,
        constant_lr: float | None = None,
        constant_lr_variables: Iterable[tf.Variable] = (),
        decay_exclude: str = "none",
        name: str = "torch_sgd",
        held_variables: Iterable[tf.Variable] = (),
        held_steps: int = 0,
        clip_grad: float = 0.0,
        **kwargs,
    ) -> None:
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        constant = checked_shared_settings(clip_grad, decay_exclude, constant_lr, constant_lr_variables)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if l2 < 0:
            raise ValueError(f"weight decay (l2) must be >= 0, got {l2}")
        self.momentum = float(momentum)
        self.l2 = float(l2)
        self.clip_grad = float(clip_grad)
        self.decay_exclude = decay_exclude
        self._is_decayed: list[bool] = []
        self.constant_lr = constant_lr
        self._constant_ids = {id(v) for v in constant}
        self._is_constant: list[bool] = []
        self._keep: tf.Variable | None = None
        self.held = HeldVariables(held_variables, held_steps)
        self._count_steps_per_replica()

    def gate_updates(self, keep: tf.Variable) -> None:
        """Makes every later step conditional on `keep`, a boolean scalar variable: while it holds False, a step
        leaves the weights and momentum buffers exactly as they are (it still counts in `iterations`). A select,
        not a branch: the loss-scaling wrapper (training/loss_scale.py) skips a step with it on every replica
        without a `tf.cond` around the collectives."""
        self._keep = keep

    def _count_steps_per_replica(self) -> None:
        count_steps_per_replica(self)

    def build(self, variables: list) -> None:
        """Creates one momentum buffer per variable (zeros: the first step's buffer is g, as PyTorch's)."""
        if self.built:
            return
        super().build(variables)
        self._is_constant = [id(v) in self._constant_ids for v in variables]
        self._is_decayed = [is_decayed(v, self.decay_exclude) for v in variables]
        missing = len(self._constant_ids) - sum(self._is_constant)
        if missing:
            raise ValueError(f"{missing} constant-lr variables are not among the optimized variables")
        self.held.check(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum") if self.momentum else []

    def update_step(self, gradient, variable, learning_rate) -> None:
        i = self._get_variable_index(variable)
        lr = self.constant_lr if self._is_constant[i] else learning_rate
        lr = tf.cast(lr, variable.dtype)
        g = tf.cast(gradient, variable.dtype)
        if self.clip_grad:
            g = clip_by_own_norm(g, self.clip_grad)
        if self.l2 and self._is_decayed[i]:
            g = g + tf.cast(self.l2, variable.dtype) * variable
        held = self.held.now(i, self.iterations)
        if self._keep is not None or held is not None:
            self._gated_update(g, variable, lr, i, held)
            return
        if self.momentum:
            # One fused kernel, b ← μ·b + g; θ ← θ − lr·b (PyTorch's order): 1 op where the composed update had
            # about 5 per variable (fewer graph ops to trace on every replica, fewer kernel launches a step).
            tf.raw_ops.ResourceApplyMomentum(var=variable.handle, accum=self.momentums[i].handle, lr=lr, grad=g,
                                             momentum=tf.cast(self.momentum, variable.dtype), use_locking=False,
                                             use_nesterov=False)
            return
        self.assign_sub(variable, lr * g)

    def _gated_update(self, g: tf.Tensor, variable, lr: tf.Tensor, i: int, held: tf.Tensor | None = None) -> None:
        # this replica's copy of the verdict (all copies agree)
        keep = tf.constant(True) if self._keep is None else tf.convert_to_tensor(self._keep)
        if held is not None:
            keep = tf.logical_and(keep, tf.logical_not(held))
        if self.momentum:
            buffer = self.momentums[i]
            new_buffer = tf.cast(self.momentum, variable.dtype) * buffer + g
            self.assign(buffer, tf.where(keep, new_buffer, buffer))
            g = new_buffer
        self.assign(variable, tf.where(keep, variable - lr * g, variable))

    def get_config(self) -> dict:
        return {**super().get_config(), "momentum": self.momentum, "l2": self.l2, "constant_lr": self.constant_lr,
                "decay_exclude": self.decay_exclude, "held_steps": self.held.steps, "clip_grad": self.clip_grad}


def build_optimizer(
    base_lr: float,
    global_batch_size: int,
    total_steps: int,
    momentum: float = 0.9,
    mixed_precision: str | None = None,
    weight_decay: float = 0.0,
    constant_lr_variables: Iterable[tf.Variable] = (),
    warmup_steps: int = 0,
    decay_exclude: str = AUTO_EXCLUDE,
    optimizer: str = "sgd",
    weight_decay_end: float | None = None,
    clip_grad: float = 0.0,
    held_variables: Iterable[tf.Variable] = (),
    held_steps: int = 0,
) -> keras.optimizers.Optimizer:
    """The run's ``optimizer`` (:data:`OPTIMIZERS`) over `total_steps`: a linear warm-up of `warmup_steps` to the
    batch-scaled learning rate, then cosine decay to 0 (:func:`warmup_cosine`); the `constant_lr_variables` stay at
    that scaled rate throughout (solo-learn and the reference keep SimSiam's predictor there from step 0). ``sgd``
    is :class:`TorchSGD` (coupled L2); every one leaves out of its decay (and LARS of its trust ratio) the variables
    ``decay_exclude`` names (`decay_exclusion`: ``auto`` is the optimizer's own rule, ``1d`` for LARS, ``none`` for the
    others); every one clips each variable's gradient at ``clip_grad`` (DINO's), and ``adamw`` and ``lars``
    (`torch_optimizers`) also take a weight-decay schedule to ``weight_decay_end``. Each leaves ``held_variables`` out
    of its update for the first ``held_steps`` steps (the model's `held_variables`). float16 wraps it in dynamic loss
    scaling whose skip decision covers every replica's gradients (:class:`CrossReplicaLossScaleOptimizer`).

    Raises:
      ValueError: an unknown optimizer, or ``weight_decay_end`` with ``sgd``.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    decay_exclude = decay_exclusion(decay_exclude, optimizer)
    lr = scaled_learning_rate(base_lr, global_batch_size)
    schedule = warmup_cosine(lr, total_steps, warmup_steps)
    constant = {"constant_lr": lr, "constant_lr_variables": constant_lr_variables, "held_variables": held_variables,
                "held_steps": held_steps}
    if optimizer == "sgd":
        if weight_decay_end is not None:
            raise ValueError("--weight_decay_end is for --optimizer=adamw or lars; sgd decays as the paper's "
                             "reference, at a constant rate")
        optimizer = TorchSGD(schedule, momentum=momentum, l2=weight_decay, decay_exclude=decay_exclude,
                             clip_grad=clip_grad, **constant)
    elif optimizer == "adamw":
        optimizer = TorchAdamW(schedule, weight_decay=weight_decay, weight_decay_end=weight_decay_end,
                               total_steps=total_steps, clip_grad=clip_grad, decay_exclude=decay_exclude, **constant)
    else:
        optimizer = LARS(schedule, weight_decay=weight_decay, weight_decay_end=weight_decay_end,
                         total_steps=total_steps, momentum=momentum, clip_grad=clip_grad, decay_exclude=decay_exclude,
                         **constant)
    if mixed_precision == "float16":
        optimizer = CrossReplicaLossScaleOptimizer(optimizer)
    return optimizer
