"""EquiMod (augself_tf/objectives/equimod.py): its loss against NumPy, its x0 view, replicas, export and resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    assert_export_is_the_backbone,
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    make_model,
    np_log_softmax,
    one_device_and_two_replicas,
    run_steps,
    tiny_backbone,
    tiny_run,
    unit,
)
from kill_resume import assert_bit_identical, kill_9_then_resume

from augself_tf.augment import AugmentConfig, finish_views
from augself_tf.augment.views import TWO_VIEWS, ViewPlan, ViewSpec
from augself_tf.data.eval_view import preprocess
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.methods import build_method, view_plan
from augself_tf.objectives import OBJECTIVES
from augself_tf.objectives.conditioning import Conditioning
from augself_tf.objectives.equimod import EquiMod

SMALL_EQ = {"equimod_weight": 0.5, "equimod_hidden": 12, "equimod_dim": 8}
EPS = 1e-5  # the heads' BN epsilon (PyTorch's)


def eq_batch(seed: int, n: int = 8) -> dict:
    """helpers.batch with x0 as view3 and the ω entries EquiMod reads (grayscale; some views not jittered)."""
    b = batch(seed, n=n, views=3)
    rng = np.random.default_rng(seed + 100)
    for k in ("omega1", "omega2"):
        b[k]["grayscale"] = (rng.uniform(size=[n, 1]) < 0.3).astype("float32")
        b[k]["color"][: n // 3] = 0.5  # jitter not applied: the identity's encoding
        b[k]["blur"][: n // 2] = 0.0  # blur not applied
        b[k]["solarize"][n // 2:] = 1.0  # solarize not applied
    return b


# --------------------------------------------------------------------------------------- NumPy reference


def np_parameters(omega: dict) -> np.ndarray:
    """The reference's parameter vector in our ω's terms (docs/experiments.md, "EquiMod"), written independently."""
    color = omega["color"].astype("float64")
    jitter = np.any(color != 0.5, axis=1, keepdims=True).astype("float64")
    rotation = np.eye(4)[omega["rotation"][:, 0].astype(int)]
    blur, sol = omega["blur"].astype("float64"), omega["solarize"].astype("float64")
    return np.concatenate([omega["crop"], omega["flip"], jitter, color, omega["grayscale"], (blur > 0), blur,
                           (sol < 1), sol, rotation], axis=1).astype("float64")


def np_bn(x: np.ndarray, gamma=None, beta=None) -> np.ndarray:
    """Training-mode batch norm: the batch's mean and biased variance."""
    y = (x - x.mean(0)) / np.sqrt(x.var(0) + EPS)
    return y if gamma is None else y * gamma + beta


def np_stack(head, x: np.ndarray, relu_after: int) -> np.ndarray:
    """A Linear–BN(–ReLU) stack from its layers' weights: Linear (no bias), BN (γ, β when it has them)."""
    layers = [layer for layer in head.layers if layer.weights]
    for i in range(0, len(layers), 2):
        fc, bn = layers[i], layers[i + 1]
        x = x @ fc.kernel.numpy().astype("float64")
        affine = [w.numpy().astype("float64") for w in (bn.gamma, bn.beta)] if bn.scale else [None, None]
        x = np_bn(x, *affine)
        if i // 2 < relu_after:
            x = np.maximum(x, 0.0)
    return x


def np_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    """The reference's NTXentLoss on cat([z1, z2]): positives i ↔ i + n, self excluded, mean over 2n anchors."""
    z = unit(np.concatenate([z1, z2]))
    n = len(z1)
    sim = z @ z.T / t
    np.fill_diagonal(sim, -np.inf)
    pos = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return float(np.mean(-np_log_softmax(sim)[np.arange(2 * n), pos]))


def np_equimod_loss(model, b: dict) -> float:
    """The reference's forward pass (src/model.py, src/main.py) on our batch, from the heads' weights."""
    eq = model.objectives["equimod"]
    f = [model.backbone(b[f"view{k}"], training=True).numpy().astype("float64") for k in (3, 1, 2)]
    n = len(f[0])
    y = np_stack(eq.heads["projector"], np.concatenate(f), relu_after=2)
    y0, yt = y[:n], y[n:]
    p = np.concatenate([np_parameters(b["omega1"]), np_parameters(b["omega2"])])
    t = np_stack(eq.heads["omega"], p, relu_after=0)
    predicted = np_stack(eq.heads["predictor"], np.concatenate([np.concatenate([y0, y0]), t], 1), relu_after=0)
    return np_nt_xent(yt, predicted, 0.2)


def test_the_loss_is_the_references_forward_pass_in_numpy():
    model = make_model("simclr", **SMALL_EQ)
    eq = model.objectives["equimod"]
    assert eq.view_index(model) == 2 and eq.weight == 0.5 and eq.temperature == 0.2
    b = eq_batch(0)
    total, logs, _ = model.compute_losses(b, training=True)
    want = np_equimod_loss(model, b)
    np.testing.assert_allclose(float(logs["equimod/loss"]), want, rtol=1e-4)
    np.testing.assert_allclose(float(total), float(logs["loss/method"]) + float(logs["loss/augself"]) + 0.5 * want,
                               rtol=1e-4)
    # x0 is read from its own view: another x0 changes the loss
    other = dict(b, view3=b["view3"][::-1].copy())
    assert abs(float(model.compute_losses(other, training=True).logs["equimod/loss"]) - want) > 1e-3


