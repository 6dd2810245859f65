"""Weighted k-nearest-neighbour classification on features (InstDisc's and solo-learn's kNN monitor)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

DEFAULT_K = 200  # solo-learn's and InstDisc's kNN
DEFAULT_TEMPERATURE = 0.1


def weighted_knn_predict(
    bank_features: tf.Tensor | np.ndarray,
    bank_labels: tf.Tensor | np.ndarray,
    query_features: tf.Tensor | np.ndarray,
    num_classes: int,
    k: int = DEFAULT_K,
    temperature: float = DEFAULT_TEMPERATURE,
    chunk: int = 1024,
) -> tf.Tensor:
    """Predicted class of every query by a similarity-weighted vote of its k nearest bank examples.

    Similarity is the cosine of the features; each of the k most similar bank examples votes for its label
    with weight exp(similarity / temperature) and the class with the largest total wins (ties: the lower
    class id). This is solo-learn's ``weighted_knn`` (after Wu et al., 2018, "InstDisc").

    Args:
      bank_features: [n, d] features of the labelled bank.
      bank_labels: [n] integer labels in 0..num_classes-1.
      query_features: [m, d] features to classify.
      num_classes: number of classes.
      k: neighbours per query (capped at n).
      temperature: softness of the vote weights.
      chunk: queries per matrix product, bounding memory at chunk·n similarities.

    Returns:
      int64 [m] predicted labels.
    """
    bank = tf.math.l2_normalize(tf.cast(bank_features, tf.float32), axis=1)
    labels = tf.cast(bank_labels, tf.int64)
    queries = tf.math.l2_normalize(tf.cast(query_features, tf.float32), axis=1)
    k = min(int(k), int(bank.shape[0]))
    out = []
    for start in range(0, int(queries.shape[0]), chunk):
        sims = tf.matmul(queries[start : start + chunk], bank, transpose_b=True)  # [c, n]
        top_sims, top_idx = tf.math.top_k(sims, k=k)  # [c, k]
        votes = tf.one_hot(tf.gather(labels, top_idx), num_classes) * tf.exp(top_sims / temperature)[..., None]
        out.append(tf.argmax(tf.reduce_sum(votes, axis=1), axis=1))
    if not out:
        return tf.zeros([0], tf.int64)
    return tf.concat(out, axis=0)


def weighted_knn_accuracy(
    bank_features: tf.Tensor | np.ndarray,
    bank_labels: tf.Tensor | np.ndarray,
    query_features: tf.Tensor | np.ndarray,
    query_labels: tf.Tensor | np.ndarray,
    num_classes: int,
    k: int = DEFAULT_K,
    temperature: float = DEFAULT_TEMPERATURE,
) -> float:
    """Top-1 accuracy of :func:`weighted_knn_predict` on labelled queries, in [0, 1]."""
    predicted = weighted_knn_predict(bank_features, bank_labels, query_features, num_classes, k, temperature)
    return float(np.mean(predicted.numpy() == np.asarray(query_labels, np.int64)))
