"""SimCLR (augself_tf/methods/simclr.py): NT-Xent against NumPy, on one device and across 2 replicas."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import batch, make_model, np_log_softmax, unit

from augself_tf.methods.simclr import nt_xent


def np_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    z = unit(np.concatenate([z1, z2]).astype("float64"))
    n = len(z1)
    sim = z @ z.T / t
    np.fill_diagonal(sim, -np.inf)
    pos = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return float(np.mean(-np_log_softmax(sim)[np.arange(2 * n), pos]))


def test_nt_xent_matches_numpy():
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=[5, 7]).astype("float32"), rng.normal(size=[5, 7]).astype("float32")
    np.testing.assert_allclose(float(nt_xent(z1, z2, 0.2)), np_nt_xent(z1, z2, 0.2), rtol=1e-5)


def test_simclr_method_loss_is_nt_xent_of_the_projections():
    model = make_model("simclr", augself=())
    b = batch(4)
    f1, f2 = model.backbone(b["view1"], training=False), model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    z1 = model.projector(f1, training=False).numpy()
    z2 = model.projector(f2, training=False).numpy()
    np.testing.assert_allclose(float(loss), np_nt_xent(z1, z2, 0.2), rtol=1e-5)


@pytest.mark.parametrize(("reduction", "merge_call"),
                         [("one_device", True), ("collective", True), ("collective", False)])
def test_cross_replica_nt_xent_equals_the_global_loss_and_gradient(reduction, merge_call):
    strategy = mirrored_cpus(reduction, merge_call=merge_call)
    rng = np.random.default_rng(1)
    z1, z2 = rng.normal(size=[8, 6]).astype("float32"), rng.normal(size=[8, 6]).astype("float32")

    def replica_fn(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            loss = nt_xent(a, b, 0.2) / 2.0  # each replica contributes 1/R, as in train_step
        ga, gb = tape.gradient(loss, [a, b])
        return loss, ga, gb

    parts = [(z1[i * 4:(i + 1) * 4], z2[i * 4:(i + 1) * 4]) for i in range(2)]
    values = [
        strategy.experimental_distribute_values_from_function(lambda ctx, j=j: parts[ctx.replica_id_in_sync_group][j])
        for j in range(2)
    ]
    loss, ga, gb = strategy.run(tf.function(replica_fn), args=tuple(values))
    total = sum(float(x) for x in strategy.experimental_local_results(loss))
    ga = np.concatenate(strategy.experimental_local_results(ga))
    gb = np.concatenate(strategy.experimental_local_results(gb))
    a, b = tf.constant(z1), tf.constant(z2)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        want = nt_xent(a, b, 0.2)
    wa, wb = tape.gradient(want, [a, b])
    np.testing.assert_allclose(total, float(want), rtol=1e-5)
    np.testing.assert_allclose(total, np_nt_xent(z1, z2, 0.2), rtol=1e-5)
    np.testing.assert_allclose(ga, wa.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gb, wb.numpy(), rtol=1e-4, atol=1e-6)