def test_the_negatives_control_is_the_nt_xent_of_the_two_views_heads_alone():
    """--equimod_control=negatives: no x0 view, no ω heads; its loss is NT-Xent(g(h1), g(h2)) in NumPy."""
    options = {**SMALL_EQ, "equimod_control": "negatives"}
    assert view_plan("simsiam", {}, options) == TWO_VIEWS
    model = make_model("simsiam", **options)
    eq = model.objectives["equimod"]
    assert set(eq.heads) == {"projector"}
    b = batch(1, n=8)
    logs = model.compute_losses(b, training=True).logs
    f = [model.backbone(b[f"view{k}"], training=True).numpy().astype("float64") for k in (1, 2)]
    y = np_stack(eq.heads["projector"], np.concatenate(f), relu_after=2)
    np.testing.assert_allclose(float(logs["equimod/loss"]), np_nt_xent(y[:8], y[8:], 0.2), rtol=1e-4)


def test_the_shuffled_omega_control_feeds_each_view_the_next_images_omega():
    """--equimod_control=shuffled_omega: the reference's forward pass with ω rolled by one over the batch."""
    model = make_model("simclr", **SMALL_EQ, equimod_control="shuffled_omega")
    b = eq_batch(2)
    got = float(model.compute_losses(b, training=True).logs["equimod/loss"])
    rolled = dict(b, **{k: {name: np.roll(v, 1, axis=0) for name, v in b[k].items()} for k in ("omega1", "omega2")})
    np.testing.assert_allclose(got, np_equimod_loss(model, rolled), rtol=1e-4)
    assert abs(got - np_equimod_loss(model, b)) > 1e-4  # the true ω gives another loss: the roll is what it reads


def test_the_heads_have_the_references_shapes_and_affine_flags():
    model = make_model("byol", augself=(), equimod_weight=1.0)  # the paper's sizes on the 6-d tiny backbone
    heads = model.objectives["equimod"].heads
    kernels = {name: [w.shape for w in head.weights if w.path.endswith("kernel")] for name, head in heads.items()}
    assert kernels == {"projector": [(6, 2048), (2048, 2048), (2048, 128)], "omega": [(19, 128)],
                       "predictor": [(256, 128)]}
    last_bn = {name: [layer for layer in head.layers if layer.weights][-1] for name, head in heads.items()}
    assert {name: (bn.center, bn.scale) for name, bn in last_bn.items()} == {
        "projector": (False, False), "omega": (True, True), "predictor": (False, False)}


def test_it_trains_and_composes_with_augself_and_a_conditioned_projector():
    model = build_method("simsiam", tiny_backbone(), options={"projector_dim": 8, "predictor_hidden": 6},
                         objective_options=SMALL_EQ, augself=("crop", "color"),
                         conditioning=Conditioning.create(("crop", "color"), 8, 2))
    model.build_all(8)
    compile_model(model)
    logs = run_steps(model, [eq_batch(1), eq_batch(2)])
    assert all(math.isfinite(v) for log in logs for v in log.values())
    assert {"equimod/loss", "equimod/gain", "loss/augself"} <= set(logs[0])
    assert logs[1]["equimod/loss"] != logs[0]["equimod/loss"]


def test_two_replicas_equal_one_device():
    b = eq_batch(3)
    # One AugSelf head: a second is the same MLP through the same code, reduced the same way (EquiMod with two
    # heads: the one-device test above).
    single, double, one, two = one_device_and_two_replicas(
        lambda: make_model("simclr", augself=("crop",), sync=True, **SMALL_EQ), b)
    np.testing.assert_allclose(two["equimod/loss"], one["equimod/loss"], rtol=1e-5)
    assert_replicas_equal_one_device(single, double, one, two)


# ---------------------------------------------------------------------------------------------- the x0 view


def _indexed_source(n: int = 12, shape=(20, 30)) -> tuple[dict, callable, np.ndarray]:
    """Non-square images whose label is their row, so each example's source image can be found."""
    images = np.random.default_rng(7).integers(0, 256, [n, *shape, 3]).astype("uint8")
    records = {"image": images, "index": np.arange(n, dtype="int64")}
    return (records, lambda r: {"image": r["image"], "label": r["index"]}), images


def _first_batch(plan: ViewPlan, photometric: str, config: AugmentConfig) -> dict:
    source, _ = _indexed_source()
    ds = make_pair_dataset(source, config, seed=5, batch_size=6, photometric=photometric, views=plan)
    return tf.nest.map_structure(lambda t: t.numpy(), next(iter(ds)))


