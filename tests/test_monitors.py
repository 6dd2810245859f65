"""Online monitors: the weighted kNN against a NumPy oracle, features gathered across replicas, monitor/*
scalars in TensorBoard on 1 and 2 replicas, bad --monitor input, and no effect on the trained weights."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import make_config, replace_config

from augself_tf.augment import AugmentConfig
from augself_tf.data.eval_view import CHANNEL_PERMUTATIONS
from augself_tf.data.sources import SourceInfo
from augself_tf.models.resnet import build_backbone
from augself_tf.runtime.tensorboard import last_per_step, read_scalars
from augself_tf.training.knn import weighted_knn_accuracy, weighted_knn_predict
from augself_tf.training.loop import TrainConfig, train
from augself_tf.training.monitors import DistributedFeatures, parse_monitors, plan_monitors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def numpy_weighted_knn(bank, bank_labels, queries, num_classes, k, temperature):
    """solo-learn's weighted_knn, one query at a time: top-k cosine, weights exp(sim/T), per-class sum, argmax."""
    bank = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    preds = []
    for q in queries:
        sims = bank @ (q / np.linalg.norm(q))
        top = np.argsort(-sims, kind="stable")[: min(k, len(bank))]
        scores = np.zeros(num_classes)
        np.add.at(scores, bank_labels[top], np.exp(sims[top] / temperature))
        preds.append(int(np.argmax(scores)))
    return np.array(preds)


@pytest.mark.parametrize(("k", "temperature"), [(1, 0.1), (20, 0.1), (200, 0.07), (1000, 1.0)])
def test_weighted_knn_equals_numpy_oracle(k, temperature):
    rng = np.random.default_rng(k)
    centres = rng.normal(size=(4, 16))
    bank_labels = rng.integers(0, 4, 300)
    query_labels = rng.integers(0, 4, 70)
    bank = centres[bank_labels] + 1.5 * rng.normal(size=(300, 16))
    queries = centres[query_labels] + 1.5 * rng.normal(size=(70, 16))
    expected = numpy_weighted_knn(bank, bank_labels, queries, 4, k, temperature)
    got = weighted_knn_predict(bank.astype(np.float32), bank_labels, queries.astype(np.float32), 4, k, temperature,
                               chunk=32)  # several chunks
    np.testing.assert_array_equal(got.numpy(), expected)
    accuracy = weighted_knn_accuracy(bank, bank_labels, queries, query_labels, 4, k, temperature)
    assert accuracy == pytest.approx(np.mean(expected == query_labels))
    assert 0.3 < accuracy <= 1.0  # the clusters are learnable: far above chance (0.25)


def test_weighted_vote_lets_one_close_neighbour_beat_two_far_ones():
    bank = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], np.float32)  # class 1 once, class 0 twice
    labels = np.array([1, 0, 0])
    query = np.array([[1.0, 0.2]], np.float32)  # cosine 0.98 to class 1, 0.20 to both class-0 points
    assert int(weighted_knn_predict(bank, labels, query, 2, k=3, temperature=0.1)[0]) == 1  # e^9.8 > 2 e^2
    assert int(weighted_knn_predict(bank, labels, query, 2, k=3, temperature=100.0)[0]) == 0  # ≈ majority vote


def _info(num_classes=5, extra=None, name="toy"):
    return SourceInfo(name=name, split="test", num_examples=10, num_classes=num_classes, extra_labels=extra or {})


def test_monitor_choice_auto_explicit_and_errors():
    colour = {"color": ["red", "green"]}
    assert [m.name for m in parse_monitors("auto", _info(extra=colour))] == ["knn", "knn_color"]
    assert [m.name for m in parse_monitors("auto", _info())] == ["knn", "colorperm"]
    assert [m.name for m in parse_monitors("auto", _info(num_classes=0))] == ["colorperm"]
    assert parse_monitors("none", _info()) == () and parse_monitors("", _info()) == ()
    chosen = parse_monitors("colorperm, knn:color,knn", _info(extra=colour))
    assert [(m.name, m.label, m.permuted) for m in chosen] == [
        ("colorperm", "permutation", True), ("knn_color", "color", False), ("knn", "label", False)]
    with pytest.raises(ValueError, match="monitor 'knn' needs 'label' labels, but toy:test has no labels"):
        parse_monitors("knn", _info(num_classes=0))
    with pytest.raises(ValueError, match="'knn:color' needs 'color' labels, but toy:test has only label"):
        parse_monitors("knn:color", _info())
    with pytest.raises(ValueError, match="unknown monitor 'linear'; choose auto, none, or a comma list"):
        parse_monitors("knn,linear", _info())
    with pytest.raises(ValueError, match="names a monitor twice"):
        parse_monitors("knn,knn", _info())


