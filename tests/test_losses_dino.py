"""DINO's loss (augself_tf/losses/dino_distillation.py) against a NumPy transcription of ``DINOLoss.forward`` and
``update_center`` (facebookresearch/dino main_dino.py), in float64: the skipped same-view pairs, the center, the
temperatures; no gradient into the teacher; the center's batch mean over 2 replicas equal to one device's."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from augself_tf.losses.dino_distillation import dino_cross_entropy, global_batch_mean, teacher_entropy, updated_center


def np_log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_dino_loss(student: np.ndarray, teacher: np.ndarray, center: np.ndarray, ncrops: int, n_global: int,
                 student_temp: float, teacher_temp: float) -> float:
    """DINOLoss.forward, loop for loop: chunk, softmax((t − c)/τ_t), skip v == iq, mean of the per-pair means."""
    student_out = np.split(student.astype(np.float64) / student_temp, ncrops)
    teacher_out = np.exp(np_log_softmax((teacher.astype(np.float64) - center) / teacher_temp))
    teacher_out = np.split(teacher_out, n_global)
    total, n_terms = 0.0, 0
    for iq, q in enumerate(teacher_out):
        for v in range(len(student_out)):
            if v == iq:
                continue
            total += np.mean(np.sum(-q * np_log_softmax(student_out[v]), axis=-1))
            n_terms += 1
    return total / n_terms


def np_target_entropy(teacher: np.ndarray, center: np.ndarray, teacher_temp: float) -> float:
    """The mean over the teacher's rows of −Σ_k P_t·log P_t, P_t = softmax((t − c)/τ_t), in float64."""
    log_q = np_log_softmax((teacher.astype(np.float64) - center) / teacher_temp)
    return float(np.mean(-np.sum(np.exp(log_q) * log_q, axis=-1)))


def _outputs(seed: int, crops: int, n_global: int, b: int, k: int):
    rng = np.random.default_rng(seed)
    student = rng.normal(size=[crops * b, k]).astype(np.float32) * 2
    teacher = rng.normal(size=[n_global * b, k]).astype(np.float32) * 2
    center = rng.normal(size=[1, k]).astype(np.float32)
    return student, teacher, center


@pytest.mark.parametrize(("n_global", "n_local", "b", "k"), [(2, 0, 4, 7), (2, 3, 5, 11), (3, 2, 1, 5), (2, 8, 3, 64)])
@pytest.mark.parametrize(("tau_s", "tau_t"), [(0.1, 0.04), (0.5, 0.07)])
def test_the_loss_is_dinos_with_the_same_view_pairs_skipped_and_the_center_subtracted(n_global, n_local, b, k,
                                                                                       tau_s, tau_t):
    crops = n_global + n_local
    student, teacher, center = _outputs(crops * 100 + b, crops, n_global, b, k)
    got = dino_cross_entropy(student, teacher, center, num_global=n_global, student_temperature=tau_s,
                             teacher_temperature=tau_t)
    want = np_dino_loss(student, teacher, center, crops, n_global, tau_s, tau_t)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    # The pieces matter: a loss with the same-view pairs, or without the center, is another number.
    kept = np.mean([np.mean(np.sum(-np.exp(np_log_softmax((t - center) / tau_t)) * np_log_softmax(s / tau_s), -1))
                    for t in np.split(teacher.astype(np.float64), n_global)
                    for s in np.split(student.astype(np.float64), crops)])
    assert abs(kept - want) > 1e-3
    no_center = np_dino_loss(student, teacher, np.zeros_like(center), crops, n_global, tau_s, tau_t)
    assert abs(no_center - want) > 1e-3


def test_the_center_may_be_a_vector_and_the_teacher_gets_no_gradient():
    student, teacher, center = _outputs(0, 4, 2, 3, 6)
    s, t = tf.Variable(student), tf.Variable(teacher)
    with tf.GradientTape() as tape:
        loss = dino_cross_entropy(s, t, center[0], num_global=2, student_temperature=0.1, teacher_temperature=0.04)
    g_student, g_teacher = tape.gradient(loss, [s, t])
    assert g_teacher is None and float(tf.reduce_max(tf.abs(g_student))) > 0
    np.testing.assert_allclose(float(loss), np_dino_loss(student, teacher, center, 4, 2, 0.1, 0.04), rtol=1e-5)


