"""BYOL, SimCLR, SwAV and supervised pretraining: losses against independent NumPy computations, the BYOL
EMA schedule, cross-replica SimCLR negatives and Sinkhorn, and a few steps of each on 2 logical replicas.

A two-layer conv backbone stands in for the ResNet: the methods only see pooled features, and tracing a
ResNet step on 2 replicas costs minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus as mirrored

from augself_tf.methods import METHODS, build_method
from augself_tf.methods.byol import cosine_tau
from augself_tf.methods.simclr import nt_xent
from augself_tf.methods.swav import sinkhorn
from augself_tf.training.optim import build_optimizer

S = 8
SMALL = {
    "projector_hidden": 16,
    "projector_dim": 8,
    "predictor_hidden": 12,
    "num_prototypes": 5,
    "num_classes": 3,
}


# ----------------------------------------------------------------------------- helpers
def tiny_backbone(sync: bool = False) -> keras.Model:
    x = keras.Input([None, None, 3])
    y = keras.layers.Conv2D(6, 3, strides=2, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, synchronized=sync)(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, y, name="tiny")


def make(method: str, augself=("crop", "color"), sync: bool = False, seed: int = 1, **options):
    keras.utils.set_random_seed(seed)
    model = build_method(method, tiny_backbone(sync), options={**SMALL, **options}, augself=augself,
                         weight_decay=5e-4, synchronized_bn=sync)
    model.build_all(S)
    return model


def _omega(rng, n):
    return {
        "crop": rng.uniform(0, 1, [n, 4]).astype("float32"),
        "flip": (rng.uniform(size=[n, 1]) > 0.5).astype("float32"),
        "color": rng.uniform(0, 1, [n, 4]).astype("float32"),
        "blur": rng.uniform(0, 1, [n, 1]).astype("float32"),
        "rotation": rng.integers(0, 4, [n, 1]).astype("float32"),
        "solarize": rng.uniform(0, 1, [n, 1]).astype("float32"),
    }


def batch(seed: int = 0, n: int = 8, size: int = S) -> dict:
    """Random views, ω and labels of ``n`` examples at ``size`` px."""
    rng = np.random.default_rng(seed)
    return {
        "view1": rng.uniform(0, 1, [n, size, size, 3]).astype("float32"),
        "view2": rng.uniform(0, 1, [n, size, size, 3]).astype("float32"),
        "omega1": _omega(rng, n),
        "omega2": _omega(rng, n),
        "label": rng.integers(0, 3, [n]).astype("int64"),
    }


def _halves(tree, i: int):
    if isinstance(tree, dict):
        return {k: _halves(v, i) for k, v in tree.items()}
    n = len(tree) // 2
    return tree[i * n:(i + 1) * n]


def compile_model(model, strategy=None, lr: float = 0.05, total_steps: int = 100) -> None:
    with strategy.scope() if strategy else contextlib.nullcontext():
        model.compile(optimizer=build_optimizer(lr, 256, total_steps))
        model.optimizer.build(model.optimized_variables())
    model.base_learning_rate = lr


def run_steps(model, batches, strategy=None) -> list[dict]:
    """Per-step logs (mean over replicas) of `model.train_step` on full batches split over the replicas."""
    if strategy is None:
        step = tf.function(model.train_step)
        return [{k: float(v) for k, v in step(b).items()} for b in batches]

    @tf.function
    def dist_step(values):
        out = strategy.run(model.train_step, args=(values,))
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in out.items()}

    logs = []
    for b in batches:
        parts = [_halves(b, i) for i in range(2)]
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx, p=parts: p[ctx.replica_id_in_sync_group])
        logs.append({k: float(v) for k, v in dist_step(values).items()})
    return logs


def replica_values(var) -> list[np.ndarray]:
    tf_var = getattr(var, "value", var)
    return [np.asarray(v) for v in getattr(tf_var, "values", [tf_var])]


def unit(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return x / np.linalg.norm(x, axis=axis, keepdims=True)


def np_log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    z = unit(np.concatenate([z1, z2]).astype("float64"))
    n = len(z1)
    sim = z @ z.T / t
    np.fill_diagonal(sim, -np.inf)
    pos = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return float(np.mean(-np_log_softmax(sim)[np.arange(2 * n), pos]))


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


# ----------------------------------------------------------------------------- every method trains
@pytest.mark.parametrize("augself", [(), ("crop", "color")], ids=["plain", "augself"])
@pytest.mark.parametrize("method", ["byol", "simclr", "swav", "supervised"])
def test_method_trains_on_two_replicas(method, augself):
    strategy = mirrored()
    with strategy.scope():
        model = make(method, augself=augself, sync=True, total_steps=3, steps_per_epoch=1)
    compile_model(model, strategy, total_steps=3)
    logs = run_steps(model, [batch(0), batch(1)], strategy)
    for log in logs:
        assert all(math.isfinite(v) for v in log.values()), log
    assert logs[-1]["loss/method"] != 0.0
    assert (logs[-1]["loss/augself"] > 0) == bool(augself)
    for w in model.weights:  # replicas stay in sync
        values = replica_values(w)
        for v in values[1:]:
            np.testing.assert_allclose(v, values[0], rtol=1e-5, atol=1e-6, err_msg=w.path)


def test_new_methods_are_registered_with_their_options():
    for name in ("byol", "simclr", "swav", "supervised"):
        assert METHODS[name].method_name == name
    assert METHODS["supervised"].needs_labels
    assert METHODS["swav"].options["num_prototypes"][0] == 100
    assert METHODS["byol"].options["projector_hidden"][0] == 4096


# ----------------------------------------------------------------------------- BYOL
def test_byol_loss_matches_numpy():
    model = make("byol", augself=())
    b = batch(3)
    f1 = model.backbone(b["view1"], training=False)
    f2 = model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    p1 = model.predictor(model.projector(f1, training=False), training=False).numpy()
    p2 = model.predictor(model.projector(f2, training=False), training=False).numpy()
    t1 = model.target_projector(model.target_backbone(b["view1"], training=False), training=False).numpy()
    t2 = model.target_projector(model.target_backbone(b["view2"], training=False), training=False).numpy()
    want = np.mean(2 - 2 * np.sum(unit(p1) * unit(t2), 1)) + np.mean(2 - 2 * np.sum(unit(p2) * unit(t1), 1))
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)


def test_byol_tau_schedule_endpoints():
    assert float(cosine_tau(0, 100, 0.996)) == pytest.approx(0.996)
    assert float(cosine_tau(50, 100, 0.996)) == pytest.approx(0.998)
    assert float(cosine_tau(100, 100, 0.996)) == pytest.approx(1.0)


def test_byol_target_follows_the_ema_rule_at_start_middle_and_end():
    total = 4
    model = make("byol", augself=("crop",), total_steps=total)
    compile_model(model, lr=0.1, total_steps=total)
    step = tf.function(model.train_step)
    online = model.backbone.trainable_weights + model.projector.trainable_weights
    target = model.target_backbone.trainable_weights + model.target_projector.trainable_weights
    for k in range(total):
        before = [t.numpy() for t in target]
        logs = step(batch(k))
        tau = 1 - (1 - 0.996) * (math.cos(math.pi * k / total) + 1) / 2
        assert float(logs["byol/tau"]) == pytest.approx(tau, abs=1e-7)
        moved = 0.0
        for o, t, old in zip(online, target, before, strict=True):
            np.testing.assert_allclose(t.numpy(), tau * old + (1 - tau) * o.numpy(), rtol=1e-5, atol=1e-7)
            moved = max(moved, float(np.abs(o.numpy() - old).max()))
        assert moved > 0  # online and target differ, so the rule is really exercised
        if k in (0, total // 2, total - 1):
            assert tau == pytest.approx({0: 0.996, total // 2: 0.998, total - 1: 1 - 0.002 * (1 - 2 ** -0.5)}[k])


# ----------------------------------------------------------------------------- SimCLR
def test_nt_xent_matches_numpy():
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=[5, 7]).astype("float32"), rng.normal(size=[5, 7]).astype("float32")
    np.testing.assert_allclose(float(nt_xent(z1, z2, 0.2)), np_nt_xent(z1, z2, 0.2), rtol=1e-5)


def test_simclr_method_loss_is_nt_xent_of_the_projections():
    model = make("simclr", augself=())
    b = batch(4)
    f1, f2 = model.backbone(b["view1"], training=False), model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    z1 = model.projector(f1, training=False).numpy()
    z2 = model.projector(f2, training=False).numpy()
    np.testing.assert_allclose(float(loss), np_nt_xent(z1, z2, 0.2), rtol=1e-5)


def test_cross_replica_nt_xent_equals_the_global_loss_and_gradient():
    strategy = mirrored()
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


@pytest.mark.parametrize("method", ["simclr", "swav"])
def test_two_replicas_equal_one_device_on_the_same_global_batch(method):
    b = batch(6)
    opts = {"total_steps": 10, "freeze_prototypes_steps": 0}
    single = make(method, sync=True, **opts)
    compile_model(single)
    one = run_steps(single, [b])[0]
    strategy = mirrored()
    with strategy.scope():
        double = make(method, sync=True, **opts)
    compile_model(double, strategy)
    two = run_steps(double, [b], strategy)[0]
    np.testing.assert_allclose(two["loss/method"], one["loss/method"], rtol=1e-5)
    for a, w in zip(single.weights, double.weights, strict=True):
        for value in replica_values(w):
            np.testing.assert_allclose(a.numpy(), value, rtol=1e-4, atol=1e-5, err_msg=a.path)


# ----------------------------------------------------------------------------- SwAV
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
    strategy = mirrored()
    rng = np.random.default_rng(3)
    scores = (unit(rng.normal(size=[10, 4])) @ unit(rng.normal(size=[4, 6]), 0)).astype("float32")
    parts = [scores[:5], scores[5:]]
    values = strategy.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group])
    q = strategy.run(tf.function(lambda s: sinkhorn(s, 0.05, 3)), args=(values,))
    q = np.concatenate(strategy.experimental_local_results(q))
    np.testing.assert_allclose(q, sinkhorn(tf.constant(scores), 0.05, 3).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(q, np_sinkhorn(scores, 0.05, 3), rtol=1e-4, atol=1e-6)


def test_swav_loss_matches_numpy():
    model = make("swav", augself=())
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
    model = make("swav", augself=(), steps_per_epoch=2)  # freeze_prototypes_steps -1 -> one epoch
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


# ----------------------------------------------------------------------------- supervised
def test_supervised_loss_matches_numpy_and_ignores_unlabeled():
    model = make("supervised", augself=())
    b = batch(8)
    b["label"][:2] = -1
    f1, f2 = model.backbone(b["view1"], training=False), model.backbone(b["view2"], training=False)
    loss, logs = model.method_loss(f1, f2, b, training=False)
    logits = model.classifier(np.concatenate([f1.numpy(), f2.numpy()])).numpy().astype("float64")
    labels = np.concatenate([b["label"], b["label"]])
    keep = labels >= 0
    want = np.mean(-np_log_softmax(logits)[np.arange(len(labels)), np.maximum(labels, 0)][keep])
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    acc = np.mean((logits.argmax(1) == labels)[keep])
    np.testing.assert_allclose(float(logs["supervised/accuracy"]), acc, rtol=1e-6)


def test_supervised_needs_num_classes():
    with pytest.raises(ValueError, match="num_classes"):
        build_method("supervised", tiny_backbone(), options={"num_classes": 0})
