"""LooC (augself_tf/methods/looc.py, augself_tf/losses/looc_nce.py): the loss against NumPy, the model's
wiring of views, spaces and ω, 2 replicas = 1 device, its flags, and the export's two signatures evaluated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags
from helpers import (
    assert_replicas_equal_one_device,
    make_model,
    omega,
    one_device_and_two_replicas,
    replica_values,
    tiny_backbone,
    tiny_run,
    unit,
)

from augself_tf.augment import registry
from augself_tf.augment.steps import Step
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import load_model
from augself_tf.losses.looc_nce import looc_nce
from augself_tf.methods import build_method
from augself_tf.methods.looc import parse_looc_augmentations
from augself_tf.objectives.conditioning import Conditioning
from augself_tf.training.loop import train
from augself_tf.training.train_config import config_from_flags, define_train_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(queue_size=16, projector_hidden=16, projector_dim=8)


def _lse(x: np.ndarray) -> float:
    m = x.max()
    return float(m + np.log(np.exp(x - m).sum()))


def numpy_looc(q, keys, queues, differs, t):
    """Every space's InfoNCE written out example by example: (total, per-space losses)."""
    num_spaces, batch = q.shape[1], q.shape[0]
    z0 = []
    for j in range(num_spaces):  # Z_0: every key a positive, each against the queue alone
        for b in range(batch):
            logits = np.concatenate([[q[b, 0] @ keys[j, b, 0]], queues[:, 0] @ q[b, 0]]) / t
            z0.append(_lse(logits) - logits[0])
    per_space = [np.mean(z0)]
    for s in range(1, num_spaces):  # Z_s: k_s the positive; keys differing from q in s and the queue negatives
        losses = []
        for b in range(batch):
            negatives = [q[b, s] @ keys[j, b, s] for j in range(num_spaces) if j != s and differs[j, b, s]]
            logits = np.array([q[b, s] @ keys[s, b, s], *negatives, *(queues[:, s] @ q[b, s])]) / t
            losses.append(_lse(logits) - logits[0])
        per_space.append(np.mean(losses))
    return float(np.sum(per_space)), np.array(per_space)


