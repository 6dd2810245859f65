"""``lowshot``: k images of every class, the regulariser chosen by cross-validation inside them, mean ± std over
draws — the draws, the folds and the selection against independent computations, and the protocol on
in-memory, folder and (mocked) tfds sources."""

from __future__ import annotations

import os

import eval_fakes as testing
import numpy as np
import pytest
from PIL import Image

from augself_tf.evaluation import paper_results
from augself_tf.evaluation.context import EvalContext, EvalSettings, ProbeOptions
from augself_tf.evaluation.datasets import DataAccess
from augself_tf.evaluation.estimators import lowshot_draws
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import load_model
from augself_tf.evaluation.protocols import PROTOCOLS, run_protocol
from augself_tf.evaluation.protocols.lowshot import LowshotOptions
from augself_tf.evaluation.report import markdown_table


def _blobs(n_per_class: int, classes: int, dim: int = 8, seed: int = 0, spread: float = 0.6):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 2.0
    y = np.repeat(np.arange(classes), n_per_class)
    return (centres[y] + spread * rng.normal(size=(len(y), dim))).astype(np.float32), y


def test_a_draw_takes_k_distinct_images_of_every_class_and_replays_from_its_seed():
    _, y = _blobs(9, 5)
    rows, pos = lowshot_draws.draw_shots(y, 4, seed=3, draw=0)
    assert len(rows) == 20 and len(np.unique(rows)) == 20
    assert np.bincount(y[rows]).tolist() == [4] * 5
    assert sorted(pos[y[rows] == 2].tolist()) == [0, 1, 2, 3]
    again, _ = lowshot_draws.draw_shots(y, 4, seed=3, draw=0)
    other, _ = lowshot_draws.draw_shots(y, 4, seed=3, draw=1)
    np.testing.assert_array_equal(rows, again)
    assert not np.array_equal(np.sort(rows), np.sort(other))


def test_a_class_with_only_k_images_is_one_clear_error():
    y = np.array([0] * 6 + [1] * 5 + [2] * 9)
    with pytest.raises(EvalError, match=r"5-shot needs at least 6 train images per class; 1 of 3 classes have "
                                        r"fewer \(class \(images\): 1 \(5\)\)"):
        lowshot_draws.check_class_sizes(y, 5)
    assert lowshot_draws.check_class_sizes(y, 4).tolist() == [0, 1, 2]
    with pytest.raises(EvalError, match="at least 2 shots"):
        lowshot_draws.fold_of(np.zeros(3, int), 1, 5)


def test_every_fold_trains_on_every_class_and_holds_out_every_class():
    _, y = _blobs(12, 4)
    rows, pos = lowshot_draws.draw_shots(y, 10, seed=0, draw=0)
    fold, f = lowshot_draws.fold_of(pos, 10, 5)
    assert f == 5
    for k in range(f):
        assert set(y[rows][fold != k]) == set(y[rows][fold == k]) == {0, 1, 2, 3}
        assert np.bincount(y[rows][fold == k]).tolist() == [2] * 4
    assert lowshot_draws.fold_of(pos, 3, 5)[1] == 3  # F = min(folds, k)


def test_the_regulariser_and_the_test_score_equal_an_independent_sklearn_computation():
    from sklearn.linear_model import LogisticRegression

    x, y = _blobs(14, 3, seed=1, spread=1.6)
    xt, yt = _blobs(20, 3, seed=1, spread=1.6)
    xt = xt + 0.0  # same centres (seed 1), fresh noise below
    xt += np.random.default_rng(9).normal(scale=1.6, size=xt.shape).astype(np.float32)
    regs = [1e-2, 1.0, 30.0]
    res = lowshot_draws.lowshot_eval(x, y, xt, yt, shots=4, draws=3, seed=5, regs=regs, folds=2, backend="numpy",
                                     gtol=1e-8)

    def sk(xa, ya, reg):
        return LogisticRegression(C=1.0 / (2.0 * reg), tol=1e-10, max_iter=10000).fit(xa, ya)

    for d in range(3):
        rows, pos = lowshot_draws.draw_shots(y, 4, 5, d)
        fold = pos % 2
        cv = []
        for reg in sorted(regs, reverse=True):
            cv.append(np.mean([np.mean(sk(x[rows][fold != f], y[rows][fold != f], reg).predict(x[rows][fold == f])
                                       == y[rows][fold == f]) for f in (0, 1)]))
        best = sorted(regs, reverse=True)[int(np.argmax(cv))]
        assert res.best_regs[d] == best
        acc = np.mean(sk(x[rows], y[rows], best).predict(xt) == yt)
        assert abs(res.scores[d] - acc) <= 1.0 / len(yt) + 1e-9
    assert res.std == pytest.approx(np.std(res.scores, ddof=1))
    assert res.n_train == 12 and res.classes == 3


