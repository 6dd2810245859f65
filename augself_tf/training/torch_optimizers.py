"""AdamW and LARS with the semantics of the ViT recipes' PyTorch code, as Keras optimizers.

- :class:`TorchAdamW` is `torch.optim.AdamW` (decoupled decay θ ← θ·(1 − lr·wd), then Adam with ε added to
  √v̂). Keras' own AdamW differs in ε: it adds ε to √v before the bias correction (the Adam paper's ε̂), which is
  torch's ε scaled by √(1 − β₂ᵗ), 32× larger at step 1, so it is not used.
- :class:`LARS` is MoCo v3's ``moco/optimizer.py``: on every decayed variable the step is g + wd·θ rescaled by
  the trust ratio 0.001·‖θ‖/‖g + wd·θ‖, then momentum in gradient units; a variable ``decay_exclude`` leaves out
  gets neither decay nor the ratio, as MoCo v3's does for parameters of at most one dimension (biases, norms):
  its rule is ``1d``, LARS's default (and --weight_decay_exclude's ``auto`` for LARS).

Both add DINO's two extras: a weight-decay schedule (cosine from ``weight_decay`` to ``weight_decay_end`` over
the run, per step, `utils.cosine_scheduler`; the value is a function of the step counter, so there is no state to
checkpoint) and per-variable gradient clipping (`utils.clip_gradients`: each gradient scaled to norm at most
``clip_grad``). Both run in `update_step`, after the gradients were summed over replicas and unscaled, where
DINO clips them (Keras' ``clipnorm`` clips the local, unreduced gradients of each replica). Both offer
``gate_updates``, so the float16 loss-scaling wrapper (training/loss_scale.py) skips a step without a branch (the
schedules still count it; AdamW's bias correction counts the applied steps only, as torch's ``step`` under
GradScaler), and
both leave ``held_variables`` out of the update for their first ``held_steps`` steps (DINO's last layer in its first
epoch, ``cancel_gradients_last_layer``: torch skips a parameter without a gradient, so neither its decay nor its
moments move, and AdamW counts that parameter's own steps for its bias correction from its first update).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import keras
import tensorflow as tf

from augself_tf.training.optimizer_parts import (
    HeldVariables,
    checked_shared_settings,
    count_steps_per_replica,
    is_decayed,
)


def cosine_weight_decay(step: tf.Tensor, start: float, end: float | None, total_steps: int) -> tf.Tensor:
    """DINO's ``cosine_scheduler(start, end, ...)`` at the 0-based step: end + ½(start − end)(1 + cos(πt/T));
    ``start`` at every step when ``end`` is None."""
    if end is None:
        return tf.constant(start, tf.float32)
    t = tf.cast(step, tf.float32)
    return end + 0.5 * (start - end) * (1.0 + tf.cos(math.pi * t / float(max(1, total_steps))))


def clip_by_own_norm(gradient: tf.Tensor, clip: float) -> tf.Tensor:
    """DINO's ``clip_gradients`` for one parameter: g·clip/(‖g‖ + 1e-6) when that factor is below 1, else g."""
    coef = clip / (tf.norm(gradient) + 1e-6)
    return gradient * tf.minimum(tf.cast(coef, gradient.dtype), 1.0)


