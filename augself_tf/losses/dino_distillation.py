"""DINO's self-distillation loss (Caron et al., ICCV 2021; facebookresearch/dino ``main_dino.py`` `DINOLoss`).

The student's K-way outputs of every crop (global crops first, then local ones) are compared with the teacher's
outputs of the global crops alone: the teacher's, centred and sharpened, P_t = softmax((t − c)/τ_t), are the
targets of the student's log-softmax at τ_s,

    L = 1/|pairs| · Σ_{g < G} Σ_{v ≠ g} mean_b[ −Σ_k P_t[g, b, k] · log softmax(s[v, b] / τ_s)_k ],

the pairs where student and teacher see the same crop (v = g) left out. The center c is an EMA of the teacher
outputs' mean over the global batch (every replica's examples): c ← m·c + (1 − m)·mean(t), m 0.9. The teacher's
targets carry no gradient. Inputs are crop-major, as DINO's ``chunk``: rows [v·B, (v + 1)·B) are crop v.
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.losses.cross_replica import all_reduce_sum


def dino_cross_entropy(student: tf.Tensor, teacher: tf.Tensor, center: tf.Tensor, *, num_global: int,
                       student_temperature: float | tf.Tensor, teacher_temperature: float | tf.Tensor) -> tf.Tensor:
    """DINO's loss on one replica's batch: the mean over the (teacher crop, other student crop) pairs of the mean
    over examples of the cross-entropy.

    Args:
      student: [V·B, K] the student's outputs of all V crops, crop-major (the global crops first).
      teacher: [G·B, K] the teacher's outputs of the G = ``num_global`` global crops, crop-major (no gradient).
      center: [1, K] or [K], the center subtracted from the teacher's outputs.
      num_global: G, the global crops (the first G of the student's crops are the same images).
      student_temperature, teacher_temperature: τ_s and τ_t.

    Raises:
      ValueError: fewer than 2 global crops (no pair would remain), or row counts that are not multiples of B.
    """
    if num_global < 2:
        raise ValueError(f"DINO's loss needs at least 2 global crops, got {num_global}")
    student = tf.cast(student, tf.float32)
    k = tf.shape(student)[-1]
    batch = tf.shape(teacher)[0] // num_global
    s = tf.reshape(student, [-1, batch, k])  # [V, B, K]
    crops = tf.shape(s)[0]
    log_p = tf.nn.log_softmax(s / tf.cast(student_temperature, tf.float32), axis=-1)
    q = tf.reshape(tf.nn.softmax(teacher_logits(teacher, center, teacher_temperature), axis=-1), [num_global, batch, k])
    # terms[g, v] = mean_b −Σ_k q[g, b, k]·log_p[v, b, k]
    terms = -tf.einsum("gbk,vbk->gv", q, log_p) / tf.cast(batch, tf.float32)
    other = tf.logical_not(tf.equal(tf.range(num_global)[:, None], tf.range(crops)[None, :]))
    pairs = tf.reduce_sum(tf.cast(other, tf.float32))
    return tf.reduce_sum(tf.where(other, terms, 0.0)) / pairs


def teacher_logits(teacher: tf.Tensor, center: tf.Tensor, teacher_temperature: float | tf.Tensor) -> tf.Tensor:
    """(t − c)/τ_t, the logits of the teacher's targets P_t (no gradient), row for row."""
    teacher = tf.stop_gradient(tf.cast(teacher, tf.float32))
    return (teacher - tf.reshape(tf.cast(center, tf.float32), [1, -1])) / tf.cast(teacher_temperature, tf.float32)


def teacher_entropy(teacher: tf.Tensor, center: tf.Tensor, teacher_temperature: float | tf.Tensor) -> tf.Tensor:
    """The mean over the teacher's rows of the entropy of its targets P_t, in nats: DINO's collapse diagnostic (its
    paper's Fig. 7). ln K when the targets are uniform (collapse by the center), 0 when one dimension dominates
    (collapse by sharpening). DINO's loss is this entropy plus the mean KL(P_t ‖ P_s) over the pairs, since every
    teacher crop meets the same number of student crops."""
    logits = teacher_logits(teacher, center, teacher_temperature)
    log_q = tf.nn.log_softmax(logits, axis=-1)
    return tf.reduce_mean(-tf.reduce_sum(tf.exp(log_q) * log_q, axis=-1))


def global_batch_mean(teacher: tf.Tensor) -> tf.Tensor:
    """[1, K]: the mean of the teacher's outputs over every replica's rows (DINO's ``update_center``: the sum
    all-reduced, divided by the rows of all replicas), by one all-reduce that needs no merge_call."""
    teacher = tf.stop_gradient(tf.cast(teacher, tf.float32))
    total = all_reduce_sum(tf.reduce_sum(teacher, axis=0, keepdims=True))
    context = tf.distribute.get_replica_context()
    replicas = 1 if context is None else context.num_replicas_in_sync
    return total / tf.cast(tf.shape(teacher)[0] * replicas, tf.float32)


def updated_center(center: tf.Tensor, batch_mean: tf.Tensor, momentum: float) -> tf.Tensor:
    """The center after a step: m·c + (1 − m)·(the teacher's global batch mean)."""
    return tf.cast(center, tf.float32) * momentum + batch_mean * (1.0 - momentum)
