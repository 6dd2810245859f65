"""Supervised pretraining (augself_tf/methods/supervised.py): cross-entropy against NumPy, unlabelled
examples left out, and the num_classes it needs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import batch, make_model, np_log_softmax, tiny_backbone

from augself_tf.methods import build_method


def test_supervised_loss_matches_numpy_and_ignores_unlabeled():
    model = make_model("supervised", augself=())
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