@pytest.fixture(params=["graph", "eager"])
def function_mode(request):
    tf.config.run_functions_eagerly(request.param == "eager")  # as tests that run one step eagerly set it
    try:
        yield request.param
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.mark.parametrize("replicas", [1, 2])
def test_features_gathered_across_replicas_equal_the_backbone_on_every_image_once(replicas, function_mode):
    strategy = mirrored_cpus() if replicas == 2 else tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        backbone = build_backbone("resnet18_cifar", 0.0625, synchronized_bn=replicas > 1)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (37, 8, 8, 3), dtype=np.uint8)  # 37: an uneven last batch on every replica
    perms = rng.integers(0, 6, 37)
    extract = DistributedFeatures(strategy, backbone, global_batch=12)
    assert extract.global_batch == 12 and extract.per_replica == 12 // replicas
    permuted = np.stack([img[..., list(CHANNEL_PERMUTATIONS[p])] for img, p in zip(images, perms, strict=True)])
    with strategy.scope():
        expected = backbone(tf.constant(permuted, tf.float32) / 255.0, training=False).numpy()
    got = extract(images, perms)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    plain = extract(images)
    with strategy.scope():
        np.testing.assert_allclose(plain, backbone(tf.constant(images, tf.float32) / 255.0).numpy(), rtol=1e-4,
                                   atol=1e-5)
    assert not np.allclose(plain, got)  # the channel orders were applied


def monitored_run(model_dir: str, **overrides) -> TrainConfig:
    # shapes 'test' (1000 images) in batches of 200: 5 steps per epoch.
    base = make_config(method="simsiam", augself=("crop", "color"), dataset="shapes", split="test",
                       backbone="resnet18_cifar", width=0.0625, augment=AugmentConfig(image_size=16),
                       batch_size=200, epochs=2, max_steps=6, model_dir=model_dir, verbose=0, export=False,
                       method_options={"projector_dim": 16, "predictor_hidden": 8}, shuffle_buffer=256,
                       monitor="auto", monitor_every=1, monitor_bank_size=300, monitor_query_size=100,
                       monitor_k=20)
    return replace_config(base, **overrides)


def _monitor_events(tb_dir: str) -> dict[str, dict[int, float]]:
    events = read_scalars(tb_dir, lambda tag: tag.startswith("monitor/"))
    return {tag: dict(last_per_step(points)) for tag, points in events.items()}


# Two replicas with every monitor: test_monitors_on_two_replicas_write_scalars_and_do_not_change_training.
@pytest.mark.slow
@pytest.mark.parametrize(("replicas", "monitor"), [(1, "auto")])
def test_run_writes_monitor_scalars_to_tensorboard(tmp_path, replicas, monitor):
    result = train(monitored_run(str(tmp_path / "run"), cpu_replicas=replicas, monitor=monitor))
    assert result.steps == 6
    events = _monitor_events(result.tensorboard_dir)
    names = ["knn", "knn_color"] + (["colorperm"] if monitor != "auto" else [])
    assert sorted(events) == sorted(f"monitor/{n}" for n in [*names, "seconds"])
    for name in names:
        assert sorted(events[f"monitor/{name}"]) == [0, 5, 6]  # before training, end of epoch 1, end of the run
        assert all(0.0 <= v <= 1.0 for v in events[f"monitor/{name}"].values())
        assert events[f"monitor/{name}"][6] == pytest.approx(result.monitors[name])
    assert all(v > 0 for v in events["monitor/seconds"].values())
    # The total also holds reading the monitor data once.
    assert result.monitors["seconds_total"] > sum(events["monitor/seconds"].values())


