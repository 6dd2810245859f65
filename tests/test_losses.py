"""The methods' losses (augself_tf/losses/) against formulas written out here in NumPy, in float64: several shapes,
the temperatures, the queue, and what each loss must not let through (gradients into its targets and codes).

The AugSelf head losses are in tests/test_losses_augself.py; the cross-replica forms of NT-Xent and Sinkhorn
(2 replicas = 1 device on the global batch) in tests/test_methods_simclr.py and tests/test_methods_swav.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from package_source import imported_modules, modules

from augself_tf.losses.byol_regression import byol_regression
from augself_tf.losses.info_nce import info_nce, info_nce_logits
from augself_tf.losses.masked_cross_entropy import masked_cross_entropy
from augself_tf.losses.negative_cosine import negative_cosine, normalized_std
from augself_tf.losses.nt_xent import nt_xent
from augself_tf.losses.swapped_prediction import sinkhorn, swapped_prediction

SHAPES = [(1, 3), (5, 8), (16, 2)]  # (batch, dim): a single example, a usual one, a tall thin one


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(list(key))


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _gradients(loss_fn, *inputs: np.ndarray) -> list:
    values = [tf.Variable(x.astype("float32")) for x in inputs]
    with tf.GradientTape() as tape:
        loss = loss_fn(*values)
    return tape.gradient(loss, values)


# ------------------------------------------------------------------------------------- SimSiam, BYOL
@pytest.mark.parametrize("b, d", SHAPES)
def test_negative_cosine_is_minus_the_mean_cosine(b, d):
    rng = _rng(0, b, d)
    p, z = rng.normal(size=[b, d]) * 3, rng.normal(size=[b, d]) * 0.1  # unnormalised, different scales
    want = -np.mean(np.sum(_unit(p) * _unit(z), -1))
    got = negative_cosine(p.astype("float32"), z.astype("float32"))
    assert got.dtype == tf.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(negative_cosine(p, p)), -1.0, rtol=1e-6)  # identical vectors: −1


def test_negative_cosine_stops_the_gradient_into_its_target_and_casts_to_float32():
    rng = _rng(1)
    p, z = rng.normal(size=[4, 6]), rng.normal(size=[4, 6])
    grad_p, grad_z = _gradients(negative_cosine, p, z)
    assert grad_z is None
    # d/dp of −mean cos(p, z): −(ẑ − cos·p̂)/(‖p‖·B) per row.
    cos = np.sum(_unit(p) * _unit(z), -1, keepdims=True)
    want = -(_unit(z) - cos * _unit(p)) / np.linalg.norm(p, axis=-1, keepdims=True) / len(p)
    np.testing.assert_allclose(grad_p.numpy(), want, rtol=1e-4, atol=1e-6)
    half = negative_cosine(tf.constant(p, tf.bfloat16), tf.constant(z, tf.bfloat16))
    assert half.dtype == tf.float32


def test_normalized_std_is_solo_learns_z_std_and_falls_to_zero_on_collapse():
    rng = np.random.default_rng(3)
    z1, z2 = rng.normal(size=(32, 64)), rng.normal(size=(32, 64))
    unit = np.stack([z / np.linalg.norm(z, axis=-1, keepdims=True) for z in (z1, z2)])
    expected = unit.std(axis=1, ddof=1).mean()  # F.normalize(torch.stack((z1, z2)), dim=-1).std(dim=1).mean()
    np.testing.assert_allclose(float(normalized_std(z1.astype("float32"), z2.astype("float32"))), expected, rtol=1e-5)
    assert abs(expected - 1 / np.sqrt(64)) < 0.2 / np.sqrt(64)  # spread outputs: about 1/sqrt(D)
    collapsed = np.tile(rng.normal(size=(1, 64)), (32, 1)).astype("float32") * rng.uniform(1, 2, (32, 1)).astype(
        "float32")
    assert float(normalized_std(collapsed, collapsed)) < 1e-6  # one direction: normalised, no spread


@pytest.mark.parametrize("b, d", SHAPES)
def test_byol_regression_is_the_squared_distance_of_unit_vectors(b, d):
    rng = _rng(2, b, d)
    p, t = rng.normal(size=[b, d]), rng.normal(size=[b, d]) * 5
    want = np.mean(np.sum((_unit(p) - _unit(t)) ** 2, -1))  # ‖p̂ − t̂‖², not the 2 − 2cos of the code
    np.testing.assert_allclose(float(byol_regression(p.astype("float32"), t.astype("float32"))), want,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(byol_regression(p, -p)), 4.0, rtol=1e-6)  # opposite vectors: the maximum
    assert _gradients(byol_regression, p, t)[1] is None


# --------------------------------------------------------------------------------------------- MoCo
def _np_info_nce_logits(q: np.ndarray, k: np.ndarray, queue: np.ndarray, t: float) -> np.ndarray:
    return np.concatenate([np.einsum("bd,bd->b", q, k)[:, None], q @ queue.T], 1) / t


@pytest.mark.parametrize("b, d, queue_size", [(1, 3, 1), (5, 8, 11), (6, 4, 32)])
@pytest.mark.parametrize("temperature", [0.07, 0.2, 1.0])
def test_info_nce_is_the_cross_entropy_of_the_positive_against_the_queue(b, d, queue_size, temperature):
    rng = _rng(3, b, d, queue_size)
    q, k = _unit(rng.normal(size=[b, d])), _unit(rng.normal(size=[b, d]))
    queue = _unit(rng.normal(size=[queue_size, d]))
    logits = info_nce_logits(*(tf.constant(x, tf.float32) for x in (q, k, queue)), temperature).numpy()
    want_logits = _np_info_nce_logits(q, k, queue, temperature)
    assert logits.shape == (b, 1 + queue_size)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
    want = np.mean(-_log_softmax(want_logits)[:, 0])
    got = float(info_nce(*(tf.constant(x, tf.float32) for x in (q, k, queue)), temperature))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # atol: an easy positive's loss is ~1e-4


def test_info_nce_with_an_empty_queue_is_zero_and_a_lower_temperature_sharpens_it():
    rng = _rng(4)
    q, k = _unit(rng.normal(size=[3, 5])), _unit(rng.normal(size=[3, 5]))
    assert float(info_nce(q.astype("float32"), k.astype("float32"), np.zeros([0, 5], "float32"), 0.2)) == 0.0
    # A key equal to its query against far negatives: the loss falls with the temperature.
    queue = -q.astype("float32")
    losses = [float(info_nce(q.astype("float32"), q.astype("float32"), queue, t)) for t in (1.0, 0.5, 0.2)]
    assert losses[0] > losses[1] > losses[2] > 0


def test_info_nce_gradient_into_the_query_matches_numpy():
    """MoCo stops the key's gradient itself (the loss is a plain function); the query's is the softmax's."""
    rng = _rng(5)
    q, k, queue = (_unit(rng.normal(size=s)) for s in ([4, 6], [4, 6], [7, 6]))
    grad_q, grad_k, _ = _gradients(lambda a, b_, c: info_nce(a, tf.stop_gradient(b_), c, 0.2), q, k, queue)
    assert grad_k is None
    # d/dq of the mean CE: (Σ_j softmax_j·c_j − k)/(T·B), c_0 = k, c_j = queue_j.
    logits = _np_info_nce_logits(q, k, queue, 0.2)
    prob = np.exp(_log_softmax(logits))
    keys = np.concatenate([k[:, None, :], np.broadcast_to(queue, (4, 7, 6))], 1)
    want = (np.einsum("bj,bjd->bd", prob, keys) - k) / 0.2 / 4
    np.testing.assert_allclose(grad_q.numpy(), want, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------- SimCLR
def _np_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    """Written per anchor: the positive is the other view of the same image, every other projection a negative."""
    z = _unit(np.concatenate([z1, z2]))
    n = len(z1)
    losses = []
    for i in range(2 * n):
        positive = (i + n) % (2 * n)
        others = [j for j in range(2 * n) if j != i]
        sims = np.array([z[i] @ z[j] / t for j in others])
        losses.append(-(z[i] @ z[positive] / t) + np.log(np.exp(sims).sum()))
    return float(np.mean(losses))


@pytest.mark.parametrize("b, d", SHAPES)
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_nt_xent_matches_the_per_anchor_formula(b, d, temperature):
    rng = _rng(6, b, d)
    z1, z2 = rng.normal(size=[b, d]), rng.normal(size=[b, d]) * 4
    got = float(nt_xent(z1.astype("float32"), z2.astype("float32"), temperature))
    np.testing.assert_allclose(got, _np_nt_xent(z1, z2, temperature), rtol=1e-5, atol=1e-6)


def test_nt_xent_of_one_pair_is_zero_and_symmetric_in_the_views():
    rng = _rng(7)
    z1, z2 = rng.normal(size=[1, 4]).astype("float32"), rng.normal(size=[1, 4]).astype("float32")
    assert float(nt_xent(z1, z2, 0.2)) == pytest.approx(0.0, abs=1e-6)  # no negative at all
    z1, z2 = rng.normal(size=[6, 4]).astype("float32"), rng.normal(size=[6, 4]).astype("float32")
    np.testing.assert_allclose(float(nt_xent(z1, z2, 0.2)), float(nt_xent(z2, z1, 0.2)), rtol=1e-6)


# --------------------------------------------------------------------------------------------- SwAV
def _np_sinkhorn(scores: np.ndarray, eps: float, iterations: int) -> np.ndarray:
    """Written on Q [B, K]: total mass 1, then per prototype (column) 1/K, per sample (row) 1/B; codes ×B."""
    q = np.exp(np.asarray(scores, np.float64) / eps)
    b, k = q.shape
    q = q / q.sum()
    for _ in range(iterations):
        q = q / q.sum(0, keepdims=True) / k
        q = q / q.sum(1, keepdims=True) / b
    return q * b


@pytest.mark.parametrize("b, k", [(4, 3), (12, 5), (3, 10)])
@pytest.mark.parametrize("epsilon, iterations", [(0.05, 3), (0.5, 1), (1.0, 0)])
def test_sinkhorn_matches_numpy(b, k, epsilon, iterations):
    rng = _rng(8, b, k)
    scores = _unit(rng.normal(size=[b, 6])) @ _unit(rng.normal(size=[k, 6])).T  # cosines, as SwAV's
    got = sinkhorn(tf.constant(scores, tf.float32), epsilon, iterations).numpy()
    np.testing.assert_allclose(got, _np_sinkhorn(scores, epsilon, iterations), rtol=1e-4, atol=1e-6)
    if iterations:
        np.testing.assert_allclose(got.sum(1), np.ones(b), rtol=1e-5)  # each sample's code sums to 1
    assert _gradients(lambda s: tf.reduce_sum(sinkhorn(s, epsilon, iterations)), scores)[0] is None


@pytest.mark.parametrize("temperature", [0.1, 1.0])
def test_swapped_prediction_predicts_each_views_code_from_the_other_view(temperature):
    rng = _rng(9)
    s1, s2 = rng.normal(size=[5, 4]), rng.normal(size=[5, 4])
    q1, q2 = _np_sinkhorn(s1, 0.05, 3), _np_sinkhorn(s2, 0.05, 3)
    want = (np.mean(-np.sum(q1 * _log_softmax(s2 / temperature), 1))
            + np.mean(-np.sum(q2 * _log_softmax(s1 / temperature), 1)))  # the SUM of the two terms
    got = swapped_prediction(*(tf.constant(x, tf.float32) for x in (s1, s2, q1, q2)), temperature)
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    unswapped = (np.mean(-np.sum(q1 * _log_softmax(s1 / temperature), 1))
                 + np.mean(-np.sum(q2 * _log_softmax(s2 / temperature), 1)))
    assert abs(float(got) - unswapped) > 1e-3  # the data can tell a swapped from an unswapped loss


# ------------------------------------------------------------------------------------- supervised
def test_masked_cross_entropy_leaves_out_unlabelled_examples():
    rng = _rng(10)
    logits = rng.normal(size=[7, 4]) * 2
    labels = np.array([2, -1, 0, 3, -1, 1, 2])
    valid = labels >= 0
    ce = -_log_softmax(logits)[np.arange(7), np.maximum(labels, 0)]
    want_loss = ce[valid].mean()
    want_accuracy = (logits.argmax(1) == labels)[valid].mean()
    loss, accuracy = masked_cross_entropy(logits.astype("float32"), labels)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5)
    np.testing.assert_allclose(float(accuracy), want_accuracy, rtol=1e-6)
    loss, accuracy = masked_cross_entropy(logits.astype("float32"), -np.ones(7, "int64"))
    assert (float(loss), float(accuracy)) == (0.0, 0.0)  # nothing labelled: 0, not NaN


# ------------------------------------------------------------------------------------------ layout
def test_the_losses_import_nothing_of_the_package_but_each_other():
    """Functions of tensors: no model, method, augmentation or training code behind a loss."""
    found = {m: p for m, p in modules().items() if m.startswith("augself_tf.losses")}
    assert {"augself_tf.losses.info_nce", "augself_tf.losses.augself_heads"} <= set(found)  # the walk works
    wrong = [(m, name) for m, p in found.items() for name in imported_modules(m, p)
             if name.startswith("augself_tf") and not name.startswith("augself_tf.losses")]
    assert not wrong