@pytest.mark.parametrize(("n_global", "n_local"), [(2, 0), (2, 3), (3, 2)])
def test_the_teacher_entropy_and_the_mean_kl_add_up_to_the_loss(n_global, n_local):
    """DINO's collapse curves (its Fig. 7): H(P_t) and KL(P_t ‖ P_s), the KL computed pair by pair here."""
    crops, b, k, tau_s, tau_t = n_global + n_local, 4, 9, 0.1, 3.0  # τ_t high enough for targets far from one-hot
    student, teacher, center = _outputs(7 + crops, crops, n_global, b, k)
    entropy = float(teacher_entropy(teacher, center, tau_t))
    assert 0.5 < entropy < np.log(k) - 0.05
    np.testing.assert_allclose(entropy, np_target_entropy(teacher, center, tau_t), rtol=1e-5)
    log_q = np.split(np_log_softmax((teacher.astype(np.float64) - center) / tau_t), n_global)
    log_p = np.split(np_log_softmax(student.astype(np.float64) / tau_s), crops)
    kl = np.mean([np.mean(np.sum(np.exp(log_q[g]) * (log_q[g] - log_p[v]), -1))
                  for g in range(n_global) for v in range(crops) if v != g])
    loss = dino_cross_entropy(student, teacher, center, num_global=n_global, student_temperature=tau_s,
                              teacher_temperature=tau_t)
    np.testing.assert_allclose(float(loss) - entropy, kl, rtol=1e-4)


def test_the_teacher_entropy_is_ln_k_for_uniform_targets_and_near_0_for_one_dominant_dimension():
    k = 16
    centred = np.tile(np.arange(k, dtype=np.float32), (6, 1))
    assert float(teacher_entropy(centred, np.arange(k, dtype=np.float32), 0.04)) == pytest.approx(np.log(k), abs=1e-5)
    peaked = np.zeros([6, k], np.float32)
    peaked[:, 3] = 1.0
    assert float(teacher_entropy(peaked, np.zeros([k], np.float32), 0.01)) < 1e-6


def test_fewer_than_two_global_crops_is_one_line():
    student, teacher, center = _outputs(0, 3, 1, 2, 4)
    with pytest.raises(ValueError, match=r"^DINO's loss needs at least 2 global crops, got 1$"):
        dino_cross_entropy(student, teacher[:2], center, num_global=1, student_temperature=0.1,
                           teacher_temperature=0.04)


def test_the_center_moves_towards_the_batch_mean_by_its_momentum():
    _, teacher, center = _outputs(3, 2, 2, 5, 9)
    mean = global_batch_mean(teacher)
    np.testing.assert_allclose(mean.numpy(), teacher.mean(0, keepdims=True), rtol=1e-5, atol=1e-6)
    got = updated_center(center, mean, 0.9)
    np.testing.assert_allclose(got.numpy(), center * 0.9 + teacher.mean(0, keepdims=True) * 0.1, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("reduction", ["one_device", "collective"])
@pytest.mark.parametrize("merge_call", [True, False])
def test_the_batch_mean_covers_every_replicas_rows(reduction, merge_call):
    """DINO's update_center all-reduces the sum and divides by every replica's rows: each replica gets the mean of
    the global batch, also on the path without merge_call that compiled GPU replicas take."""
    from conftest import mirrored_cpus

    rng = np.random.default_rng(1)
    rows = rng.normal(size=(2, 6, 5)).astype(np.float32)
    strategy = mirrored_cpus(reduction, merge_call=merge_call)
    values = strategy.experimental_distribute_values_from_function(lambda ctx: rows[ctx.replica_id_in_sync_group])

    if merge_call:
        @tf.function
        def run():
            return strategy.run(global_batch_mean, args=(values,))
    else:
        replica_fn = tf.function(global_batch_mean)

        @tf.function
        def run():
            return strategy.run(lambda x: replica_fn(x), args=(values,))

    for got in strategy.experimental_local_results(run()):
        np.testing.assert_allclose(got.numpy(), rows.reshape(12, 5).mean(0, keepdims=True), rtol=1e-5, atol=1e-6)
