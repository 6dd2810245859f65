"""What every optimizer of training/ shares: the weight-decay exclusion rule, the per-replica step counter and the
variables held out of the update (:class:`~augself_tf.training.optim.TorchSGD`, and AdamW and LARS in
`torch_optimizers`)."""

from __future__ import annotations

from collections.abc import Iterable

import keras
import tensorflow as tf

#: --weight_decay_exclude's choices: ``none`` decays every variable (the paper's reference); ``1d`` leaves out every
#: variable of at most one dimension (biases, BN and LayerNorm scales and offsets), the rule of MoCo v3's LARS, DINO's
#: ``get_params_groups`` and solo-learn's ``exclude_bias_n_norm_wd``.
WEIGHT_DECAY_EXCLUDE = ("none", "1d")
#: --weight_decay_exclude's default: the optimizer's own rule (`decay_exclusion`).
AUTO_EXCLUDE = "auto"


def decay_exclusion(exclude: str, optimizer: str) -> str:
    """The rule of :data:`WEIGHT_DECAY_EXCLUDE` a run applies: ``exclude``, or for ``auto`` the optimizer's own,
    ``1d`` for ``lars`` (MoCo v3's LARS skips parameters of at most one dimension) and ``none`` for ``sgd`` and
    ``adamw`` (the paper's reference and MoCo v3's AdamW decay every parameter). Any other value is returned as
    it is: the optimizer refuses an unknown rule in one line."""
    return ("1d" if optimizer == "lars" else "none") if exclude == AUTO_EXCLUDE else exclude


def is_decayed(variable, exclude: str = "none") -> bool:
    """Whether weight decay applies to ``variable`` under the ``exclude`` rule (:data:`WEIGHT_DECAY_EXCLUDE`)."""
    return exclude == "none" or len(variable.shape) > 1


def checked_shared_settings(clip_grad: float, decay_exclude: str, constant_lr: float | None,
                            constant_lr_variables: Iterable[tf.Variable]) -> list[tf.Variable]:
    """Refuses, one line each, what every optimizer here refuses: a negative ``clip_grad``, an exclusion rule not in
    :data:`WEIGHT_DECAY_EXCLUDE`, constant-lr variables without a ``constant_lr``. Returns those variables listed.

    Raises:
      ValueError: one of the three.
    """
    if clip_grad < 0:
        raise ValueError(f"--clip_grad must be >= 0 (0: off), got {clip_grad}")
    if decay_exclude not in WEIGHT_DECAY_EXCLUDE:
        raise ValueError(f"weight decay exclusion must be one of {', '.join(WEIGHT_DECAY_EXCLUDE)}, "
                         f"got {decay_exclude!r}")
    constant = list(constant_lr_variables)
    if constant and constant_lr is None:
        raise ValueError("constant_lr_variables need a constant_lr")
    return constant


def count_steps_per_replica(optimizer: keras.optimizers.Optimizer) -> None:
    """Replaces Keras' step counter (aggregation ONLY_FIRST_REPLICA) by one with aggregation NONE, same name.

    `apply` adds 1 to the counter in replica context. ONLY_FIRST_REPLICA makes that write a `merge_call`, and a
    replica function compiled with XLA on GPUs runs without merge_call: there it raises (``merge_call called
    while defining a new graph``). Every replica adds the same 1 from the same value, so each replica's own
    copy stays equal without any cross-replica step; the checkpoint key (its path) is unchanged.

    The Keras variable stays the same object and only its TensorFlow variable is made anew (inside the
    strategy's scope, as the optimizer is built): replacing the object in the optimizer's tracked list would
    make the model unsaveable by `tf.train.Checkpoint` ("Unable to save the object ListWrapper").
    """
    counter = optimizer._iterations
    counter._aggregation = "none"  # read by _initialize when it makes the tf.Variable
    counter._initialize(0)


class HeldVariables:
    """Variables an optimizer leaves out of its update while its step counter is below ``steps`` (DINO's frozen
    last layer): their values and optimizer state stay as they are, as torch's for a parameter without a gradient.
    """

    def __init__(self, variables: Iterable[tf.Variable] = (), steps: int = 0) -> None:
        self.ids = {id(v) for v in variables}
        self.steps = int(steps) if self.ids else 0
        self.by_index: list[bool] = []
        if self.steps < 0:
            raise ValueError(f"held steps must be >= 0, got {steps}")

    def check(self, variables: list) -> list[bool]:
        """Whether each of the optimizer's ``variables`` is held (by its index, as `update_step` finds it).

        Raises:
          ValueError: a held variable the optimizer does not update.
        """
        held = [id(v) in self.ids for v in variables]
        if len(self.ids) != sum(held):
            raise ValueError(f"{len(self.ids) - sum(held)} held variables are not among the optimized variables")
        self.by_index = held
        return held

    def now(self, index: int, iterations: tf.Variable) -> tf.Tensor | None:
        """True while variable ``index`` is held at this step; None for a variable that never is."""
        if not self.steps or not self.by_index[index]:
            return None
        return tf.less(iterations, self.steps)
