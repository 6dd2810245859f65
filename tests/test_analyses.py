"""The paper's remaining analyses at toy scale: colour information, robustness, fine-tuning, sweeps."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import eval_fakes as testing
import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import hparams_dashboard_rows, tiny_backbone

from augself_tf.evaluation import corruptions, perturbed_accuracy
from augself_tf.evaluation.context import EvalContext, EvalSettings, ProbeOptions
from augself_tf.evaluation.estimators import l2sp_finetune
from augself_tf.evaluation.estimators.infonce import CriticOptions, infonce_bound
from augself_tf.evaluation.loading import load_model
from augself_tf.evaluation.protocols import colorinfo as color_info
from augself_tf.evaluation.protocols import run_protocol
from augself_tf.evaluation.protocols.colorinfo import ColorInfoOptions
from augself_tf.evaluation.protocols.finetune import FinetuneOptions
from augself_tf.evaluation.protocols.robustness import RobustnessOptions

MemorySources = testing.MemorySources
SMALL_NCE = CriticOptions(batch=64, steps=120, hidden=64, dim=32, seeds=2, eval_batches=4)


def _flat_colour_images(n: int, size: int = 8, seed: int = 0) -> np.ndarray:
    """Images of one random colour each plus a little noise: their histogram is a function of 3 numbers."""
    rng = np.random.default_rng(seed)
    base = rng.random((n, 1, 1, 3))
    return np.clip(base + 0.08 * rng.normal(size=(n, size, size, 3)), 0, 1).astype(np.float32)


def test_color_histograms_are_normalised_joint_bins():
    img = np.zeros((2, 4, 4, 3), np.float32)
    img[0, :2] = [1.0, 0.0, 0.0]  # half red, half black
    img[1] = [0.3, 0.6, 0.99]
    h = color_info.color_histograms(img, bins=2)
    assert h.shape == (2, 8)
    np.testing.assert_allclose(h.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(h[0], [0.5, 0, 0, 0, 0.5, 0, 0, 0])  # cell = r*4 + g*2 + b
    np.testing.assert_allclose(h[1], [0, 0, 0, 1.0, 0, 0, 0, 0])  # (0, 1, 1)
    single = color_info.color_histogram_tf(img[1], 2).numpy()
    np.testing.assert_allclose(single, h[1])


def test_infonce_oracle_beats_random_and_never_exceeds_log_n():
    imgs = _flat_colour_images(400)
    c = color_info.color_histograms(imgs, 4)
    mean_colour = imgs.mean((1, 2))
    z_rand = np.random.default_rng(1).normal(size=(400, 16))
    oracle = infonce_bound(c[:300], mean_colour[:300], c[300:], mean_colour[300:], SMALL_NCE)
    rand = infonce_bound(c[:300], z_rand[:300], c[300:], z_rand[300:], SMALL_NCE)
    assert oracle.log_n == pytest.approx(math.log(64))
    for r in (oracle, rand):
        assert max(r.estimates) <= r.log_n + 1e-6
        assert len(r.estimates) == SMALL_NCE.seeds * SMALL_NCE.eval_batches and r.ci95 >= 0
    assert oracle.mean > 0.5 * oracle.log_n
    assert oracle.mean > rand.mean + 2.0
    assert rand.mean < 0.5


def test_colorinfo_protocol_records(tmp_path):
    imgs = (_flat_colour_images(160, size=16, seed=2) * 255).astype(np.uint8)
    labels = np.zeros(160, np.int64)
    data = {"toy": {"train": {"image": imgs[:100], "label": labels[:100]},
                    "test": {"image": imgs[100:], "label": labels[100:]}}}
    opts = ColorInfoOptions(batch=32, steps=60, seeds=1, eval_batches=3)
    context = EvalContext(EvalSettings(image_size=16, batch_size=64, output_dir=str(tmp_path)), MemorySources(data),
                          log=None)
    model = load_model(testing.save_oracle_color_model(str(tmp_path / "color" / "saved_model")))
    (rec,) = run_protocol(context, model, "colorinfo", "toy", opts)
    assert rec["protocol"] == "colorinfo" and rec["metric"] == "I_NCE_nats"
    assert rec["settings"]["batch_used"] == 32 and rec["settings"]["steps"] == 60
    assert 0.3 * math.log(32) < rec["value"] <= math.log(32)
    assert rec["n_train"] == 100 and rec["n_test"] == 60


# ----------------------------------------------------------------------------------------------------
# Robustness


@pytest.fixture(scope="module")
def rect_data():
    data = testing.rectangle_images(150, size=24, seed=3)
    tr = {k: v[:100] for k, v in data.items()}
    te = {k: v[100:] for k, v in data.items()}
    return {"rect": {"train": tr, "test": te}}


@pytest.fixture(scope="module")
def rand_model(tmp_path_factory):
    return testing.save_random_conv_model(str(tmp_path_factory.mktemp("m") / "rand" / "saved_model"), channels=8)


def test_corruptions_keep_shape_and_range_and_change_the_image():
    x = np.random.default_rng(0).random((3, 20, 28, 3)).astype(np.float32)
    for name, fn in corruptions.CORRUPTIONS.items():
        for sev in (1, 5):
            y = fn(x, sev, seed=4).numpy()
            assert y.shape == x.shape and y.dtype == np.float32, name
            assert y.min() >= 0.0 and y.max() <= 1.0, name
            assert np.abs(y - x).mean() > 0.02, name
        np.testing.assert_array_equal(fn(x, 3, seed=4).numpy(), fn(x, 3, seed=4).numpy())  # seeded
    with pytest.raises(ValueError):
        corruptions.fog(x, 6)
    k = corruptions.motion_blur_kernel(4, 2, -90)
    assert k.shape == (9, 9) and k.sum() == pytest.approx(1.0)


def test_fgsm_eps0_is_clean_and_larger_eps_does_not_help(rand_model, rect_data, tmp_path):
    opts = RobustnessOptions(eps=(0.0, 4.0, 16.0, 64.0), corruptions=("fog", "snow"), severities=(2,))
    settings = EvalSettings(image_size=24, batch_size=64, label_key="color", probe=ProbeOptions(regs=3, max_iter=200),
                            output_dir=str(tmp_path))
    context = EvalContext(settings, MemorySources(rect_data), log=None)
    records = run_protocol(context, load_model(rand_model), "robustness", "rect", opts)
    by = {r["protocol"]: r["value"] for r in records}
    assert set(by) == {"robustness_clean", "robustness_fgsm_eps0", "robustness_fgsm_eps4", "robustness_fgsm_eps16",
                       "robustness_fgsm_eps64", "robustness_fog", "robustness_snow"}
    assert by["robustness_clean"] > 50.0  # 3 colours, chance 33%
    assert by["robustness_fgsm_eps0"] == by["robustness_clean"]
    accs = [by[f"robustness_fgsm_eps{e}"] for e in (0, 4, 16, 64)]
    assert all(b <= a for a, b in zip(accs, accs[1:], strict=False)), accs
    assert accs[-1] < accs[0]
    assert all(r["n_test"] == 50 for r in records)


def test_fgsm_moves_every_pixel_by_eps_against_the_loss(rand_model):
    model = load_model(rand_model)
    x = np.random.default_rng(1).uniform(0.1, 0.9, (4, 16, 16, 3)).astype(np.float32)
    fn = model.features_tensor
    d = fn(tf.constant(x)).shape[1]
    rng = np.random.default_rng(2)
    coef, intercept = rng.normal(size=(d, 3)).astype(np.float32), np.zeros(3, np.float32)
    y = np.array([0, 1, 2, -1])
    adv = perturbed_accuracy.fgsm(fn, coef, intercept, x, y, 0.05).numpy()
    step = np.abs(adv - x)
    assert np.all((np.isclose(step, 0.05, atol=1e-6)) | (step == 0))
    assert np.mean(step > 0) > 0.5


# ----------------------------------------------------------------------------------------------------
# Fine-tuning

_SIG = [tf.TensorSpec([None, None, None, 3], tf.float32, name="images")]


class _ColourBlindConv(tf.Module):
    """A trainable conv backbone that starts (almost) colour-blind: the same kernel on R, G and B."""

    def __init__(self, channels: int = 8, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        k = np.repeat(rng.normal(size=(3, 3, 1, channels)), 3, axis=2) / 3.0
        self.kernel = tf.Variable((k + 1e-3 * rng.normal(size=k.shape)).astype(np.float32))
        self.bias = tf.Variable(np.zeros(channels, np.float32))

    @tf.function(input_signature=_SIG)
    def serve(self, images: tf.Tensor) -> dict:
        h = tf.nn.relu(tf.nn.conv2d(images, self.kernel, strides=2, padding="SAME") + self.bias)
        return {"features": tf.concat([tf.reduce_mean(h, [1, 2]), tf.reduce_max(h, [1, 2])], axis=1)}


@pytest.fixture(scope="module")
def blind_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("m") / "blind" / "saved_model")
    m = _ColourBlindConv()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


def test_l2sp_penalty_matches_numpy():
    rng = np.random.default_rng(0)
    init = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)]
    now = [v + rng.normal(size=v.shape).astype(np.float32) for v in init]
    w = rng.normal(size=(6, 2)).astype(np.float32)
    alpha, beta = 0.1, 0.01
    got = l2sp_finetune.l2sp_penalty([tf.Variable(v) for v in now], [tf.constant(v) for v in init], tf.constant(w),
                                alpha, beta)
    want = alpha / 2 * sum(np.sum((a - b) ** 2) for a, b in zip(now, init, strict=True)) + beta / 2 * np.sum(w**2)
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_finetune_trains_the_savedmodel_and_beats_the_initial_head(blind_model):
    data = testing.rectangle_images(120, size=16, seed=5)
    x, y = (data["image"] / 255).astype(np.float32), data["color"]
    o = FinetuneOptions(steps=60, batch_size=32, head_init="probe", flip=False, alphas=(0.01,),
                                 lrs=(0.02,), trials=1)
    ft = l2sp_finetune.Finetuner(blind_model, 3, o)
    assert len(ft.backbone_vars) == 2  # the serving function exposes the module's variables
    w0, b0 = l2sp_finetune._probe_head(ft, x, y, 3)
    before = ft.accuracy(x, y, tf.constant(w0), tf.constant(b0))
    w, b = ft.fit(x, y, alpha=0.01, lr=0.02, seed=0, head=(w0, b0))
    after = ft.accuracy(x, y, w, b)
    assert after > before + 0.2 and after > 0.9, (before, after)
    assert float(ft.penalty(w, 0.01)) > 0.5 * 0.01 * float(tf.reduce_sum(w**2))  # backbone moved from theta0
    ft.reset()
    np.testing.assert_array_equal(ft.backbone_vars[0].numpy(), ft.initial[0].numpy())


def test_finetune_protocol_grid_trials_and_interval(blind_model, rect_data, tmp_path):
    opts = FinetuneOptions(alphas=(0.01, 1.0), lrs=(0.02,), steps=50, trials=2, batch_size=32,
                                    head_init="probe")
    settings = EvalSettings(image_size=24, batch_size=64, label_key="color", output_dir=str(tmp_path),
                            strategy=mirrored_cpus())
    lines: list[str] = []
    bar = io.StringIO()
    context = EvalContext(settings, MemorySources(rect_data), log=lines.append, progress_stream=bar)
    (rec,) = run_protocol(context, load_model(blind_model), "finetune", "rect", opts)
    assert bar.getvalue().splitlines()[-1].startswith("[finetune] blind rect  200/200 (100%)")  # (2 + 2) x 50 steps
    s = rec["settings"]
    assert rec["protocol"] == "finetune" and rec["n_test"] == 50 and rec["n_train"] == 100
    assert [g[:2] for g in s["grid_alpha_lr_val"]] == [[0.01, 0.02], [1.0, 0.02]]
    assert s["best_alpha"] in (0.01, 1.0) and len(s["trials_%"]) == 2 and rec["ci95"] >= 0
    assert rec["value"] == pytest.approx(np.mean(s["trials_%"]))
    assert rec["value"] > 50.0, (s["grid_alpha_lr_val"], s["trials_%"])  # 3 colours
    assert s["replicas"] == 2 and s["batch_norm"].startswith("frozen")  # not one of our exports


def test_finetune_on_two_replicas_equals_one_device(blind_model):
    data = testing.rectangle_images(64, size=16, seed=6)
    x, y = (data["image"] / 255).astype(np.float32), data["color"]
    o = FinetuneOptions(steps=8, batch_size=32, flip=False, alphas=(0.1,), lrs=(0.05,), trials=1)
    results = []
    for strategy in (None, mirrored_cpus()):
        ft = l2sp_finetune.Finetuner(blind_model, 3, o, strategy=strategy)
        w, b = ft.fit(x, y, alpha=0.1, lr=0.05, seed=3)
        results.append((w.numpy(), b.numpy(), ft.backbone_vars[0].numpy(), ft.features(x[:5])))
    assert ft.strategy.num_replicas_in_sync == 2
    assert np.abs(results[0][2] - ft.initial[0].numpy()).max() > 1e-4  # the backbone trained
    for one, two in zip(*results, strict=True):
        np.testing.assert_allclose(one, two, rtol=2e-4, atol=2e-5)


@pytest.fixture(scope="module")
def our_export(tmp_path_factory):
    """Our export (export_backbone: train_features, the BN statistics as non-trainable weights) of the tests' tiny
    conv-BN backbone: what the fine-tuner reads is the export's interface, the same for a ResNet, whose export
    and mirrored trace cost a minute on a loaded 2-core machine."""
    from augself_tf.export.saved_model import export_backbone

    return export_backbone(tiny_backbone(), str(tmp_path_factory.mktemp("m") / "tiny" / "saved_model"))


def test_finetune_updates_batchnorm_statistics_of_our_exports_under_mirrored(our_export, rect_data):
    o = FinetuneOptions(steps=3, batch_size=16, alphas=(0.01,), lrs=(0.01,), trials=1)
    ft = l2sp_finetune.Finetuner(our_export, 3, o, strategy=mirrored_cpus())
    assert ft.batch_norm.startswith("training mode") and len(ft.state_vars) > 0
    x = (rect_data["rect"]["train"]["image"][:32] / 255).astype(np.float32)
    before = ft.features(x)
    ft.fit(x, rect_data["rect"]["train"]["color"][:32], alpha=0.01, lr=0.01, seed=0)
    moved = max(float(np.abs(v.numpy() - v0.numpy()).max()) for v, v0 in zip(ft.state_vars, ft.initial_state,
                                                                             strict=True))
    assert moved > 1e-3  # moving means/variances followed the fine-tuning batches
    assert np.abs(ft.features(x) - before).max() > 1e-4
    ft.reset()
    np.testing.assert_allclose(ft.features(x), before, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------------
# Sweeps (reproduce/sweep.py)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sweep_module():
    from reproduce import sweep  # as the other reproduction tests import it (the command's run: the end-to-end test)

    return sweep


def test_sweep_params_table_and_plot(tmp_path):
    sweep = _sweep_module()
    flags = [os.path.join(REPO, "flags", f) for f in (
        "stl10_simsiam_color_lambda0.5.cfg", "stl10_simsiam_color_lambda2.cfg", "stl10_color0.5_simsiam.cfg")]
    rows = [sweep.run_params(f, ["--augself_weight=3"] if i == 2 else []) for i, f in enumerate(flags)]
    assert [r["lambda"] for r in rows] == [0.5, 2.0, None]  # no AugSelf: no λ, whatever the override
    assert [r["color_strength"] for r in rows] == [1.0, 1.0, 0.5] and rows[0]["augself"] == "color"
    assert sweep.sweep_axis(rows[:2]) == "lambda" and sweep.sweep_axis(rows) == "color_strength"
    for i, r in enumerate(rows):
        r["metrics"] = {"linear (top1_%)": (50.0 + i, None), "colorinfo (I_NCE_nats)": (1.0 + i, 0.1)}
    cols = ["linear (top1_%)", "colorinfo (I_NCE_nats)"]
    table = sweep.markdown(rows, cols)
    assert table.count("\n") == 4 and "| 51.000 |" in table and "2.000 ± 0.100" in table and "| — |" in table
    path = sweep.plot(rows[:3], cols, "lambda", str(tmp_path / "p.png"))
    assert os.path.getsize(path) > 1000


@pytest.mark.slow
def test_sweep_end_to_end_toy(tmp_path):
    """The script as a user runs it: two pretraining subprocesses side by side, one eval, table and plot."""
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "reproduce.sweep", "--quick", "--jobs=2", f"--out_dir={out}",
           "--train_arg=--max_steps=1", os.path.join(REPO, "flags", "stl10_color0.5_simsiam_augself.cfg"),
           os.path.join(REPO, "flags", "stl10_color2_simsiam.cfg")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (out / "sweep.md").read_text()
    assert "Sweep over color_strength" in table
    assert "linear (top1_%)" in table and "colorinfo (I_NCE_nats)" in table
    assert "stl10_color0.5_simsiam_augself" in table and "stl10_color2_simsiam" in table
    assert (out / "sweep.png").stat().st_size > 1000
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert all(len(r["metrics"]) == 2 for r in rows)
    # The same sweep in TensorBoard's HParams dashboard: one row per run, its λ/s and its eval results.
    dashboard = hparams_dashboard_rows(str(out / "runs"))
    assert set(dashboard) == {"stl10_color0.5_simsiam_augself", "stl10_color2_simsiam"}
    hparams, metrics = dashboard["stl10_color0.5_simsiam_augself"]
    assert hparams["color_strength"] == 0.5 and hparams["augself"] == "crop,color"
    assert dashboard["stl10_color2_simsiam"][0]["color_strength"] == 2.0
    assert {tag.split("/")[1] for group, tag in metrics if group == "eval"} == {"linear", "colorinfo"}
