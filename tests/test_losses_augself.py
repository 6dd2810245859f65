"""The AugSelf head losses (augself_tf/losses/augself_heads.py) against NumPy: each target kind's loss and error,
and the loss of a head over both orders of the pairs, written pair by pair from docs/architecture.md's ω table.

Regression targets (crop, color, blur, solarize): MSE of tanh outputs; flip: binary cross-entropy of a logit
against 1[f1 = f2]; rotation: 4-way cross-entropy against (k1 − k2) mod 4.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import omega

from augself_tf.augment.registry import AUGMENTATIONS
from augself_tf.losses import augself_heads
from augself_tf.losses.augself_heads import (
    batch_r2,
    binary_cross_entropy,
    binary_error,
    categorical_cross_entropy,
    categorical_error,
    ordered_pairs,
    ordered_targets,
    tanh_mse,
)

KIND = {"crop": "regression", "color": "regression", "blur": "regression", "solarize": "regression",
        "flip": "binary", "rotation": "class"}


def _np_loss(kind: str, pred: np.ndarray, target) -> float:
    """One pair's loss: pred [head_dim], target [omega_dim] (an int class for rotation)."""
    pred = np.asarray(pred, np.float64)
    if kind == "regression":
        return float(np.mean((np.tanh(pred) - target) ** 2))
    if kind == "binary":
        p = 1.0 / (1.0 + np.exp(-pred[0]))
        return float(-(target[0] * np.log(p) + (1 - target[0]) * np.log(1 - p)))
    return float(-(pred[target] - np.log(np.exp(pred).sum())))


def _np_target(name: str, first: dict, second: dict, i: int):
    """ω_diff(first, second) of example i, as docs/architecture.md states it."""
    if name == "crop":
        (cy1, cx1, h1, w1), (cy2, cx2, h2, w2) = first["crop"][i], second["crop"][i]
        if first["flip"][i, 0] > 0.5:  # both centres in the first view's displayed frame
            cx1, cx2 = 1 - cx1, 1 - cx2
        return np.array([cy1 - cy2, cx1 - cx2, h1 - h2, w1 - w2])
    if name == "flip":
        return np.array([float(first["flip"][i, 0] == second["flip"][i, 0])])
    if name == "rotation":
        return int(first["rotation"][i, 0] - second["rotation"][i, 0]) % 4
    return first[name][i] - second[name][i]


# --------------------------------------------------------------------------------------- each kind
@pytest.mark.parametrize("b, k", [(1, 1), (5, 4), (9, 1)])
def test_tanh_mse_is_the_mean_squared_error_of_tanh_outputs(b, k):
    rng = np.random.default_rng([0, b, k])
    pred, target = rng.normal(size=[b, k]) * 2, rng.uniform(-1, 1, [b, k])
    want = [_np_loss("regression", pred[i], target[i]) for i in range(b)]
    got = tanh_mse(pred.astype("float32"), target.astype("float32")).numpy()
    assert got.shape == (b,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tanh_mse(pred.astype("float32"), target).numpy(), got, rtol=1e-6)  # metric = loss


def test_batch_r2_is_sklearns_variance_weighted_r2():
    """R² pooled over the components, as scikit-learn computes it; 0 for the batch mean, 1 for the truth."""
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(2)
    t = rng.normal(size=(40, 4)) * [0.1, 0.2, 0.3, 0.05]
    p = t + rng.normal(size=(40, 4)) * 0.08
    got = float(batch_r2(tf.constant(p), tf.constant(t)))
    np.testing.assert_allclose(got, r2_score(t, p, multioutput="variance_weighted"), rtol=1e-5)
    mean = np.broadcast_to(t.mean(0), t.shape)
    np.testing.assert_allclose(float(batch_r2(tf.constant(mean), tf.constant(t))), 0.0, atol=1e-6)
    assert float(batch_r2(tf.constant(t), tf.constant(t))) == pytest.approx(1.0)


@pytest.mark.parametrize("b", [1, 6])
def test_binary_cross_entropy_and_error_of_the_flip_logit(b):
    rng = np.random.default_rng([1, b])
    logits = rng.normal(size=[b, 1]) * 4
    target = (rng.uniform(size=[b, 1]) > 0.5).astype("float64")
    want = [_np_loss("binary", logits[i], target[i]) for i in range(b)]
    got = binary_cross_entropy(tf.constant(logits, tf.bfloat16), target.astype("float32"))
    assert got.dtype == tf.float32 and got.shape == (b,)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-2)  # the logits were rounded to bfloat16
    np.testing.assert_allclose(binary_cross_entropy(logits.astype("float32"), target).numpy(), want, rtol=1e-5)
    wrong = [float((logits[i, 0] > 0) != (target[i, 0] > 0.5)) for i in range(b)]
    np.testing.assert_array_equal(binary_error(logits.astype("float32"), target).numpy(), wrong)


