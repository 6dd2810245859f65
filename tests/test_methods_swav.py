"""SwAV (augself_tf/methods/swav.py): Sinkhorn-Knopp and the swapped-prediction loss against NumPy, on one
device and across 2 replicas, and the prototypes frozen for the first epoch."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import batch, compile_model, make_model, np_log_softmax, unit

from augself_tf.methods.swav import sinkhorn


def np_sinkhorn(scores: np.ndarray, eps: float, iters: int) -> np.ndarray:
    q = np.exp(scores.astype("float64") / eps).T
    k, b = q.shape
    q /= q.sum()
    for _ in range(iters):
        q /= q.sum(1, keepdims=True)
        q /= k
        q /= q.sum(0, keepdims=True)
        q /= b
    return (q * b).T


def test_sinkhorn_matches_numpy_and_its_marginals():
    rng = np.random.default_rng(2)
    scores = unit(rng.normal(size=[12, 5])) @ unit(rng.normal(size=[5, 5]), 0)
    q = sinkhorn(tf.constant(scores, tf.float32), 0.05, 3).numpy()
    np.testing.assert_allclose(q, np_sinkhorn(scores, 0.05, 3), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(q.sum(1), np.ones(12), rtol=1e-5)  # every sample's code sums to 1
    # The prototype marginal B/K is reached at convergence (3 iterations only approach it).
    q = sinkhorn(tf.constant(scores, tf.float32), 0.5, 200).numpy()
    np.testing.assert_allclose(q.sum(0), np.full(5, 12 / 5), rtol=1e-3)
    np.testing.assert_allclose(q.sum(1), np.ones(12), rtol=1e-5)


def test_cross_replica_sinkhorn_equals_one_device_on_the_concatenated_batch():
    strategy = mirrored_cpus()
    rng = np.random.default_rng(3)
    scores = (unit(rng.normal(size=[10, 4])) @ unit(rng.normal(size=[4, 6]), 0)).astype("float32")
    parts = [scores[:5], scores[5:]]
    values = strategy.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group])
    q = strategy.run(tf.function(lambda s: sinkhorn(s, 0.05, 3)), args=(values,))
    q = np.concatenate(strategy.experimental_local_results(q))
    np.testing.assert_allclose(q, sinkhorn(tf.constant(scores), 0.05, 3).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(q, np_sinkhorn(scores, 0.05, 3), rtol=1e-4, atol=1e-6)


def test_swav_loss_matches_numpy():
    model = make_model("swav", augself=())
    b = batch(7)
    f1, f2 = model.backbone(b["view1"], training=False), model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    c = model.prototypes.kernel.numpy()
    np.testing.assert_allclose(np.linalg.norm(c, axis=0), 1.0, rtol=1e-5)  # normalised when built
    s1 = unit(model.projector(f1, training=False).numpy()) @ c
    s2 = unit(model.projector(f2, training=False).numpy()) @ c
    q1, q2 = np_sinkhorn(s1, 0.05, 3), np_sinkhorn(s2, 0.05, 3)
    h12 = np.mean(-np.sum(q1 * np_log_softmax(s2 / 0.1), 1))
    h21 = np.mean(-np.sum(q2 * np_log_softmax(s1 / 0.1), 1))
    want = h12 + h21  # summed, as the reference code
    np.testing.assert_allclose(float(loss), want, rtol=1e-4)


def test_swav_prototypes_frozen_for_the_first_epoch_then_trained():
    model = make_model("swav", augself=(), steps_per_epoch=2)  # freeze_prototypes_steps -1 -> one epoch
    assert model.freeze_prototypes_steps == 2
    compile_model(model, lr=0.5)
    step = tf.function(model.train_step)
    start = model.prototypes.kernel.numpy()
    frozen = []
    for k in range(3):
        frozen.append(step(batch(k))["swav/prototypes_frozen"].numpy())
        if k < 2:  # weight decay only rescales; the per-step normalisation undoes it
            np.testing.assert_allclose(unit(model.prototypes.kernel.numpy(), 0), start, rtol=1e-5, atol=1e-6)
    assert frozen == [1.0, 1.0, 0.0]
    assert np.abs(unit(model.prototypes.kernel.numpy(), 0) - start).max() > 1e-4
    model.normalize_prototypes()
    np.testing.assert_allclose(np.linalg.norm(model.prototypes.kernel.numpy(), axis=0), 1.0, rtol=1e-5)