def test_informative_features_score_far_above_noise_features():
    x, y = _blobs(15, 6, seed=2)
    xt, yt = _blobs(15, 6, seed=2)
    informative = lowshot_draws.lowshot_eval(x, y, xt, yt, shots=3, draws=2, seed=0, regs=[1e-3, 1.0, 1e3])
    noise = np.random.default_rng(0).normal(size=x.shape).astype(np.float32)
    blind = lowshot_draws.lowshot_eval(noise, y, noise[::-1], yt, shots=3, draws=2, seed=0, regs=[1e-3, 1.0, 1e3])
    assert informative.mean > 0.9 and blind.mean < 0.4  # chance: 1/6


def _colour_classes(n: int, seed: int, size: int = 12) -> dict[str, np.ndarray]:
    """Four classes of flat-coloured noisy images (red, green, blue, grey)."""
    rng = np.random.default_rng(seed)
    base = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [128, 128, 128]], np.float64)
    y = np.arange(n) % 4
    images = base[y][:, None, None, :] + rng.normal(scale=25, size=(n, size, size, 3))
    return {"image": np.clip(images, 0, 255).astype(np.uint8), "label": y.astype(np.int64)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("lowshot_models")
    return {
        "color": load_model(testing.save_oracle_color_model(str(root / "color" / "saved_model"))),
        "rand": load_model(testing.save_random_conv_model(str(root / "rand" / "saved_model"), channels=4)),
    }


def _context(tmp_path, access=None) -> EvalContext:
    settings = EvalSettings(image_size=12, batch_size=64, output_dir=str(tmp_path), probe=ProbeOptions(regs=4))
    return EvalContext(settings, access or DataAccess(), log=None)


def test_protocol_draws_from_train_and_the_datasets_own_validation_split(models, tmp_path):
    access = testing.MemorySources({"colours": {
        "train": _colour_classes(8, 0), "validation": _colour_classes(8, 1), "test": _colour_classes(40, 2)}})
    options = LowshotOptions(shots=(2, 3), draws=3, folds=2)
    records = run_protocol(_context(tmp_path, access), models["color"], "lowshot", "colours", options)
    assert [r["protocol"] for r in records] == ["lowshot_2shot", "lowshot_3shot"]
    for r, k in zip(records, (2, 3), strict=True):
        s = r["settings"]
        assert s["pool"] == "train+validation" and s["pool_size"] == 16 and r["n_train"] == 4 * k
        assert len(s["per_draw_%"]) == 3 and s["std_%"] == pytest.approx(np.std(s["per_draw_%"], ddof=1))
        assert r["value"] == pytest.approx(np.mean(s["per_draw_%"])) and r["value"] > 90.0  # the colour oracle
        assert "cross-validation inside the k-shot set" in s["regulariser_selection"]
    with pytest.raises(EvalError, match="4-shot needs at least 5"):  # 4 images per class in the pool
        run_protocol(_context(tmp_path, access), models["color"], "lowshot", "colours",
                     LowshotOptions(shots=(4,), draws=1, folds=2))


def test_protocol_on_a_folder(models, tmp_path):
    data = _colour_classes(48, 3)
    for split, part in (("train", slice(0, 24)), ("test", slice(24, 48))):
        for i in range(part.start, part.stop):
            path = tmp_path / "colours" / split / f"c{data['label'][i]}" / f"{i}.png"
            os.makedirs(path.parent, exist_ok=True)
            Image.fromarray(data["image"][i]).save(path)
    options = LowshotOptions(shots=(3,), draws=2, folds=3)
    (rec,) = run_protocol(_context(tmp_path), models["color"], "lowshot", f"folder:{tmp_path / 'colours'}", options)
    assert rec["settings"]["pool"] == "train" and rec["n_test"] == 24 and rec["value"] > 90.0
    (blind,) = run_protocol(_context(tmp_path), models["rand"], "lowshot", f"folder:{tmp_path / 'colours'}", options)
    assert np.isfinite(blind["value"])


def _balanced_flowers(requested: list):
    """``as_dataset_fn`` of tfds' mock: 2 random 16-px images of each of the 102 classes per split, and a note of
    the split names asked for (mock_data would serve any name)."""
    import tensorflow as tf

    def as_dataset(self, split, decoders=None, read_config=None, **kwargs):
        requested.append(str(split))
        rng = np.random.default_rng(len(requested))
        y = np.repeat(np.arange(102), 2)
        return tf.data.Dataset.from_tensor_slices({
            "image": rng.integers(0, 256, (len(y), 16, 16, 3), dtype=np.uint8), "label": y,
            "file_name": np.array([f"{i}.jpg" for i in range(len(y))])})

    return as_dataset


def test_protocol_on_mocked_tfds_flowers_reads_the_declared_splits(models, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    context = _context(tmp_path)
    requested: list = []
    with tfds.testing.mock_data(as_dataset_fn=_balanced_flowers(requested)):
        (rec,) = run_protocol(context, models["rand"], "lowshot", "oxford_flowers102",
                              LowshotOptions(shots=(2,), draws=1, folds=2))
    # mock_data accepts any split name: the ones read are the builder's declared ones (the catalog's).
    assert set(requested) == {"train", "validation", "test"}
    assert rec["settings"]["pool"] == "train+validation" and rec["metric"] == "mean_per_class_%"
    assert rec["settings"]["classes"] == 102 and rec["n_train"] == 204 and rec["n_test"] == 204


def test_the_looc_table_sits_beside_lowshot_on_flowers():
    five = {e.method: (e.value, e.std) for e in paper_results.lookup("lowshot_5shot", "oxford_flowers102")}
    assert five["SimSiam+AugSelf"] == (86.4, 0.2) and five["LooC (color, rotation)"] == (70.9, 0.3)
    ten = {e.method: e.value for e in paper_results.lookup("lowshot_10shot", "folder:/data/flowers102")}
    assert ten["MoCo (LooC's figure)"] == 77.3 and ten["MoCo+AugSelf"] == 84.5
    assert not paper_results.lookup("lowshot_5shot", "flowers17")  # another dataset: nothing beside it
    record = {"model": "m", "protocol": "lowshot_5shot", "dataset": "oxford_flowers102", "metric": "top1_%",
              "value": 50.0, "ci95": 1.9, "settings": {"std_%": 1.5}}
    table = markdown_table([record])
    assert "SimSiam 83.6 → +AugSelf 86.4 (IN100 R50, LooC setup)" in table and "86.4 ± 0.2 sd" in table
    assert "| 50.00 ± 1.50 sd |" in table  # ours as the paper's: ± the std over draws


def test_lowshot_is_registered_with_its_flags_and_options_are_checked():
    assert "lowshot" in PROTOCOLS
    with pytest.raises(EvalError, match="--lowshot_shots must be integers >= 2"):
        LowshotOptions(shots=(1, 5))
    with pytest.raises(EvalError, match="--lowshot_folds must be at least 2"):
        LowshotOptions(folds=1)


def test_the_estimators_import_without_tensorflow():
    """lowshot_draws and omega_regression are pure estimators (a later pass moves them to their own package)."""
    import subprocess
    import sys

    code = ("import sys; import augself_tf.evaluation.estimators.lowshot_draws, "
            "augself_tf.evaluation.estimators.omega_regression; print('tensorflow' in sys.modules)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                         env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-1000:]
