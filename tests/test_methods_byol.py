"""BYOL (augself_tf/methods/byol.py): its loss against NumPy and the cosine τ schedule of its target."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, compile_model, make_model, unit

from augself_tf.methods.byol import cosine_tau


def test_byol_loss_matches_numpy():
    model = make_model("byol", augself=())
    b = batch(3)
    f1 = model.backbone(b["view1"], training=False)
    f2 = model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    p1 = model.predictor(model.projector(f1, training=False), training=False).numpy()
    p2 = model.predictor(model.projector(f2, training=False), training=False).numpy()
    target = model.target_encoder
    t1 = target.projector(target.backbone(b["view1"], training=False), training=False).numpy()
    t2 = target.projector(target.backbone(b["view2"], training=False), training=False).numpy()
    want = np.mean(2 - 2 * np.sum(unit(p1) * unit(t2), 1)) + np.mean(2 - 2 * np.sum(unit(p2) * unit(t1), 1))
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)


def test_byol_tau_schedule_endpoints():
    assert float(cosine_tau(0, 100, 0.996)) == pytest.approx(0.996)
    assert float(cosine_tau(50, 100, 0.996)) == pytest.approx(0.998)
    assert float(cosine_tau(100, 100, 0.996)) == pytest.approx(1.0)


def test_byol_target_follows_the_ema_rule_at_start_middle_and_end():
    total = 4
    model = make_model("byol", augself=("crop",), total_steps=total)
    compile_model(model, lr=0.1, total_steps=total)
    step = tf.function(model.train_step)
    online = model.backbone.trainable_weights + model.projector.trainable_weights
    target = model.target_encoder.backbone.trainable_weights + model.target_encoder.projector.trainable_weights
    for k in range(total):
        before = [t.numpy() for t in target]
        logs = step(batch(k))
        tau = 1 - (1 - 0.996) * (math.cos(math.pi * k / total) + 1) / 2
        assert float(logs["byol/tau"]) == pytest.approx(tau, abs=1e-7)
        moved = 0.0
        for o, t, old in zip(online, target, before, strict=True):
            np.testing.assert_allclose(t.numpy(), tau * old + (1 - tau) * o.numpy(), rtol=1e-5, atol=1e-7)
            moved = max(moved, float(np.abs(o.numpy() - old).max()))
        assert moved > 0  # online and target differ, so the rule is really exercised
        if k in (0, total // 2, total - 1):
            assert tau == pytest.approx({0: 0.996, total // 2: 0.998, total - 1: 1 - 0.002 * (1 - 2 ** -0.5)}[k])