class _TorchStyle(keras.optimizers.Optimizer):
    """What AdamW and LARS share: decay schedule and exclusion, clipping, a constant-lr group, gated writes and
    the per-replica step counter of :class:`~augself_tf.training.optim.TorchSGD`."""

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule,
        weight_decay: float,
        weight_decay_end: float | None,
        total_steps: int,
        clip_grad: float,
        decay_exclude: str,
        constant_lr: float | None,
        constant_lr_variables: Iterable[tf.Variable],
        name: str,
        held_variables: Iterable[tf.Variable] = (),
        held_steps: int = 0,
        **kwargs,
    ) -> None:
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if weight_decay < 0 or (weight_decay_end is not None and weight_decay_end < 0):
            raise ValueError(f"weight decay must be >= 0, got {weight_decay} to {weight_decay_end}")
        constant = checked_shared_settings(clip_grad, decay_exclude, constant_lr, constant_lr_variables)
        self.decay = float(weight_decay)
        self.decay_end = None if weight_decay_end is None else float(weight_decay_end)
        self.total_steps = int(total_steps)
        self.clip_grad = float(clip_grad)
        self.decay_exclude = decay_exclude
        self.constant_lr = constant_lr
        self._constant_ids = {id(v) for v in constant}
        self._is_constant: list[bool] = []
        self._is_decayed: list[bool] = []
        self._keep: tf.Variable | None = None
        self.held = HeldVariables(held_variables, held_steps)
        count_steps_per_replica(self)

    def gate_updates(self, keep: tf.Variable) -> None:
        """Every later write is kept only while `keep` (a boolean scalar variable) holds True (a select, not a
        branch), as :meth:`~augself_tf.training.optim.TorchSGD.gate_updates`."""
        self._keep = keep

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self._is_constant = [id(v) in self._constant_ids for v in variables]
        self._is_decayed = [self._decays(v) for v in variables]
        if len(self._constant_ids) != sum(self._is_constant):
            raise ValueError("some constant-lr variables are not among the optimized variables")
        self.held.check(variables)

    def _decays(self, variable) -> bool:
        return is_decayed(variable, self.decay_exclude)

    def weight_decay_now(self) -> tf.Tensor:
        """The decay coefficient of the step under way (the schedule at the step counter)."""
        return cosine_weight_decay(self.iterations, self.decay, self.decay_end, self.total_steps)

    def _prepare(self, gradient, variable, learning_rate) -> tuple[int, tf.Tensor, tf.Tensor, tf.Tensor]:
        """(index, clipped gradient, lr, wd) of `variable`, in its dtype."""
        i = self._get_variable_index(variable)
        lr = tf.cast(self.constant_lr if self._is_constant[i] else learning_rate, variable.dtype)
        g = tf.cast(gradient, variable.dtype)
        if self.clip_grad:
            g = clip_by_own_norm(g, self.clip_grad)
        wd = tf.cast(self.weight_decay_now(), variable.dtype) if self._is_decayed[i] else tf.zeros([], variable.dtype)
        return i, g, lr, wd

    def _write(self, variable, value: tf.Tensor, held: tf.Tensor | None = None) -> None:
        """``variable`` ← ``value`` unless the loss-scale gate or the variable's hold (``held``: True while it is
        left out of the update) keeps it as it is."""
        if self._keep is not None:
            value = tf.where(tf.convert_to_tensor(self._keep), value, variable)
        if held is not None:
            value = tf.where(held, variable, value)
        self.assign(variable, value)

    def get_config(self) -> dict:
        return {**super().get_config(), "weight_decay": self.decay, "weight_decay_end": self.decay_end,
                "total_steps": self.total_steps, "clip_grad": self.clip_grad, "decay_exclude": self.decay_exclude,
                "constant_lr": self.constant_lr, "held_steps": self.held.steps}


