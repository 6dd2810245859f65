"""Supervised pretraining: cross-entropy of a linear classifier on the backbone features of both views.

L = mean over the 2b views of CE(W·f(v) + c, y). Examples with a negative label (unlabeled data such as
STL10's `unlabelled` split) are left out of the mean; the AugSelf heads still see every pair.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.losses.masked_cross_entropy import masked_cross_entropy
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models.torch_init import Linear


class Supervised(AugSelfModel):
    """Linear classifier d→num_classes on f(v1) and f(v2); `num_classes` comes from the training loop."""

    method_name = "supervised"
    needs_labels = True

    @dataclasses.dataclass(frozen=True)
    class Options:
        num_classes: int | None = None  # the training loop's: the pretraining data's classes

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        num_classes = self.method_options.num_classes
        if num_classes is None or num_classes < 1:
            raise ValueError(f"supervised pretraining needs num_classes >= 1, got {num_classes}")
        self.num_classes = int(num_classes)
        self.classifier = self.conditioned(Linear(self.num_classes, name="classifier"))

    def build_heads(self, feature_dim: int) -> None:
        self.classifier(tf.zeros([2, feature_dim]))

    def method_loss(self, f1, f2, batch, training):
        logits = self.classifier(tf.concat([f1, f2], 0), training=training)
        labels = tf.concat([batch["label"], batch["label"]], 0)
        loss, accuracy = masked_cross_entropy(logits, labels)
        return loss, {"supervised/accuracy": accuracy}
