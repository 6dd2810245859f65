"""SavedModels take [0, 1] images: new exports normalise inside (the backbone's first layer), and an export
whose function does no normalisation (what every export before input normalisation was) is fed the same
[0, 1] images by evaluation, so it gives the features it gives and still evaluates."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from augself_tf.evaluation.loading import load_model
from augself_tf.export.saved_model import export_backbone
from augself_tf.models.resnet import build_backbone

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Unnormalised(tf.Module):
    """An export as they were before input normalisation: the backbone's function on the raw [0, 1] pixels."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="images")])
    def serve(self, images):
        return {"features": self.backbone(images, training=False)}


def _old_export(path: str):
    backbone = build_backbone("resnet18_cifar", 0.0625, input_mean=(0.0, 0.0, 0.0), input_std=(1.0, 1.0, 1.0))
    module = _Unnormalised(backbone)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return backbone


def test_an_export_without_normalisation_gives_its_own_features(tmp_path):
    backbone = _old_export(str(tmp_path / "old"))
    images = np.random.default_rng(1).uniform(0, 1, (4, 16, 16, 3)).astype(np.float32)
    features = load_model(str(tmp_path / "old"))(tf.constant(images))
    np.testing.assert_allclose(features, backbone(images, training=False).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_an_export_without_normalisation_still_evaluates(tmp_path):
    old = str(tmp_path / "old")
    _old_export(old)
    out = str(tmp_path / "results.json")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "eval_main.py"), f"--saved_model={old}", "--protocol=linear",
         "--dataset=shapes", "--image_size=16", "--max_examples=200", "--linear_regs=3", "--linear_max_iter=100",
         f"--output={out}", "--quiet"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = json.load(open(out))
    assert record["protocol"] == "linear" and 0 <= record["value"] <= 100


def test_a_new_export_normalises_inside_and_takes_unit_range_images(tmp_path):
    mean, std = (0.43, 0.42, 0.39), (0.27, 0.26, 0.27)
    backbone = build_backbone("resnet18_cifar", 0.0625, input_mean=mean, input_std=std)
    identity = build_backbone("resnet18_cifar", 0.0625, input_mean=(0.0, 0.0, 0.0), input_std=(1.0, 1.0, 1.0))
    identity.set_weights(backbone.get_weights())
    images = np.random.default_rng(0).uniform(0, 1, (3, 16, 16, 3)).astype(np.float32)
    served = load_model(export_backbone(backbone, str(tmp_path / "saved_model")))(tf.constant(images))
    normalised = (images - np.array(mean, np.float32)) / np.array(std, np.float32)
    np.testing.assert_allclose(served, identity(normalised, training=False).numpy(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(served, identity(images, training=False).numpy(), atol=1e-3)