class TorchAdamW(_TorchStyle):
    """`torch.optim.AdamW(lr, betas, eps, weight_decay)` (amsgrad off), per step t = 1, 2, ...:
    θ ← θ(1 − lr·wd); m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g²; θ ← θ − lr/(1 − β₁ᵗ) · m / (√v/√(1 − β₂ᵗ) + ε).

    Args:
      learning_rate: a float or a schedule of the step.
      weight_decay, weight_decay_end: the decoupled decay, cosine-scheduled to ``weight_decay_end`` over
        ``total_steps`` when that is set (DINO), else constant (MoCo v3).
      beta_1, beta_2, epsilon: Adam's (torch's defaults).
      clip_grad: per-variable gradient norm limit (0: off).
      decay_exclude: which variables the decay skips (``WEIGHT_DECAY_EXCLUDE``).
      constant_lr, constant_lr_variables: a group held at ``constant_lr`` whatever the schedule.
      held_variables, held_steps: variables left out of the update for the first ``held_steps`` steps.
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
        weight_decay: float = 1e-2,
        weight_decay_end: float | None = None,
        total_steps: int = 1,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        clip_grad: float = 0.0,
        decay_exclude: str = "none",
        constant_lr: float | None = None,
        constant_lr_variables: Iterable[tf.Variable] = (),
        name: str = "torch_adamw",
        **kwargs,
    ) -> None:
        super().__init__(learning_rate, weight_decay, weight_decay_end, total_steps, clip_grad, decay_exclude,
                         constant_lr, constant_lr_variables, name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self.exp_avgs = self.add_optimizer_variables(variables, "exp_avg")
        self.exp_avg_sqs = self.add_optimizer_variables(variables, "exp_avg_sq")
        # torch's per-parameter ``step``: the steps applied, not `iterations` (which the schedules read), since a
        # step the float16 loss scale skips counts in the schedule (torch's schedulers step per iteration) but
        # not here (GradScaler skips ``optimizer.step()``). Aggregation NONE, as the step counter: each replica
        # adds the same verdict to its own copy. ``held_applied``: the applied steps while the held variables
        # were held, which their own count leaves out.
        self.applied_steps = self.add_variable((), dtype="int", name="applied_steps")
        self.held_applied_steps = self.add_variable((), dtype="int", name="held_applied_steps") \
            if self.held.steps else None

    def apply(self, grads: list, trainable_variables: list | None = None) -> None:
        """Keras' `apply` (each variable's `update_step`, then ``iterations`` + 1), then the applied-step counts
        + 1 unless the loss-scale gate skipped the step."""
        super().apply(grads, trainable_variables)
        if not len(grads):  # Keras' apply returned without a step
            return
        kept = tf.constant(True) if self._keep is None else tf.convert_to_tensor(self._keep)
        self.applied_steps.assign_add(tf.cast(kept, self.applied_steps.dtype))
        if self.held_applied_steps is not None:  # the step just counted (iterations − 1) was a held one
            holding = tf.less_equal(self.iterations, self.held.steps)
            self.held_applied_steps.assign_add(tf.cast(kept & holding, self.held_applied_steps.dtype))

    def update_step(self, gradient, variable, learning_rate) -> None:
        i, g, lr, wd = self._prepare(gradient, variable, learning_rate)
        dtype = variable.dtype
        held = self.held.now(i, self.iterations)
        # torch's step after its increment: the steps applied, counted from the variable's first update (a held
        # one's starts after its hold)
        t = self.applied_steps + 1 - (self.held_applied_steps if held is not None else 0)
        t = tf.maximum(tf.cast(t, dtype), 1.0)  # a held variable's value is not written while t would be below 1
        b1, b2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        theta = variable * (1.0 - lr * wd)
        m = b1 * self.exp_avgs[i] + (1.0 - b1) * g
        v = b2 * self.exp_avg_sqs[i] + (1.0 - b2) * tf.square(g)
        denom = tf.sqrt(v) / tf.sqrt(1.0 - tf.pow(b2, t)) + tf.cast(self.epsilon, dtype)
        theta = theta - lr / (1.0 - tf.pow(b1, t)) * m / denom
        self._write(self.exp_avgs[i], m, held)
        self._write(self.exp_avg_sqs[i], v, held)
        self._write(variable, theta, held)

    def get_config(self) -> dict:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


class LARS(_TorchStyle):
    """MoCo v3's LARS (``moco/optimizer.py``): on the decayed variables dp = (g + wd·θ)·q,
    q = trust·‖θ‖/‖g + wd·θ‖ (1 where either norm is 0); on those ``decay_exclude`` leaves out dp = g (neither
    decay nor the ratio); then μ ← momentum·μ + dp; θ ← θ − lr·μ. ``decay_exclude`` ``1d`` (the default) is MoCo
    v3's rule, which leaves out every parameter of at most one dimension; ``none`` decays and adapts them all."""

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 0.0,
        weight_decay: float = 0.0,
        weight_decay_end: float | None = None,
        total_steps: int = 1,
        momentum: float = 0.9,
        trust_coefficient: float = 0.001,
        clip_grad: float = 0.0,
        decay_exclude: str = "1d",
        constant_lr: float | None = None,
        constant_lr_variables: Iterable[tf.Variable] = (),
        name: str = "lars",
        **kwargs,
    ) -> None:
        super().__init__(learning_rate, weight_decay, weight_decay_end, total_steps, clip_grad, decay_exclude,
                         constant_lr, constant_lr_variables, name, **kwargs)
        self.momentum, self.trust_coefficient = float(momentum), float(trust_coefficient)

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate) -> None:
        i, g, lr, wd = self._prepare(gradient, variable, learning_rate)
        if self._is_decayed[i]:  # decay and the trust ratio; an excluded variable gets neither (MoCo v3's)
            g = g + wd * variable
            param_norm, update_norm = tf.norm(variable), tf.norm(g)
            ratio = self.trust_coefficient * param_norm / tf.where(update_norm > 0, update_norm, 1.0)
            g = g * tf.where((param_norm > 0) & (update_norm > 0), ratio, tf.ones_like(ratio))
        held = self.held.now(i, self.iterations)
        mu = tf.cast(self.momentum, variable.dtype) * self.momentums[i] + g
        self._write(self.momentums[i], mu, held)
        self._write(variable, variable - lr * mu, held)

    def get_config(self) -> dict:
        return {**super().get_config(), "momentum": self.momentum, "trust_coefficient": self.trust_coefficient}
