"""Unit tests of the evaluation maths: logistic regression vs sklearn, few-shot, localization, retrieval,
preprocessing geometry, SavedModel loading errors, report."""

from __future__ import annotations

import json
import math
import statistics

import eval_fakes
import numpy as np
import pytest
import tensorflow as tf
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from augself_tf.data import eval_view
from augself_tf.evaluation import report, transforms
from augself_tf.evaluation.datasets import split_train_val
from augself_tf.evaluation.estimators import (
    box_regression,
    fewshot_episodes,
    intervals,
    logreg,
    neighbours,
    newton_logreg,
)
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import load_model


def blobs(n: int, d: int, k: int, seed: int = 0, spread: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative, overlapping Gaussian blobs (like post-ReLU features)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * spread
    y = rng.integers(0, k, size=n)
    x = np.maximum(centers[y] + rng.normal(size=(n, d)) + 1.0, 0.0)
    return x.astype(np.float32), y


# ---------------------------------------------------------------------------------------------- linear


@pytest.mark.parametrize("backend", ["numpy", "tf"])
def test_logreg_matches_sklearn_multiclass(backend):
    x, y = blobs(240, 8, 3)
    reg = 0.7
    ours = logreg.fit_logreg(x, y, reg, backend=backend, gtol=1e-9, ftol=0.0)
    sk = LogisticRegression(C=1.0 / (2.0 * reg), tol=1e-10, max_iter=20000).fit(x, y)
    scale = np.abs(sk.coef_).max()
    np.testing.assert_allclose(ours.coef, sk.coef_.T, atol=2e-3 * scale)
    # softmax is invariant to a common intercept shift: compare centred intercepts
    np.testing.assert_allclose(
        ours.intercept - ours.intercept.mean(), sk.intercept_ - sk.intercept_.mean(), atol=2e-3 * (1 + scale)
    )
    assert np.array_equal(ours.predict(x), sk.predict(x))
    assert logreg.top1_accuracy(y, ours.predict(x)) == pytest.approx(sk.score(x, y))


def test_logreg_matches_sklearn_binary():
    x, y = blobs(200, 6, 2, seed=3)
    reg = 0.25
    ours = logreg.fit_logreg(x, y, reg, gtol=1e-9, ftol=0.0)
    # multinomial with C = 1/(2 reg) == sklearn's binomial model with C = 1/reg, w = w1 - w0
    sk = LogisticRegression(C=1.0 / reg, tol=1e-10, max_iter=20000).fit(x, y)
    w = ours.coef[:, 1] - ours.coef[:, 0]
    np.testing.assert_allclose(w, sk.coef_[0], atol=2e-3 * np.abs(sk.coef_).max())
    assert np.array_equal(ours.predict(x), sk.predict(x))


def test_backends_and_centering_agree():
    x, y = blobs(300, 10, 4, seed=1)
    reg = 2.0
    ref = logreg.fit_logreg(x, y, reg, gtol=1e-9, ftol=0.0)
    for kwargs in ({"backend": "tf"}, {"backend": "sklearn", "gtol": 1e-10}, {"center": False}):
        other = logreg.fit_logreg(x, y, reg, **{"gtol": 1e-9, "ftol": 0.0, **kwargs})
        np.testing.assert_allclose(other.coef, ref.coef, atol=2e-3 * np.abs(ref.coef).max(), err_msg=str(kwargs))
        assert np.mean(other.predict(x) == ref.predict(x)) > 0.99


def test_warm_start_reaches_same_solution_in_fewer_iterations():
    x, y = blobs(400, 12, 3, seed=2)
    fitter = logreg.LogRegFitter(x, y, gtol=1e-7)
    first = fitter.fit(10.0)
    cold = logreg.fit_logreg(x, y, 5.0, gtol=1e-7)
    warm = fitter.fit(5.0)
    np.testing.assert_allclose(warm.coef, cold.coef, atol=1e-3 * np.abs(cold.coef).max())
    assert warm.n_iter <= cold.n_iter and first.n_iter > 0


def test_linear_eval_sweep_and_refit():
    x, y = blobs(600, 10, 4, seed=4)
    res = logreg.linear_eval(x[:300], y[:300], x[300:400], y[300:400], x[400:], y[400:], regs=np.logspace(-2, 3, 6))
    assert res.regs == sorted(res.regs, reverse=True)  # strong -> weak regularisation
    assert len(res.val_scores) == 6 and res.best_reg in res.regs
    assert res.val_scores[res.regs.index(res.best_reg)] == max(res.val_scores)
    assert res.test_score > 0.8
    summary = res.summary()
    assert summary["best_C_sklearn"] == pytest.approx(1 / (2 * res.best_reg))
    assert len(summary["sweep"]) == 6


def test_reg_grid_and_metrics():
    assert len(logreg.REG_GRID) == 45
    assert logreg.REG_GRID[0] == pytest.approx(1e-6) and logreg.REG_GRID[-1] == pytest.approx(1e5)
    y_true = np.array([0, 0, 0, 0, 1, 1])
    y_pred = np.array([0, 0, 0, 0, 0, 1])
    assert logreg.top1_accuracy(y_true, y_pred) == pytest.approx(5 / 6)
    assert logreg.mean_per_class_accuracy(y_true, y_pred) == pytest.approx((1.0 + 0.5) / 2)


# ---------------------------------------------------------------------------------------------- few-shot


def test_confidence_interval_matches_independent_formula():
    accs = np.random.default_rng(0).uniform(0.2, 1.0, size=137)
    expected = 1.96 * statistics.pstdev(accs.tolist()) / math.sqrt(len(accs))
    assert intervals.normal_ci95(accs) == pytest.approx(expected, rel=1e-12)


def test_fewshot_eval_reports_mean_and_ci_of_episodes():
    x, y = blobs(400, 16, 8, seed=5)
    res = fewshot_episodes.fewshot_eval(x, y, ways=5, shots=2, queries=4, episodes=60, seed=1)
    assert res.mean == pytest.approx(statistics.fmean(res.accuracies.tolist()))
    assert res.ci95 == pytest.approx(1.96 * statistics.pstdev(res.accuracies.tolist()) / math.sqrt(60))
    again = fewshot_episodes.fewshot_eval(x, y, ways=5, shots=2, queries=4, episodes=60, seed=1)
    assert again.mean == res.mean  # fixed seed -> same episodes


def test_batched_newton_matches_sklearn_logistic_regression():
    x, y = blobs(300, 40, 10, seed=6)
    eps = fewshot_episodes.sample_episodes(y, ways=5, shots=5, queries=6, episodes=6, seed=0)
    xs = x[eps.support].astype(np.float64)
    xq = x[eps.query].astype(np.float64)
    fs, fq, proj = newton_logreg.episode_basis(xs, xq)
    theta = newton_logreg.fit_batched_logreg(fs, eps.support_labels, 5, c=1.0)
    coef = np.einsum("edr,ern->edn", proj, theta[:, :-1])
    with threadpool_limits(1, user_api="blas"):  # tiny fits: avoid BLAS thread thrash
        for e in range(len(xs)):
            sk = LogisticRegression(C=1.0, tol=1e-10, max_iter=20000).fit(xs[e], eps.support_labels)
            np.testing.assert_allclose(coef[e], sk.coef_.T, atol=1e-4 * (1 + np.abs(sk.coef_).max()))
    ours = fewshot_episodes.episode_accuracies(x, eps)
    ref = fewshot_episodes.episode_accuracies(x, eps, solver="sklearn")
    np.testing.assert_allclose(ours, ref)


def test_episode_sampler_shapes_and_rules():
    y = np.repeat(np.arange(6), [10, 10, 10, 10, 3, 1])  # class 5 has 1 image: never drawn for 1-shot
    eps = fewshot_episodes.sample_episodes(y, ways=5, shots=1, queries=4, episodes=40, seed=3)
    assert eps.support.shape == (40, 5) and eps.query.shape == (40, 20)
    for e in range(40):
        assert len(set(eps.classes[e])) == 5 and 5 not in eps.classes[e]
        assert np.all(y[eps.support[e]] == eps.classes[e])
        assert np.all(y[eps.query[e]] == np.repeat(eps.classes[e], 4))
        assert not set(eps.support[e]) & set(eps.query[e])  # queries never reuse a support image
    with pytest.raises(EvalError, match="5 classes with at least 2 images"):
        fewshot_episodes.sample_episodes(np.repeat(np.arange(4), 10), ways=5, shots=1, queries=1, episodes=1)
    with pytest.raises(EvalError, match="at least 6 images"):
        fewshot_episodes.sample_episodes(np.repeat(np.arange(8), 5), ways=5, shots=5, queries=1, episodes=1)


# ---------------------------------------------------------------------------------------------- localization


def test_localization_oracle_features_give_near_zero_error():
    rng = np.random.default_rng(0)
    y0, x0 = rng.uniform(0, 0.5, size=(2, 200))
    h, w = rng.uniform(0.1, 0.5, size=(2, 200))
    boxes = np.stack([y0, x0, y0 + h, x0 + w], axis=1)
    feats = np.concatenate([boxes, rng.normal(size=(200, 3))], axis=1)  # box + nuisance dims
    res = box_regression.localization_eval(feats[:150], boxes[:150], feats[150:], boxes[150:])
    assert res.mse < 1e-12 and res.mean_iou > 0.999
    noise = rng.normal(size=(200, 5))
    noisy = box_regression.localization_eval(noise[:150], boxes[:150], noise[150:], boxes[150:])
    assert noisy.mse > 1e-3
    assert noisy.mean_sq_l2 == pytest.approx(4 * noisy.mse)


def test_box_conversions_and_nan_rows():
    yxyx = np.array([[0.1, 0.2, 0.5, 0.9]])
    np.testing.assert_allclose(box_regression.yxyx_to_xywh(yxyx), [[0.2, 0.1, 0.7, 0.4]])
    assert box_regression.box_iou_xywh(np.array([[0, 0, 0.5, 0.5]]), np.array([[0.25, 0, 0.5, 0.5]]))[0] == (
        pytest.approx(1 / 3)
    )
    boxes = np.array([[0.1, 0.1, 0.5, 0.5], [np.nan] * 4, [0.2, 0.2, 0.6, 0.7], [0.0, 0.1, 0.3, 0.3]])
    res = box_regression.localization_eval(boxes, boxes, boxes, boxes)
    assert res.n_train == 3 and list(res.test_rows) == [0, 2, 3]
    with pytest.raises(EvalError, match="needs boxes"):
        box_regression.localization_eval(boxes[:2], np.full((2, 4), np.nan), boxes, boxes)


# ---------------------------------------------------------------------------------------------- retrieval


def test_cosine_neighbours_exclude_self_and_rank_by_angle():
    feats = np.array([[1, 0], [2, 0.1], [0, 1], [0.1, 3], [-1, 0]], np.float32)
    nn = neighbours.cosine_neighbours(feats, np.arange(5), k=2)
    assert list(nn[0]) == [1, 3]  # scale does not matter, self excluded
    assert list(nn[2]) == [3, 1]
    res = neighbours.retrieval_eval(feats, np.array([0, 0, 1, 1, 2]), k=1, num_queries=3)
    assert res.precision == pytest.approx(4 / 5)
    assert len(res.shown_queries) == 3 and res.shown_neighbours.shape == (3, 1)
    with pytest.raises(EvalError):
        neighbours.cosine_neighbours(feats, np.arange(5), k=5)


# ---------------------------------------------------------------------------------------------- features


def test_preprocess_resizes_shorter_side_and_centre_crops():
    img = np.zeros((40, 80, 3), np.uint8)
    img[:, 30:50] = 255  # bright band around the centre column
    out = eval_view.preprocess(tf.constant(img), 32).numpy()
    assert out.shape == (32, 32, 3) and out.dtype == np.float32
    assert 0.0 <= out.min() and out.max() <= 1.0
    # 40x80 -> 32x64, crop columns 16..48: the band (cols 24..40 after resize) sits in the middle
    assert out[:, 14:18].mean() > 0.9 and out[:, :4].mean() < 0.05
    gray = eval_view.preprocess(tf.zeros((10, 10), tf.uint8), 8)
    assert gray.shape == (8, 8, 3)


def test_bbox_to_crop_frame():
    # 40x80 image -> 32x64, crop x in [16, 48) of the resized image = [0.25, 0.75) of the original width
    box = tf.constant([0.0, 0.25, 1.0, 0.75])
    np.testing.assert_allclose(eval_view.bbox_to_crop_frame(box, 40, 80, 32).numpy(), [0, 0, 1, 1], atol=1e-6)
    box = tf.constant([0.5, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(eval_view.bbox_to_crop_frame(box, 40, 80, 32).numpy(), [0.5, 0.5, 1, 1], atol=1e-6)
    box = tf.constant([0.0, 0.0, 1.0, 0.2])  # left of the crop: clipped to an empty box at x = 0
    np.testing.assert_allclose(eval_view.bbox_to_crop_frame(box, 40, 80, 32).numpy(), [0, 0, 1, 0], atol=1e-6)
    missing = eval_view.bbox_to_crop_frame(tf.fill([4], float("nan")), 40, 80, 32).numpy()
    assert np.isnan(missing).all()


def test_transforms():
    img = tf.reshape(tf.range(2 * 2 * 3, dtype=tf.float32), [2, 2, 3])
    np.testing.assert_array_equal(transforms.CHANNEL_ORDERS[5](img).numpy(), img.numpy()[..., ::-1])
    np.testing.assert_array_equal(transforms.ROTATIONS[2](img).numpy(), img.numpy()[::-1, ::-1])
    assert [t.name for t in transforms.ROTATIONS] == ["rot0", "rot1", "rot2", "rot3"]
    assert [t.name for t in transforms.CHANNEL_ORDERS] == [f"perm{i}" for i in range(6)]
    assert len(set(eval_view.CHANNEL_PERMUTATIONS)) == 6


def test_load_model_errors(tmp_path):
    with pytest.raises(EvalError, match="not found"):
        load_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalError, match="no saved_model.pb"):
        load_model(str(tmp_path / "empty"))

    class NoSig(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def f(self, x):
            return x

    m = NoSig()
    tf.saved_model.save(m, str(tmp_path / "nosig"), signatures={"other": m.f})
    with pytest.raises(EvalError, match="no 'serving_default'"):
        load_model(str(tmp_path / "nosig"))
    tf.saved_model.save(m, str(tmp_path / "flat"), signatures={"serving_default": m.f})
    with pytest.raises(EvalError, match=r"expected \[N, H, W, 3\]"):
        load_model(str(tmp_path / "flat"))

    class IntInput(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8)])
        def f(self, x):
            return {"features": tf.reduce_mean(tf.cast(x, tf.float32), [1, 2])}

    m2 = IntInput()
    tf.saved_model.save(m2, str(tmp_path / "int"), signatures={"serving_default": m2.f})
    with pytest.raises(EvalError, match="expected a float image"):
        load_model(str(tmp_path / "int"))


def test_load_model_fixed_size_and_single_output(tmp_path):
    class Fixed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 16, 16, 3], tf.float32)])
        def f(self, x):
            return {"embedding": tf.reduce_mean(x, [1, 2])}

    m = Fixed()
    tf.saved_model.save(m, str(tmp_path / "fixed"), signatures={"serving_default": m.f})
    model = load_model(str(tmp_path / "fixed"))
    assert model.output_key == "embedding" and model.fixed_size == (16, 16)
    model.check_size(16)
    with pytest.raises(EvalError, match="only accepts 16x16"):
        model.check_size(32)
    assert model(tf.zeros([2, 16, 16, 3])).shape == (2, 3)
    nested = eval_fakes.save_random_conv_model(str(tmp_path / "run" / "saved_model"), channels=4)
    loaded = load_model(str(tmp_path / "run"))  # MODEL_DIR/saved_model is found
    assert loaded.path == nested and loaded.name == "run"
    assert loaded(tf.zeros([3, 20, 20, 3])).shape == (3, 8)


