"""mixed_bfloat16 on CPU trains every method (no loss scaling needed), with the AugSelf heads and every loss in
float32; the same step in float32 gives nearly the same losses."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from conftest import each_method
from helpers import batch, compile_model, eager_steps, make_model, run_steps

from augself_tf.methods import METHODS


@pytest.fixture
def bfloat16_policy():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("method", each_method(sorted(METHODS)))
def test_every_method_trains_in_bfloat16_with_float32_heads(method, bfloat16_policy):
    options = {"num_classes": 3} if METHODS[method].needs_labels else {}
    model = make_model(method, augself=("crop", "color"), **options)
    compile_model(model)
    assert model.backbone.compute_dtype == "bfloat16"
    for head in model.augself_heads.values():
        assert {layer.compute_dtype for layer in head.layers} == {"float32"}
    views = METHODS[method].view_plan({}).num_views  # LooC reads a key view per left-out augmentation
    logs = run_steps(model, [batch(0, views=views), batch(1, views=views)])
    assert all(np.isfinite(v) for step in logs for v in step.values()), logs
    assert all(v.dtype == "float32" for v in model.optimized_variables())


def test_bfloat16_losses_follow_float32():
    """The first step's losses from the same weights and batch, in both policies: within bfloat16's precision
    (8 mantissa bits: ~4e-3 relative per element, so 1e-2 absolute on a cosine that sums them)."""
    losses = {}
    for policy in ("float32", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        try:
            model = make_model("simsiam", augself=("crop", "color"))
            compile_model(model)
            # Untraced: the arithmetic is compared (the bfloat16 step's trace is the test above's).
            losses[policy] = eager_steps(model, [batch(0)])[0]
        finally:
            keras.mixed_precision.set_global_policy("float32")
    for key in ("loss/method", "augself/crop_loss", "augself/color_loss"):
        a, b = losses["float32"][key], losses["mixed_bfloat16"][key]
        assert abs(a - b) <= 0.05 * abs(a) + 1e-2, (key, a, b)
