"""TorchSGD against a NumPy transcription of ``torch.optim.SGD.step`` (dampening 0, no Nesterov) over 25 steps
of a cosine schedule: coupled L2, momentum in gradient units, a constant-lr parameter group, float16 loss
scaling. Keras' own SGD fails the same comparison (the test can fail)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from augself_tf.training.optim import build_optimizer, scaled_learning_rate

STEPS, MU, WD, BASE_LR = 25, 0.9, 5e-4, 0.05


def _grad(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """d/dp of ½·pᵀAp + Σp: a gradient that depends on where the trajectory is."""
    return a @ p + 1.0


def torch_sgd_step(p, buf, g, lr, momentum, weight_decay):
    """torch/optim/sgd.py `_single_tensor_sgd`: d_p = g + wd·p; buf = d_p (first step) or μ·buf + d_p; p -= lr·buf."""
    d_p = g + weight_decay * p
    buf = d_p.copy() if buf is None else momentum * buf + d_p
    return p - lr * buf, buf


def _reference(p0: dict, a: np.ndarray, lrs: list[float], constant: set[str]) -> dict:
    params, bufs = {k: v.astype(np.float64) for k, v in p0.items()}, {k: None for k in p0}
    for lr in lrs:
        for k in params:
            step_lr = BASE_LR if k in constant else lr
            params[k], bufs[k] = torch_sgd_step(params[k], bufs[k], _grad(params[k], a), step_lr, MU, WD)
    return params


def _ours(optimizer_fn, p0: dict, a: np.ndarray, constant: set[str], loss_scale: float | None = None) -> dict:
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    optimizer = optimizer_fn([variables[k] for k in sorted(constant)])
    optimizer.build(list(variables.values()))
    for _ in range(STEPS):
        grads = [tf.constant(_grad(v.numpy(), a).astype(np.float32)) for v in variables.values()]
        if loss_scale is not None:  # what `scale_loss` makes of the gradients; apply() unscales them
            grads = [g * float(optimizer.dynamic_scale.numpy()) for g in grads]
        optimizer.apply(grads, list(variables.values()))
    return {k: v.numpy() for k, v in variables.items()}


def _cosine_lrs() -> list[float]:
    schedule = keras.optimizers.schedules.CosineDecay(scaled_learning_rate(BASE_LR, 256), STEPS)
    return [float(schedule(i)) for i in range(STEPS)]


@pytest.mark.parametrize("mixed_precision", [None, "float16"])
def test_matches_torch_sgd_with_coupled_l2_momentum_units_and_a_constant_lr_group(mixed_precision):
    rng = np.random.default_rng(0)
    a = np.diag(rng.uniform(0.5, 2.0, 6)).astype(np.float64)
    p0 = {"w": rng.normal(size=6).astype(np.float32), "predictor": rng.normal(size=6).astype(np.float32)}
    lrs = _cosine_lrs()
    assert lrs[0] > 10 * lrs[-1]  # the schedule moves: momentum semantics matter

    def make(constant_vars):
        return build_optimizer(BASE_LR, 256, STEPS, momentum=MU, weight_decay=WD, mixed_precision=mixed_precision,
                               constant_lr_variables=constant_vars)

    ours = _ours(make, p0, a, {"predictor"}, loss_scale=1.0 if mixed_precision else None)
    ref = _reference(p0, a, lrs, {"predictor"})
    for k in p0:
        np.testing.assert_allclose(ours[k], ref[k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_keras_sgd_fails_the_same_comparison():
    """Keras folds lr into the buffer and decays outside it: under a moving lr it is another optimizer."""
    rng = np.random.default_rng(0)
    a = np.diag(rng.uniform(0.5, 2.0, 6))
    p0 = {"w": rng.normal(size=6).astype(np.float32)}
    schedule = keras.optimizers.schedules.CosineDecay(BASE_LR, STEPS)

    def keras_sgd(constant_vars):
        del constant_vars
        return keras.optimizers.SGD(schedule, momentum=MU, weight_decay=WD)

    ours = _ours(keras_sgd, p0, a, set())
    ref = _reference(p0, a, _cosine_lrs(), set())
    assert np.abs(ours["w"] - ref["w"]).max() > 1e-3


def test_constant_lr_variables_must_be_optimized():
    v, other = keras.Variable(np.zeros(2, np.float32)), keras.Variable(np.zeros(2, np.float32))
    optimizer = build_optimizer(0.1, 256, 10, constant_lr_variables=[other])
    with pytest.raises(ValueError, match="constant-lr variables are not among"):
        optimizer.build([v])


def moco_v3_lr(base: float, step: int, steps_per_epoch: int, warmup_epochs: float, epochs: int) -> float:
    """moco-v3 main_moco.py `adjust_learning_rate`, called with epoch + i / iters_per_epoch."""
    epoch = step / steps_per_epoch
    if epoch < warmup_epochs:
        return base * epoch / warmup_epochs
    return base * 0.5 * (1.0 + np.cos(np.pi * (epoch - warmup_epochs) / (epochs - warmup_epochs)))


def test_warmup_then_cosine_is_moco_v3_per_iteration_schedule():
    steps_per_epoch, epochs, warmup_epochs = 7, 6, 2
    total = steps_per_epoch * epochs
    optimizer = build_optimizer(0.5, 512, total, warmup_steps=warmup_epochs * steps_per_epoch)
    ours = [float(optimizer._learning_rate(i)) for i in range(total)]  # the schedule the optimizer steps on
    ref = [moco_v3_lr(1.0, i, steps_per_epoch, warmup_epochs, epochs) for i in range(total)]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)
    assert ours[0] == 0.0 and max(ours) == pytest.approx(1.0)


def test_excluding_1d_variables_from_decay_matches_torch_param_groups():
    """torch.optim.SGD with two groups, weight_decay on the matrices and 0 on biases/BN (solo-learn, MoCo v3's rule),
    under warm-up: the 1-D variable and the constant-lr predictor follow the reference step for step."""
    rng = np.random.default_rng(1)
    a = np.diag(rng.uniform(0.5, 2.0, 6))
    p0 = {"kernel": rng.normal(size=(2, 3)).astype(np.float32), "bias": rng.normal(size=6).astype(np.float32),
          "predictor": rng.normal(size=(3, 2)).astype(np.float32)}
    warmup = 5
    schedule = [moco_v3_lr(scaled_learning_rate(BASE_LR, 256), i, 1, warmup, STEPS) for i in range(STEPS)]

    def grad(p):
        return (a @ p.reshape(6) + 1.0).reshape(p.shape)

    params = {k: v.astype(np.float64) for k, v in p0.items()}
    bufs = dict.fromkeys(p0)
    for lr in schedule:
        for k in params:
            params[k], bufs[k] = torch_sgd_step(params[k], bufs[k], grad(params[k]),
                                                BASE_LR if k == "predictor" else lr, MU, 0.0 if k == "bias" else WD)
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    optimizer = build_optimizer(BASE_LR, 256, STEPS, momentum=MU, weight_decay=WD, warmup_steps=warmup,
                                decay_exclude="1d", constant_lr_variables=[variables["predictor"]])
    optimizer.build(list(variables.values()))
    for _ in range(STEPS):
        optimizer.apply([tf.constant(grad(v.numpy()).astype(np.float32)) for v in variables.values()],
                        list(variables.values()))
    for k in p0:
        np.testing.assert_allclose(variables[k].numpy(), params[k], rtol=2e-5, atol=1e-6, err_msg=k)
    # The rule matters: decaying the bias too moves it away from the reference.
    decayed = params["bias"].copy()
    p, b = p0["bias"].astype(np.float64), None
    for lr in schedule:
        p, b = torch_sgd_step(p, b, grad(p), lr, MU, WD)
    assert np.abs(p - decayed).max() > 1e-4


def test_bad_decay_rule_and_warmup_longer_than_the_run_are_one_line_errors():
    with pytest.raises(ValueError, match="weight decay exclusion must be one of none, 1d, got 'bn'"):
        build_optimizer(0.1, 256, 10, decay_exclude="bn")
    with pytest.raises(ValueError, match="warm-up must be shorter than the run: 10 warm-up steps of 10"):
        build_optimizer(0.1, 256, 10, warmup_steps=10)
