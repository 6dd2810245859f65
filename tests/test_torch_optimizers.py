"""AdamW and LARS (augself_tf/training/torch_optimizers.py), and SGD under DINO's clipping, step by step against NumPy
transcriptions of `torch.optim.AdamW` (`_single_tensor_adamw`), MoCo v3's `moco/optimizer.py` LARS, `torch.optim.SGD`,
DINO's `clip_gradients` and `cosine_scheduler`, under MoCo v3's warm-up + cosine learning rate; then the same steps
through the float16 loss-scale wrapper on 2 replicas. Keras' own AdamW fails the AdamW comparison (its ε), so the
test can fail."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from augself_tf.training.optim import build_optimizer, scaled_learning_rate

STEPS, WARMUP, BASE_LR, WD, WD_END, CLIP = 20, 4, 0.05, 0.1, 0.4, 0.5


def _a(rng: np.random.Generator) -> np.ndarray:
    return np.diag(rng.uniform(0.5, 2.0, 6))


def _grad(p: np.ndarray, a: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """d/dp of ½·pᵀAp + Σp over the flattened p, times `scale`: a gradient that depends on where the trajectory is."""
    return (scale * (a @ p.reshape(6) + 1.0)).reshape(p.shape)


def _p0(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"kernel": rng.normal(size=(2, 3)).astype(np.float32), "bias": rng.normal(size=6).astype(np.float32)}


def moco_v3_lr(step: int) -> float:
    """main_moco.py adjust_learning_rate per iteration (one step an epoch here), lr scaled by batch/256 = 1."""
    lr = scaled_learning_rate(BASE_LR, 256)
    if step < WARMUP:
        return lr * step / WARMUP
    return lr * 0.5 * (1.0 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP)))


def dino_wd(step: int, end: float | None) -> float:
    """utils.cosine_scheduler(WD, end, epochs, niter_per_ep) without warm-up, at iteration `step`."""
    if end is None:
        return WD
    return end + 0.5 * (WD - end) * (1.0 + math.cos(math.pi * step / STEPS))


def dino_clip(g: np.ndarray, clip: float) -> np.ndarray:
    """utils.clip_gradients for one parameter."""
    coef = clip / (np.linalg.norm(g) + 1e-6)
    return g * coef if coef < 1 else g


def torch_adamw(p, state, g, lr, wd, step, b1=0.9, b2=0.999, eps=1e-8):
    """torch/optim/adamw.py _single_tensor_adamw (amsgrad off, maximize off)."""
    m, v = state if state is not None else (np.zeros_like(p), np.zeros_like(p))
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    denom = np.sqrt(v) / math.sqrt(bc2) + eps
    return p - lr / bc1 * m / denom, (m, v)


def moco_v3_lars(p, mu, g, lr, wd, momentum=0.9, trust=0.001, excluded=None):
    """moco/optimizer.py LARS.step for one parameter; ``excluded`` (default: its own rule, ``p.ndim <= 1``) says
    whether the parameter is left out of decay and the trust ratio."""
    dp = g
    if not (p.ndim <= 1 if excluded is None else excluded):
        dp = dp + wd * p
        param_norm, update_norm = np.linalg.norm(p), np.linalg.norm(dp)
        q = trust * param_norm / update_norm if param_norm > 0 and update_norm > 0 else 1.0
        dp = dp * q
    mu = (np.zeros_like(p) if mu is None else mu) * momentum + dp
    return p - lr * mu, mu


def torch_sgd(p, buf, g, lr, wd, momentum=0.9):
    """torch.optim.SGD.step for one parameter (coupled L2, dampening 0): the buffer starts as the first gradient."""
    g = g + wd * p
    buf = g if buf is None else momentum * buf + g
    return p - lr * buf, buf


def reference(kind: str, p0: dict, a: np.ndarray, *, exclude_1d: bool, wd_end: float | None, clip: float,
              scale: float = 1.0) -> dict:
    params = {k: v.astype(np.float64) for k, v in p0.items()}
    state = dict.fromkeys(p0)
    for step in range(STEPS):
        lr, wd = moco_v3_lr(step), dino_wd(step, wd_end)
        for k in params:
            g = _grad(params[k], a, scale)
            if clip:
                g = dino_clip(g, clip)
            excluded = exclude_1d and params[k].ndim <= 1
            if kind == "adamw":
                params[k], state[k] = torch_adamw(params[k], state[k], g, lr, 0.0 if excluded else wd, step + 1)
            elif kind == "sgd":
                params[k], state[k] = torch_sgd(params[k], state[k], g, lr, 0.0 if excluded else wd)
            else:
                params[k], state[k] = moco_v3_lars(params[k], state[k], g, lr, wd, excluded=excluded)
    return params


def _optimizer(kind: str, *, exclude_1d: bool, wd_end: float | None, clip: float, mixed_precision=None):
    return build_optimizer(BASE_LR, 256, STEPS, optimizer=kind, weight_decay=WD, weight_decay_end=wd_end,
                           clip_grad=clip, warmup_steps=WARMUP, decay_exclude="1d" if exclude_1d else "none",
                           mixed_precision=mixed_precision)


def ours(optimizer, p0: dict, a: np.ndarray, scale: float = 1.0) -> dict:
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    optimizer.build(list(variables.values()))
    for _ in range(STEPS):
        optimizer.apply([tf.constant(_grad(v.numpy(), a, scale).astype(np.float32)) for v in variables.values()],
                        list(variables.values()))
    return {k: v.numpy() for k, v in variables.items()}


@pytest.mark.parametrize("kind", ["adamw", "lars"])
@pytest.mark.parametrize("exclude_1d,wd_end,clip", [(False, None, 0.0), (True, WD_END, CLIP)],
                         ids=["moco_v3", "dino_schedule_and_clip"])
def test_matches_the_torch_optimizer_step_by_step(kind, exclude_1d, wd_end, clip):
    rng = np.random.default_rng(0)
    a, p0 = _a(rng), _p0(rng)
    ref = reference(kind, p0, a, exclude_1d=exclude_1d, wd_end=wd_end, clip=clip)
    got = ours(_optimizer(kind, exclude_1d=exclude_1d, wd_end=wd_end, clip=clip), p0, a)
    for k in p0:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # Each switch matters: the reference without it ends elsewhere.
    other = reference(kind, p0, a, exclude_1d=not exclude_1d, wd_end=None if wd_end else WD_END,
                      clip=0.0 if clip else CLIP)
    assert max(np.abs(other[k] - ref[k]).max() for k in p0) > 1e-4


def test_keras_adamw_fails_the_same_comparison():
    """Keras adds ε to √v before the bias correction: with small gradients (√v near ε) it is another step."""
    rng = np.random.default_rng(0)
    a, p0 = _a(rng), _p0(rng)
    scale = 1e-7
    ref = reference("adamw", p0, a, exclude_1d=False, wd_end=None, clip=0.0, scale=scale)
    np.testing.assert_allclose(ours(_optimizer("adamw", exclude_1d=False, wd_end=None, clip=0.0), p0, a, scale)
                               ["kernel"], ref["kernel"], rtol=1e-5, atol=1e-6)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, STEPS - WARMUP, warmup_target=BASE_LR,
                                                      warmup_steps=WARMUP)
    keras_adamw = keras.optimizers.AdamW(schedule, weight_decay=WD, epsilon=1e-8)
    got = ours(keras_adamw, p0, a, scale)
    assert np.abs(got["kernel"] - ref["kernel"]).max() > 1e-4


@pytest.mark.parametrize("exclude_1d,clip", [(False, 0.0), (True, CLIP)], ids=["paper", "dino_resnet_clip"])
def test_sgd_clips_each_gradient_as_dino_before_its_coupled_decay(exclude_1d, clip):
    """DINO's ResNet recipe runs torch's SGD after ``clip_gradients`` (its default 3.0): the clip sees the gradient
    alone, and torch's SGD adds the decay inside its step."""
    rng = np.random.default_rng(1)
    a, p0 = _a(rng), _p0(rng)
    ref = reference("sgd", p0, a, exclude_1d=exclude_1d, wd_end=None, clip=clip)
    got = ours(_optimizer("sgd", exclude_1d=exclude_1d, wd_end=None, clip=clip), p0, a)
    for k in p0:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    other = reference("sgd", p0, a, exclude_1d=exclude_1d, wd_end=None, clip=0.0 if clip else CLIP)
    assert max(np.abs(other[k] - ref[k]).max() for k in p0) > 1e-4  # the clip changes the run


