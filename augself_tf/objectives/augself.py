"""AugSelf (Lee et al., NeurIPS 2021): predict the difference of the two views' augmentation parameters ω.

L_AugSelf = Σ_aug w_aug · L_aug, each L_aug the mean over both orders of the 2B pairs: φ_aug([f1, f2]) → ω_diff(1, 2)
and φ_aug([f2, f1]) → ω_diff(2, 1), with the loss and target of the augmentation's registry entry
(`augself_tf.losses.augself_heads`). Its tasks and weights are the run's ``--augself`` / ``--augself_weight``.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

from augself_tf.augment.registry import AUGMENTATIONS
from augself_tf.losses.augself_heads import batch_r2, ordered_pairs, ordered_targets, tanh_mse
from augself_tf.models.resnet import mlp
from augself_tf.objectives.base import Objective

AUGSELF_HIDDEN = 512


class AugSelf(Objective):
    """One head φ_aug (d·2 → 512 → 512 → the ω size) per predicted augmentation.

    Args:
      weights: {augmentation name (a key of ``AUGMENTATIONS``): its weight w_aug in the total loss}.
      synchronized_bn: cross-replica batch statistics in the heads.
    """

    key = "augself"

    def __init__(self, weights: Mapping[str, float], synchronized_bn: bool = False) -> None:
        super().__init__()
        unknown = [a for a in weights if a not in AUGMENTATIONS]
        if unknown:
            raise ValueError(f"unknown AugSelf augmentation {unknown[0]!r}; choose from {', '.join(AUGMENTATIONS)}")
        if any(not w >= 0 for w in weights.values()):
            raise ValueError(f"AugSelf task weights must be >= 0, got {dict(weights)}")
        self.task_weights = {name: float(w) for name, w in weights.items()}
        self.heads = {
            name: mlp(
                [AUGSELF_HIDDEN, AUGSELF_HIDDEN, AUGMENTATIONS[name].head_dim],
                synchronized_bn=synchronized_bn,
                name=f"augself_{name}",
                dtype="float32",  # under mixed precision the ω regression stays in float32, as its loss
            )
            for name in self.task_weights
        }

    def build_objective(self, model) -> None:
        for head in self.heads.values():
            head(tf.zeros([2, 2 * model.feature_dim]), training=False)

    def task_losses(self, f1: tf.Tensor, f2: tf.Tensor, omega1: dict, omega2: dict, training: bool
                    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Σ_aug L_aug (unweighted) and the logs ``augself/<aug>_loss``, ``_error`` (and ``_r2`` for tanh-MSE
        targets) of the features f1, f2 of two views with parameters ω1, ω2."""
        pairs = ordered_pairs(f1, f2)
        total = tf.constant(0.0)
        logs = {}
        for name in self.task_weights:
            aug = AUGMENTATIONS[name]
            target = ordered_targets(aug.target, omega1, omega2)
            pred = tf.cast(self.heads[name](pairs, training=training), tf.float32)
            loss = tf.reduce_mean(aug.loss(pred, target))
            total += loss
            logs[f"augself/{name}_loss"] = loss
            logs[f"augself/{name}_error"] = tf.reduce_mean(aug.metric(pred, target))
            if aug.loss is tanh_mse:  # its error means little alone: a random head's step-0 error is far above
                logs[f"augself/{name}_r2"] = batch_r2(tf.tanh(pred), target)  # the target's own variance
        return total, logs

    def objective_loss(self, model, batch, forward, training):
        """Σ_aug w_aug·L_aug, logged unweighted as ``loss/augself`` beside each task's logs."""
        del model
        total, logs = self.task_losses(forward.f1, forward.f2, batch["omega1"], batch["omega2"], training)
        weighted = tf.constant(0.0)
        for name, weight in self.task_weights.items():
            weighted += weight * logs[f"augself/{name}_loss"]
        return weighted, {"loss/augself": total, **logs}