def test_x0_is_the_evaluation_view_with_the_identity_omega_in_both_modes():
    plan = view_plan("simclr", {}, {"equimod_weight": 1.0})
    assert plan.views[2] == ViewSpec(eval_view=True) and plan.num_views == 3
    config = AugmentConfig(image_size=16)
    _, images = _indexed_source()
    host, device = _first_batch(plan, "host", config), _first_batch(plan, "device", config)
    for b in (host, device):
        assert b["view3"].dtype == np.float32 and "device3" not in b
        for k, i in enumerate(b["label"]):
            np.testing.assert_array_equal(b["view3"][k], preprocess(images[i], 16).numpy())
        o = b["omega3"]
        np.testing.assert_allclose(o["crop"], np.tile([0.5, 0.5, 1.0, 20 / 30], [6, 1]), atol=1e-7)
        for name, value in {"flip": 0, "color": 0.5, "color_diff": 0, "solarize": 1, "grayscale": 0, "blur": 0,
                            "rotation": 0}.items():
            np.testing.assert_array_equal(o[name], np.full_like(o[name], value), err_msg=name)
    finished = tf.nest.map_structure(np.asarray, finish_views(device, config))
    np.testing.assert_array_equal(finished["view3"], host["view3"])
    assert finished["omega3"].keys() == host["omega3"].keys() == finished["omega1"].keys()
    # views 1 and 2 are the two-view pair, x0 or not
    pair = _first_batch(TWO_VIEWS, "host", config)
    for key in ("view1", "view2", "label"):
        np.testing.assert_array_equal(host[key], pair[key])


def test_a_plan_refuses_to_copy_into_or_from_the_evaluation_view():
    with pytest.raises(ValueError, match=r"^view 3 is the evaluation view: it draws nothing, so it can copy nothing$"):
        ViewPlan((ViewSpec(), ViewSpec(), ViewSpec((("crop", 0),), eval_view=True)))
    with pytest.raises(ValueError, match=r"^view 3 cannot copy 'crop' from view 1, the evaluation view"):
        ViewPlan((ViewSpec(eval_view=True), ViewSpec(), ViewSpec((("crop", 0),))))


# ----------------------------------------------------------------------------------------- what it refuses


@pytest.mark.parametrize("method", ["moco", "looc"])
def test_a_method_whose_view_2_is_the_key_encoders_is_refused_in_one_line(method):
    with pytest.raises(ValueError, match=rf"^--equimod_weight does not compose with --method={method}; it composes "
                                         r"with none, simclr, byol, simsiam, swav, supervised, mocov3$"):
        build_method(method, tiny_backbone(), objective_options={"equimod_weight": 1.0})


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("equimod_temperature", 0.0, r"^--equimod_temperature must be > 0, got 0.0$"),
    ("equimod_dim", 0, r"^--equimod_dim must be a positive integer, got 0$"),
    ("equimod_weight", -1.0, r"^--equimod_weight must be a finite number >= 0 \(0 = off\), got -1.0$"),
])
def test_bad_options_are_one_line_naming_the_flag(flag, value, message):
    with pytest.raises(ValueError, match=message):
        build_method("simclr", tiny_backbone(), objective_options={"equimod_weight": 1.0, flag: value})


def test_it_is_registered_and_off_by_default():
    assert OBJECTIVES["equimod"] is EquiMod
    assert view_plan("simclr", {}).num_views == 2 and view_plan("simclr", {}, {"equimod_weight": 0.0}).num_views == 2
    assert "equimod" not in make_model("simclr").objectives


# --------------------------------------------------------------------------------- the whole program


@pytest.mark.slow
def test_a_two_replica_run_exports_the_backbone_alone(tmp_path):
    from augself_tf.training.loop import train

    cfg = tiny_run(str(tmp_path / "run"), method="simclr", cpu_replicas=2, max_steps=2, export=True,
                   method_options={"projector_dim": 16},
                   objective_options={"equimod_weight": 1.0, "equimod_hidden": 32, "equimod_dim": 16})
    result = train(cfg)
    assert result.steps == 2 and all(np.isfinite(v) for v in result.last_logs.values())
    assert "equimod/loss" in result.last_logs
    assert_export_is_the_backbone(result)


EQUIMOD_RUN = ("--method=simclr", "--equimod_weight=1", "--equimod_hidden=32", "--equimod_dim=16",
               "--augself=crop,color", "--dataset=shapes", "--split=test", "--width=0.0625", "--image_size=16",
               "--batch_size=16", "--max_steps=5", "--checkpoint_every=1", "--log_every=1", "--projector_dim=16",
               "--noexport", "--photometric=device", "--monitor=none")


@pytest.mark.slow
def test_kill_9_then_the_same_command_ends_bit_identical(tmp_path):
    """Two replicas, --deterministic, device mode (x0 rides as float32 beside uint8 views): SIGKILL after step 2's
    checkpoint, rerun the command, compare every checkpointed tensor."""
    a, b = kill_9_then_resume(tmp_path, EQUIMOD_RUN, kill_after=2, steps=5)
    assert any("equimod_predictor" in k for k in a)
    assert_bit_identical(a, b)