def test_weight_decay_end_is_refused_with_sgd():
    with pytest.raises(ValueError, match="^--weight_decay_end is for --optimizer=adamw or lars"):
        build_optimizer(0.1, 256, 10, weight_decay_end=0.4)
    with pytest.raises(ValueError, match="^--clip_grad must be >= 0"):
        build_optimizer(0.1, 256, 10, clip_grad=-1.0)
    with pytest.raises(ValueError, match="unknown optimizer 'adam'"):
        build_optimizer(0.1, 256, 10, optimizer="adam")


@pytest.mark.parametrize("kind", ["adamw", "lars", "sgd"])
def test_two_replicas_under_the_float16_loss_scale_wrapper_take_the_reference_steps(kind):
    """Each replica holds half the gradient (their sum the whole), scaled by the loss scale as `scale_loss` makes
    it; after a step with an overflow on replica 1 alone (skipped on both), the run still follows the reference:
    each optimizer clips the whole, unscaled gradient (SGD with its constant decay, as DINO's ResNet recipe)."""
    from conftest import mirrored_cpus

    rng = np.random.default_rng(3)
    a, p0 = _a(rng), _p0(rng)
    wd_end = None if kind == "sgd" else WD_END
    ref = reference(kind, p0, a, exclude_1d=True, wd_end=wd_end, clip=CLIP)
    strategy = mirrored_cpus("one_device")
    with strategy.scope():
        variables = [keras.Variable(p0[k], name=k) for k in p0]
        optimizer = _optimizer(kind, exclude_1d=True, wd_end=wd_end, clip=CLIP, mixed_precision="float16")
        optimizer.build(variables)

    @tf.function
    def step(overflow: tf.Tensor):
        def replica():
            scale = tf.convert_to_tensor(optimizer.dynamic_scale.value)
            grads = []
            for v in variables:
                g = _grad_tf(tf.convert_to_tensor(v.value), a) * 0.5 * scale
                replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
                bad = tf.logical_and(overflow, tf.equal(replica_id, 1))
                grads.append(tf.where(bad, tf.fill(tf.shape(g), np.inf), g))
            optimizer.apply(grads, variables)
        strategy.run(replica)

    step(tf.constant(True))  # skipped everywhere: nothing moves, the scale halves
    for k, v in zip(p0, variables, strict=True):
        np.testing.assert_array_equal(v.numpy(), p0[k])
    for _ in range(STEPS):
        step(tf.constant(False))
    # The skipped step still counts in the schedule's step (as TorchSGD under the wrapper): compare from step 1.
    shifted = reference_shifted(kind, p0, a, wd_end)
    for k, v in zip(p0, variables, strict=True):
        for value in [np.asarray(x) for x in v.value.values]:
            np.testing.assert_allclose(value, shifted[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert not all(np.allclose(shifted[k], ref[k]) for k in p0)  # the shift is visible: the comparison is exact


def _grad_tf(p: tf.Tensor, a: np.ndarray) -> tf.Tensor:
    flat = tf.reshape(p, [6])
    return tf.reshape(tf.linalg.matvec(tf.constant(a, tf.float32), flat) + 1.0, tf.shape(p))


def reference_shifted(kind: str, p0: dict, a: np.ndarray, wd_end: float | None) -> dict:
    """The reference run of `STEPS` steps whose schedules start one step late (a skipped step counts in
    `iterations`, so lr and wd see steps 1..STEPS), AdamW's bias correction counting the applied steps 1..STEPS
    (torch's GradScaler skips ``optimizer.step()``, so its ``step`` does not count the skipped one)."""
    params = {k: v.astype(np.float64) for k, v in p0.items()}
    state = dict.fromkeys(p0)
    for step in range(1, STEPS + 1):
        lr = moco_v3_lr(step)
        wd = dino_wd(step, wd_end)
        for k in params:
            g = dino_clip(_grad(params[k], a), CLIP)
            if kind == "adamw":
                params[k], state[k] = torch_adamw(params[k], state[k], g, lr, 0.0 if params[k].ndim <= 1 else wd,
                                                  step)
            elif kind == "sgd":
                params[k], state[k] = torch_sgd(params[k], state[k], g, lr, 0.0 if params[k].ndim <= 1 else wd)
            else:
                params[k], state[k] = moco_v3_lars(params[k], state[k], g, lr, wd)
    return params


def test_max_steps_keeps_the_warmups_share_of_the_run():
    """A run cut by --max_steps compresses its warm-up with its cosine: 2 of 10 epochs (20 of 100 steps) become 4
    of the 20 steps run, where the uncut warm-up would outlast the run (a smoke run of a ViT flagfile)."""
    from helpers import tiny_run

    from augself_tf.methods.augself_model import PretrainData
    from augself_tf.training.loop import build_model

    cfg = tiny_run("unused", warmup_epochs=2, epochs=10, max_steps=20, optimizer="adamw")
    data = PretrainData("shapes", 160, 0, cfg.batch_size, total_steps=20, steps_per_epoch=10)
    model = build_model(cfg, tf.distribute.get_strategy(), data)
    lrs = [float(model.optimizer._learning_rate(i)) for i in range(20)]
    peak = scaled_learning_rate(cfg.lr, cfg.batch_size)
    np.testing.assert_allclose(lrs[:5], [peak * i / 4 for i in range(5)], rtol=1e-6)
    assert lrs[5] < peak and type(model.optimizer).__name__ == "TorchAdamW"


# ------------------------------------------------------------------------ variables held out of the update
HELD = 5


def reference_held(kind: str, p0: dict, a: np.ndarray) -> dict:
    """``kernel`` has no gradient for the first HELD steps (DINO's cancel_gradients_last_layer): torch skips it, so
    it neither decays nor moves its state, and AdamW counts its own steps from its first update."""
    params = {k: v.astype(np.float64) for k, v in p0.items()}
    state = dict.fromkeys(p0)
    taken = dict.fromkeys(p0, 0)
    for step in range(STEPS):
        lr = moco_v3_lr(step)
        for k in params:
            if k == "kernel" and step < HELD:
                continue
            taken[k] += 1
            g = _grad(params[k], a)
            if kind == "adamw":
                params[k], state[k] = torch_adamw(params[k], state[k], g, lr, dino_wd(step, WD_END), taken[k])
            elif kind == "lars":
                params[k], state[k] = moco_v3_lars(params[k], state[k], g, lr, WD)
            else:
                params[k], state[k] = torch_sgd(params[k], state[k], g, lr, WD)
    return params


@pytest.mark.parametrize("kind", ["adamw", "lars", "sgd"])
def test_held_variables_are_left_out_of_the_update_as_torch_skips_a_parameter_without_gradient(kind):
    rng = np.random.default_rng(2)
    a, p0 = _a(rng), _p0(rng)
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    extra = {"weight_decay_end": WD_END} if kind == "adamw" else {}
    optimizer = build_optimizer(BASE_LR, 256, STEPS, optimizer=kind, weight_decay=WD, warmup_steps=WARMUP,
                                held_variables=[variables["kernel"]], held_steps=HELD, **extra)
    optimizer.build(list(variables.values()))
    for step in range(STEPS):
        optimizer.apply([tf.constant(_grad(v.numpy(), a).astype(np.float32)) for v in variables.values()],
                        list(variables.values()))
        if step < HELD:  # neither decayed nor moved, its state untouched
            np.testing.assert_array_equal(variables["kernel"].numpy(), p0["kernel"])
    ref = reference_held(kind, p0, a)
    for k in p0:
        np.testing.assert_allclose(variables[k].numpy(), ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    if kind == "adamw":  # AdamW's own step count matters: the global count gives another kernel
        other = {k: v.astype(np.float64) for k, v in p0.items()}
        state = None
        for step in range(HELD, STEPS):
            other["kernel"], state = torch_adamw(other["kernel"], state, _grad(other["kernel"], a), moco_v3_lr(step),
                                                 dino_wd(step, WD_END), step + 1)
        assert np.abs(other["kernel"] - ref["kernel"]).max() > 1e-4


def test_held_variables_must_be_optimized():
    inside, outside = keras.Variable(np.ones(3, np.float32)), keras.Variable(np.ones(3, np.float32))
    optimizer = build_optimizer(BASE_LR, 256, STEPS, optimizer="adamw", held_variables=[outside], held_steps=2)
    with pytest.raises(ValueError, match="^1 held variables are not among the optimized variables$"):
        optimizer.build([inside])


# ------------------------------------------------------------------------ LARS and --weight_decay_exclude
@pytest.mark.parametrize("exclude", ["none", "1d", "auto"])
def test_lars_leaves_the_excluded_variables_out_of_decay_and_the_trust_ratio(exclude):
    """One step against moco/optimizer.py's LARS with the exclusion the flag names (MoCo v3's own: ndim <= 1):
    an excluded variable takes g alone, every other g + wd·θ scaled by the trust ratio. ``auto`` is LARS's own
    rule, ``1d``, what LARS did before it read the flag."""
    rng = np.random.default_rng(5)
    a, p0 = _a(rng), _p0(rng)
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    optimizer = build_optimizer(BASE_LR, 256, STEPS, optimizer="lars", weight_decay=WD, decay_exclude=exclude)
    optimizer.build(list(variables.values()))
    grads = {k: _grad(v, a) for k, v in p0.items()}
    optimizer.apply([tf.constant(grads[k].astype(np.float32)) for k in p0], list(variables.values()))
    lr = scaled_learning_rate(BASE_LR, 256)  # no warm-up here: step 0 of the cosine is its peak
    for k in p0:
        excluded = exclude != "none" and p0[k].ndim <= 1
        want, _ = moco_v3_lars(p0[k].astype(np.float64), None, grads[k], lr, WD, excluded=excluded)
        np.testing.assert_allclose(variables[k].numpy(), want, rtol=1e-5, atol=1e-7, err_msg=k)
    # The flag matters: the bias's step with and without decay and the ratio differ by far more than the tolerance.
    decayed, _ = moco_v3_lars(p0["bias"].astype(np.float64), None, grads["bias"], lr, WD, excluded=False)
    plain, _ = moco_v3_lars(p0["bias"].astype(np.float64), None, grads["bias"], lr, WD, excluded=True)
    assert np.abs(decayed - plain).max() > 1e-2


# ------------------------------------------------------------------------ AdamW's step count under loss scaling
SKIPPED = (3, 9)  # one step while the kernel is held (HELD = 5), one after


def reference_skipped(p0: dict, a: np.ndarray, *, count_skipped: bool = False) -> dict:
    """torch's AdamW under GradScaler over `STEPS` iterations of which `SKIPPED` had a non-finite gradient: the
    scheduler steps every iteration (lr and wd by the iteration), ``optimizer.step()`` is skipped on those, so a
    parameter's ``step`` counts its applied updates only (``kernel``'s from the end of its hold, DINO's
    cancel_gradients_last_layer). ``count_skipped``: the bias correction counting every iteration instead."""
    params = {k: v.astype(np.float64) for k, v in p0.items()}
    state = dict.fromkeys(p0)
    taken = dict.fromkeys(p0, 0)
    for step in range(STEPS):
        if step in SKIPPED:
            continue
        for k in params:
            if k == "kernel" and step < HELD:
                continue
            taken[k] += 1
            t = step + 1 - (HELD if k == "kernel" else 0) if count_skipped else taken[k]
            params[k], state[k] = torch_adamw(params[k], state[k], _grad(params[k], a), moco_v3_lr(step),
                                              dino_wd(step, WD_END), t)
    return params


def test_adamw_bias_correction_counts_the_applied_steps_not_the_skipped_ones():
    """Under the float16 loss-scale wrapper a step with a non-finite gradient is skipped: the schedules still
    move on (iterations), AdamW's t does not, as torch's with GradScaler, for a held variable too; the count is
    optimizer state a checkpoint holds."""
    rng = np.random.default_rng(4)
    a, p0 = _a(rng), _p0(rng)
    variables = {k: keras.Variable(v, name=k) for k, v in p0.items()}
    optimizer = build_optimizer(BASE_LR, 256, STEPS, optimizer="adamw", weight_decay=WD, weight_decay_end=WD_END,
                                warmup_steps=WARMUP, mixed_precision="float16", held_variables=[variables["kernel"]],
                                held_steps=HELD)
    optimizer.build(list(variables.values()))
    for step in range(STEPS):
        scale = float(optimizer.dynamic_scale.numpy())
        grads = [_grad(v.numpy(), a) * scale for v in variables.values()]
        if step in SKIPPED:
            grads[1] = grads[1] * np.inf
        optimizer.apply([tf.constant(g.astype(np.float32)) for g in grads], list(variables.values()))
    inner = optimizer.inner_optimizer
    assert int(inner.iterations.numpy()) == STEPS
    assert int(inner.applied_steps.numpy()) == STEPS - len(SKIPPED)
    assert int(inner.held_applied_steps.numpy()) == HELD - 1  # steps 0..4 of which 3 was skipped
    ref = reference_skipped(p0, a)
    for k in p0:
        np.testing.assert_allclose(variables[k].numpy(), ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # The count matters: a bias correction counting the skipped steps ends elsewhere.
    other = reference_skipped(p0, a, count_skipped=True)
    assert max(np.abs(other[k] - ref[k]).max() for k in p0) > 1e-4
    # Optimizer variables, so the run's checkpoint (`training_state`: optimizer/<path>) holds them.
    paths = {v.path for v in optimizer.variables}
    assert {"torch_adamw/applied_steps", "torch_adamw/held_applied_steps"} <= paths


def test_the_run_description_names_the_clip_with_every_optimizer():
    """The paragraph printed before a run says when gradients are clipped, under SGD too (DINO's ResNet recipe)."""
    from helpers import tiny_run

    from augself_tf.training.summaries import describe_run

    for optimizer in ("sgd", "adamw"):
        text = describe_run(tiny_run("unused", optimizer=optimizer, clip_grad=3.0, photometric="host"), 1, 160, 10, 20)
        assert "gradients clipped at 3.0 per variable" in text, optimizer
    assert "clipped" not in describe_run(tiny_run("unused", photometric="host"), 1, 160, 10, 20)
