"""Supervised pretraining's loss: softmax cross-entropy over the labelled examples only.

Examples with a negative label (unlabelled data such as STL10's `unlabelled` split) are left out of the mean.
"""

from __future__ import annotations

import tensorflow as tf


def masked_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(mean CE over examples with label >= 0, accuracy over them); 0 for both when none is labelled.

    Args:
      logits: class logits [N, C].
      labels: class ids [N]; negative = unlabelled.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    valid = tf.cast(labels >= 0, tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0), logits=logits)
    count = tf.maximum(tf.reduce_sum(valid), 1.0)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    return tf.reduce_sum(ce * valid) / count, tf.reduce_sum(correct * valid) / count