def test_looc_nce_matches_numpy_in_every_space():
    rng = np.random.default_rng(4)
    b, s, d, k = 5, 3, 6, 7
    q, keys = unit(rng.normal(size=[b, s, d])), unit(rng.normal(size=[s, b, s, d]))
    queues = unit(rng.normal(size=[k, s, d]))
    differs = rng.uniform(size=[s, b, s]) < 0.5
    want_total, want = numpy_looc(q, keys, queues, differs, 0.2)
    total, per_space = looc_nce(tf.constant(q, tf.float32), tf.constant(keys, tf.float32),
                                tf.constant(queues, tf.float32), tf.constant(differs), 0.2)
    np.testing.assert_allclose(per_space.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(float(total), want_total, rtol=1e-5)
    # Masked key negatives carry no gradient, and leave none non-finite.
    qt = tf.Variable(q, dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss, _ = looc_nce(qt, tf.constant(keys, tf.float32), tf.constant(queues, tf.float32), tf.constant(differs),
                           0.2)
    assert np.isfinite(tape.gradient(loss, qt).numpy()).all()


def _looc_batch(seed: int, n: int = 8, size: int = 8) -> dict:
    """Four views (q, k0, k_color, k_rotation) whose ω copy q's colour / rotation where LooC's views do."""
    rng = np.random.default_rng(seed)
    out = {f"view{j}": rng.uniform(0, 1, [n, size, size, 3]).astype("float32") for j in range(1, 5)}
    omegas = [omega(rng, n) for _ in range(4)]
    omegas[2]["color"] = omegas[0]["color"].copy()
    omegas[3]["rotation"] = omegas[0]["rotation"].copy()
    omegas[1]["rotation"][: n // 2] = omegas[0]["rotation"][: n // 2]  # k0 un-rotated like q: not a negative
    out.update({f"omega{j + 1}": o for j, o in enumerate(omegas)})
    return out


def test_the_models_loss_is_looc_nce_of_its_own_embeddings_with_differs_read_from_omega():
    model = make_model("looc", augself=(), looc_augmentations="color,rotation", **SMALL)
    assert model.views.num_views == 4 and model.spaces == ("z0", "color", "rotation")
    b = _looc_batch(1)
    forward = model.method_forward(b, training=False)
    q = unit(model.projector(model.backbone(b["view1"], training=False), training=False).numpy())
    keys = np.stack([unit(model.key_encoder.encode(b[f"view{j}"], False)[1].numpy()) for j in range(2, 5)])
    differs = np.ones([3, 8, 3], bool)
    for j in range(3):
        for s, name in ((1, "color"), (2, "rotation")):
            differs[j, :, s] = np.any(b[f"omega{j + 2}"][name] != b["omega1"][name], axis=1)
    assert not differs[1, :, 1].any() and not differs[2, :, 2].any() and not differs[0, :4, 2].any()
    want, _ = numpy_looc(q, keys, model.queue.numpy(), differs, model.temperature)
    np.testing.assert_allclose(float(forward.loss), want, rtol=1e-4)
    np.testing.assert_allclose(forward.aux["keys"].numpy(), keys[0], rtol=1e-4, atol=1e-5)  # k0 is enqueued


def test_two_replicas_equal_one_device_and_queues_hold_k0_of_both_replicas():
    b = _looc_batch(2, n=8)
    # One AugSelf head: a second is the same MLP through the same code, reduced the same way (two heads on one
    # device: test_methods_base.py's loss-falls test).
    single, double, one, two = one_device_and_two_replicas(
        lambda: make_model("looc", augself=("crop",), sync=True, **SMALL), b)
    for key in ("loss/augself", "looc/z0_loss", "looc/color_loss", "looc/rotation_loss"):
        np.testing.assert_allclose(two[key], one[key], rtol=1e-5, err_msg=key)
    assert_replicas_equal_one_device(single, double, one, two)
    assert [int(p) for p in replica_values(double.queue_ptr)] == [8, 8]


def parse_argv(argv: list[str]):
    """augself-train's config for the command line ``argv``, from flags defined on a FlagValues of their own."""
    values = absl_flags.FlagValues()
    define_train_flags(values, "augself-train")
    values(["augself-train", *argv])
    return config_from_flags(values)


def test_flags_switch_rotation_on_and_refuse_what_looc_cannot_use():
    assert parse_argv(["--method=looc"]).augment.probability("rotation_prob") == 0.5
    assert parse_argv(["--method=looc", "--looc_augmentations=color"]).augment.probability("rotation_prob") == 0.0
    assert parse_argv(["--method=looc", "--rotation_prob=0.25"]).augment.probability("rotation_prob") == 0.25
    assert parse_argv(["--method=moco"]).augment.probability("rotation_prob") == 0.0
    assert parse_looc_augmentations(" color, rotation,color") == ("color", "rotation")
    with pytest.raises(ValueError, match="^--looc_augmentations: unknown augmentation 'sepia'; choose from crop"):
        parse_argv(["--method=looc", "--looc_augmentations=color,sepia"])
    with pytest.raises(ValueError, match="at least one"):
        parse_looc_augmentations(" , ")
    with registry.registered(Step(name="shake", seed_slot=40, sample=lambda *_: {}, transform=lambda x, *_: x),
                             after="crop"):
        with pytest.raises(ValueError, match="'shake' has no parameters ω to copy"):
            parse_looc_augmentations("shake")
    with pytest.raises(ValueError, match="--condition does not compose with --method=looc"):
        build_method("looc", tiny_backbone(), options=SMALL, conditioning=Conditioning.create(("color",)))


@pytest.mark.slow
def test_looc_trains_exports_both_signatures_and_eval_main_evaluates_each(tmp_path):
    run = str(tmp_path / "looc")
    result = train(tiny_run(run, method="looc", max_steps=2, checkpoint_every=2,
                            method_options={**SMALL, "looc_augmentations": "color,rotation"}))
    assert np.isfinite(result.last_logs["looc/rotation_loss"])
    images = tf.random.stateless_uniform([4, 16, 16, 3], [1, 2])
    backbone, plus = load_model(result.saved_model_dir), load_model(result.saved_model_dir, "looc_plus_features")
    model = result.model
    np.testing.assert_allclose(backbone(images), model.backbone(images, training=False).numpy(), rtol=1e-4, atol=1e-5)
    want = model.plus_features(model.backbone(images, training=False)).numpy()
    assert want.shape == (4, 3 * 8)
    np.testing.assert_allclose(plus(images), want, rtol=1e-4, atol=1e-5)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = str(tmp_path / "eval" / "results.json")
    common = [sys.executable, os.path.join(ROOT, "eval_main.py"), f"--saved_model={result.saved_model_dir}",
              "--dataset=shapes", "--max_examples=200", "--image_size=16", "--linear_regs=2",
              "--linear_max_iter=50", f"--output={out}", "--quiet"]
    proc = subprocess.run([*common, "--protocol=linear", "--signature=looc_plus_features"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["model"] for r in json.load(open(out))] == ["looc:looc_plus_features"]
    with pytest.raises(EvalError, match=r"has no 'nope' signature \(signatures: looc_plus_features, serving_default"):
        load_model(result.saved_model_dir, "nope")
