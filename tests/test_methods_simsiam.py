"""SimSiam (augself_tf/methods/simsiam.py): its loss against an independent NumPy computation."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import make_model

B = 6


def test_simsiam_loss_matches_numpy():
    model = make_model("simsiam", augself=(), resnet=True, image_size=16, projector_dim=32, predictor_hidden=8)
    rng = np.random.default_rng(0)
    f1 = tf.constant(rng.normal(size=[B, model.feature_dim]).astype("float32"))
    f2 = tf.constant(rng.normal(size=[B, model.feature_dim]).astype("float32"))
    loss, _ = model.method_loss(f1, f2, {}, training=False)
    z1, z2 = model.projector(f1, training=False).numpy(), model.projector(f2, training=False).numpy()
    p1, p2 = model.predictor(z1, training=False).numpy(), model.predictor(z2, training=False).numpy()

    def cos(a, b):
        return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    want = -0.5 * (cos(p1, z2).mean() + cos(p2, z1).mean())
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