# ---------------------------------------------------------------------------------------------- datasets, report


def test_split_train_val():
    tr, va = split_train_val(50, 0.1, seed=0)
    assert len(va) == 5 and len(tr) == 45 and not set(tr) & set(va)
    tr2, va2 = split_train_val(50, 0.1, seed=0)
    assert np.array_equal(va, va2)


def test_report_merge_and_markdown(tmp_path):
    path = str(tmp_path / "r.json")
    a = report.make_record(model="m1", protocol="linear", dataset="cifar10", metric="top1_%", value=80.123,
                           settings={"x": np.float32(1.5), "arr": np.arange(2)})
    b = report.make_record(model="m2", protocol="linear", dataset="cifar10", metric="top1_%", value=81.0)
    report.save_records([a], path)
    report.save_records([b], path)  # merged, not overwritten
    a2 = dict(a, value=70.0)
    out = report.save_records([a2], path)
    assert [r["model"] for r in out] == ["m1", "m2"] and out[0]["value"] == 70.0
    assert json.load(open(path))[0]["settings"] == {"x": 1.5, "arr": [0, 1]}
    table = report.markdown_table(out)
    assert "| linear | cifar10 | top1_% | 70.00 | 81.00 |" in table
    assert "SimSiam 82.35 → +AugSelf 82.76 (STL10 R18)" in table
    assert "IN100 R50: SimSiam 86.89" in table
    inv = report.make_record(model="m1", protocol="invariance", dataset="stl10", metric="cosine", value=0.9, ci95=0.001)
    assert "0.9000 ± 0.0010" in report.markdown_table([inv])


def test_auto_backend_picks_by_problem_size():
    small = logreg.LogRegFitter(np.ones((10, 4), np.float32), np.arange(10) % 2)
    assert small.backend == "numpy"
    n = logreg.AUTO_TF_SIZE // (100 * 2)
    large = logreg.LogRegFitter(np.ones((n, 100), np.float32), np.arange(n) % 2)
    assert large.backend == "tf"