@pytest.mark.parametrize("b", [1, 7])
def test_categorical_cross_entropy_and_error_of_the_rotation_logits(b):
    rng = np.random.default_rng([2, b])
    logits = rng.normal(size=[b, 4]) * 3
    labels = rng.integers(0, 4, [b])
    want = [_np_loss("class", logits[i], labels[i]) for i in range(b)]
    np.testing.assert_allclose(categorical_cross_entropy(logits.astype("float32"), labels).numpy(), want, rtol=1e-5)
    wrong = [float(np.argmax(logits[i]) != labels[i]) for i in range(b)]
    np.testing.assert_array_equal(categorical_error(logits.astype("float32"), labels).numpy(), wrong)


def test_every_augmentation_names_the_loss_of_its_target_kind():
    losses = {"regression": (tanh_mse, tanh_mse), "binary": (binary_cross_entropy, binary_error),
              "class": (categorical_cross_entropy, categorical_error)}
    assert set(AUGMENTATIONS) == set(KIND)
    for name, aug in AUGMENTATIONS.items():
        assert (aug.loss, aug.metric) == losses[KIND[name]], name
        assert aug.loss.__module__ == augself_heads.__name__


# ------------------------------------------------------------------------------------- both orders
def test_ordered_pairs_and_targets_stack_view_one_first_then_view_two_first():
    rng = np.random.default_rng(3)
    f1, f2 = rng.normal(size=[3, 2]).astype("float32"), rng.normal(size=[3, 2]).astype("float32")
    pairs = ordered_pairs(tf.constant(f1, tf.bfloat16), tf.constant(f2, tf.bfloat16))
    assert pairs.dtype == tf.float32 and pairs.shape == (6, 4)
    for i in range(3):
        np.testing.assert_allclose(pairs[i].numpy(), np.r_[f1[i], f2[i]], rtol=1e-2)
        np.testing.assert_allclose(pairs[3 + i].numpy(), np.r_[f2[i], f1[i]], rtol=1e-2)
    o1, o2 = {"x": np.array([[1.0], [2.0], [3.0]])}, {"x": np.array([[10.0], [20.0], [30.0]])}
    targets = ordered_targets(lambda a, b: tf.constant(a["x"] - b["x"]), o1, o2).numpy()
    np.testing.assert_array_equal(targets[:, 0], [-9, -18, -27, 9, 18, 27])


@pytest.mark.parametrize("name", list(KIND))
@pytest.mark.parametrize("b", [1, 6])
def test_a_heads_loss_over_both_orders_matches_numpy_pair_by_pair(name, b):
    """A linear head W on [f1, f2]: the mean over the 2B pairs of its registry loss, written pair by pair."""
    aug = AUGMENTATIONS[name]
    rng = np.random.default_rng([4, b, len(name)])
    d = 3
    f1, f2 = rng.normal(size=[b, d]), rng.normal(size=[b, d])
    w = rng.normal(size=[2 * d, aug.head_dim])
    o1, o2 = omega(rng, b), omega(rng, b)
    o1["flip"][0] = 1.0  # view 1 flipped in the first pair, view 2 not: the crop frames differ by order
    o2["flip"][0] = 0.0

    def tf_loss(a, b_, oa, ob):
        pred = ordered_pairs(tf.constant(a, tf.float32), tf.constant(b_, tf.float32)) @ tf.constant(w, tf.float32)
        return float(tf.reduce_mean(aug.loss(pred, ordered_targets(aug.target, oa, ob))))

    want = []
    for i in range(b):
        want.append(_np_loss(KIND[name], np.r_[f1[i], f2[i]] @ w, _np_target(name, o1, o2, i)))
        want.append(_np_loss(KIND[name], np.r_[f2[i], f1[i]] @ w, _np_target(name, o2, o1, i)))
    got = tf_loss(f1, f2, o1, o2)
    np.testing.assert_allclose(got, np.mean(want), rtol=1e-5, atol=1e-7)
    # Both orders are used, so exchanging the views changes nothing.
    np.testing.assert_allclose(tf_loss(f2, f1, o2, o1), got, rtol=1e-5, atol=1e-7)
