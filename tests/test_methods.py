"""Losses of the base model and of SimSiam / MoCo against independent NumPy computations, and the
multi-replica behaviour (loss scaling, queue order)."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from test_methods_more import _omega, tiny_backbone
from test_methods_more import batch as make_batch

from augself_tf.methods import build_method
from augself_tf.methods.moco import info_nce
from augself_tf.models.resnet import build_backbone
from augself_tf.training.optim import build_optimizer

B = 6
S = 16


def _model(method: str, augself=("crop", "color"), seed: int = 1, sync: bool = False, resnet: bool = True,
           **options):
    keras.utils.set_random_seed(seed)
    # Multi-replica tests use a one-conv backbone: tracing a ResNet on 2 replicas costs minutes on 2 cores.
    backbone = build_backbone("resnet18_cifar", 0.125, synchronized_bn=sync) if resnet else tiny_backbone(sync)
    model = build_method(method, backbone, options=options, augself=augself, weight_decay=5e-4,
                         synchronized_bn=sync)
    model.build_all(S)
    return model


def _np_targets(o1: dict, o2: dict) -> dict:
    """docs/architecture.md written out independently of the registry."""
    c1, c2 = o1["crop"].copy(), o2["crop"].copy()
    flipped = o1["flip"][:, 0] > 0.5
    c1[flipped, 1] = 1 - c1[flipped, 1]
    c2[flipped, 1] = 1 - c2[flipped, 1]
    return {
        "crop": c1 - c2,
        "color": o1["color"] - o2["color"],
        "flip": (o1["flip"] == o2["flip"]).astype("float32"),
        "blur": o1["blur"] - o2["blur"],
        "rotation": np.mod(o1["rotation"][:, 0] - o2["rotation"][:, 0], 4).astype("int64"),
        "solarize": o1["solarize"] - o2["solarize"],
    }


def _np_loss(name: str, pred: np.ndarray, target: np.ndarray) -> float:
    if name == "flip":
        z = pred[:, 0]
        t = target[:, 0]
        return float(np.mean(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))))
    if name == "rotation":
        logp = pred - pred.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        return float(-np.mean(logp[np.arange(len(target)), target]))
    return float(np.mean((np.tanh(pred) - target) ** 2))


def test_augself_loss_matches_numpy_both_orders():
    names = ("crop", "flip", "color", "blur", "rotation", "solarize")
    model = _model("none", augself=names)
    rng = np.random.default_rng(3)
    f1 = rng.normal(size=[B, model.feature_dim]).astype("float32")
    f2 = rng.normal(size=[B, model.feature_dim]).astype("float32")
    o1, o2 = _omega(rng, B), _omega(rng, B)
    o1["flip"][:3] = 1.0  # some pairs with view 1 flipped
    total, logs = model.augself_loss(tf.constant(f1), tf.constant(f2), o1, o2, training=False)
    pairs = np.concatenate([np.concatenate([f1, f2], 1), np.concatenate([f2, f1], 1)], 0)
    t12, t21 = _np_targets(o1, o2), _np_targets(o2, o1)
    expected = 0.0
    for name in names:
        pred = model.augself_heads[name](pairs, training=False).numpy()
        target = np.concatenate([t12[name], t21[name]], 0)
        want = _np_loss(name, pred, target)
        np.testing.assert_allclose(float(logs[f"augself/{name}_loss"]), want, rtol=1e-5, atol=1e-6)
        expected += want
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)


def test_simsiam_loss_matches_numpy():
    model = _model("simsiam", augself=(), projector_dim=32, predictor_hidden=8)
    rng = np.random.default_rng(0)
    f1 = tf.constant(rng.normal(size=[B, model.feature_dim]).astype("float32"))
    f2 = tf.constant(rng.normal(size=[B, model.feature_dim]).astype("float32"))
    loss, _ = model.method_loss(f1, f2, {}, training=False)
    z1, z2 = model.projector(f1, training=False).numpy(), model.projector(f2, training=False).numpy()
    p1, p2 = model.predictor(z1, training=False).numpy(), model.predictor(z2, training=False).numpy()

    def cos(a, b):
        return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    want = -0.5 * (cos(p1, z2).mean() + cos(p2, z1).mean())
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)


def test_info_nce_matches_numpy():
    rng = np.random.default_rng(1)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    q, k, queue = unit(rng.normal(size=[5, 8])), unit(rng.normal(size=[5, 8])), unit(rng.normal(size=[11, 8]))
    got = float(info_nce(tf.constant(q), tf.constant(k), tf.constant(queue), 0.2))
    logits = np.concatenate([np.sum(q * k, 1, keepdims=True), q @ queue.T], 1) / 0.2
    want = np.mean(np.log(np.exp(logits).sum(1)) - logits[:, 0])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _train_steps(model, batches, strategy=None, lr=0.05):
    with strategy.scope() if strategy else contextlib.nullcontext():
        model.compile(optimizer=build_optimizer(lr, 256, 100))
        model.optimizer.build(model.optimized_variables())
    model.base_learning_rate = lr
    if strategy is None:
        step = tf.function(model.train_step)
        return [step(b) for b in batches]

    @tf.function
    def dist_step(values):
        return strategy.run(model.train_step, args=(values,))

    out = []
    for b in batches:
        halves = [{k: (tree_slice(v, i)) for k, v in b.items()} for i in range(2)]
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx, h=halves: h[ctx.replica_id_in_sync_group])
        out.append(dist_step(values))
    return out


def tree_slice(v, i, parts=2):
    if isinstance(v, dict):
        return {k: tree_slice(x, i, parts) for k, x in v.items()}
    n = len(v) // parts
    return v[i * n:(i + 1) * n]


def replica_values(var) -> list[np.ndarray]:
    """Values of a Keras variable on every replica (one entry when not mirrored)."""
    tf_var = getattr(var, "value", var)
    return [np.asarray(v) for v in getattr(tf_var, "values", [tf_var])]


def test_two_replicas_equal_one_device_on_the_same_global_batch():
    batch = make_batch(0, n=8, size=S)
    single = _model("simsiam", projector_dim=32, predictor_hidden=8, sync=True, resnet=False)
    _train_steps(single, [batch])
    strategy = mirrored_cpus()
    with strategy.scope():
        double = _model("simsiam", projector_dim=32, predictor_hidden=8, sync=True, resnet=False)
    _train_steps(double, [batch], strategy)
    for a, b in zip(single.weights, double.weights, strict=True):
        for value in replica_values(b):
            np.testing.assert_allclose(a.numpy(), value, rtol=1e-4, atol=1e-5, err_msg=a.path)


def test_moco_queue_holds_keys_of_both_replicas_in_order():
    strategy = mirrored_cpus()
    batch = make_batch(5, n=8, size=S)
    with strategy.scope():
        model = _model("moco", augself=(), sync=True, queue_size=32, key_momentum=1.0, projector_dim=16,
                       projector_hidden=16, resnet=False)
    before = replica_values(model.queue)[0]
    _train_steps(model, [batch], strategy)
    # Key momentum 1.0 keeps the key encoder fixed, so the keys can be recomputed on the global batch
    # (synchronized BN over 2 replicas = plain BN over their concatenation).
    f = model.key_backbone(batch["view2"], training=True)
    k = model.key_projector(f, training=True).numpy()
    k = k / np.linalg.norm(k, axis=1, keepdims=True)
    queues = replica_values(model.queue)
    assert len(queues) == 2
    np.testing.assert_allclose(queues[0][:8], k, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(queues[0][8:], before[8:])
    assert [int(p) for p in replica_values(model.queue_ptr)] == [8, 8]
    np.testing.assert_array_equal(queues[1], queues[0])


@pytest.mark.parametrize("method", ["none", "simsiam", "moco"])
def test_augself_loss_falls_on_a_fixed_batch(method):
    model = _model(method, augself=("crop", "color"), queue_size=16, projector_dim=16, projector_hidden=16,
                   predictor_hidden=8)
    batch = make_batch(2, n=16, size=S)
    logs = _train_steps(model, [batch] * 30, lr=0.1)
    first, last = float(logs[0]["loss/augself"]), float(logs[-1]["loss/augself"])
    assert np.isfinite([float(v) for v in logs[-1].values()]).all()
    assert last < 0.6 * first, (first, last)