def test_bad_monitor_settings_are_one_clear_error():
    cfg = monitored_run("unused")

    def build(**overrides):
        return plan_monitors(dataclasses.replace(cfg, **overrides), 1000)

    with pytest.raises(ValueError, match="--monitor_splits must be BANK,QUERY"):
        build(monitor_splits="test")
    with pytest.raises(ValueError, match="'knn:shade' needs 'shade' labels, but shapes:train has only label, color"):
        build(monitor="knn:shade")
    with pytest.raises(ValueError, match="--monitor_every must be at least 1"):
        build(monitor_every=0)
    with pytest.raises(ValueError, match="unknown split 'valid' for dataset 'shapes'"):
        build(monitor_splits="train,valid")
    assert build(monitor="none") is None


def test_default_monitor_subsets_scale_with_the_pretraining_data_and_are_capped():
    cfg = monitored_run("unused", monitor_bank_size=None, monitor_query_size=None)
    shapes = plan_monitors(cfg, 5000)
    assert (shapes.bank_split, shapes.query_split, shapes.bank_size, shapes.query_size) == ("train", "test", 1000, 500)
    stl10_like = plan_monitors(cfg, 105_000)
    assert (stl10_like.bank_size, stl10_like.query_size) == (5000, 1000)
    chosen = plan_monitors(dataclasses.replace(cfg, monitor_bank_size=123, monitor_query_size=45), 105_000)
    assert (chosen.bank_size, chosen.query_size) == (123, 45)
    assert plan_monitors(cfg, 3).bank_size == 1


def _train_main_cmd(model_dir: str, *extra: str) -> list[str]:
    return [sys.executable, os.path.join(ROOT, "train_main.py"), "--method=moco", "--augself=crop,color",
            "--dataset=shapes", "--split=test", "--width=0.0625", "--image_size=16", "--batch_size=200",
            "--max_steps=7", "--queue_size=400", "--projector_hidden=32", "--projector_dim=16", "--noexport",
            f"--model_dir={model_dir}", *extra]


_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


# train_main with an unknown monitor: tests/test_training.py (one import for all of train_main's bad inputs).


def _checkpoint(model_dir: str) -> dict:
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "save_counter" not in k}


@pytest.mark.slow
def test_monitors_on_two_replicas_write_scalars_and_do_not_change_training(tmp_path):
    """Two replicas, --deterministic: the monitors run before step 1, after epoch 1 (step 5) and at the end,
    write their TensorBoard scalars, and leave weights, BN statistics, optimizer and MoCo queue after 7 steps
    the same bits as a run without them."""
    plain, monitored = str(tmp_path / "plain"), str(tmp_path / "monitored")
    common = ["--deterministic", "--cpu_replicas=2"]
    commands = {
        plain: _train_main_cmd(plain, *common, "--monitor=none"),
        monitored: _train_main_cmd(monitored, *common, "--monitor=knn,knn:color,colorperm", "--monitor_every=1",
                                   "--monitor_bank_size=300", "--monitor_query_size=100"),
    }
    # Both at once: --deterministic runs one thread per op, so two runs share the cores without slowing down.
    procs = {d: subprocess.Popen(cmd, cwd=ROOT, env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d, cmd in commands.items()}
    outs = {d: p.communicate(timeout=600) for d, p in procs.items()}
    for d, p in procs.items():
        assert p.returncode == 0, outs[d][1][-3000:]
    assert "monitor " not in outs[plain][0]
    for step in (0, 5, 7):
        assert f"monitor  step {step} " in outs[monitored][0], outs[monitored][0]
    events = _monitor_events(os.path.join(monitored, "tensorboard"))
    names = ["knn", "knn_color", "colorperm"]
    assert sorted(events) == sorted(f"monitor/{n}" for n in [*names, "seconds"])
    for name in names:
        assert sorted(events[f"monitor/{name}"]) == [0, 5, 7]
        assert all(0.0 <= v <= 1.0 for v in events[f"monitor/{name}"].values())
    assert all(v > 0 for v in events["monitor/seconds"].values())
    a, b = _checkpoint(plain), _checkpoint(monitored)
    assert sorted(a) == sorted(b) and len(a) > 50
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
