"""E-SSL (``--essl_weight``, augself_tf/objectives/essl.py): the 4-way rotation loss on an extra small crop, against
NumPy; its view from the input pipeline (own size and crop range, host = device, two-view batches unchanged);
2 replicas = 1 device; the export; exact resume after kill -9; bad options in one line."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    SMALL,
    assert_export_is_the_backbone,
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    make_model,
    one_device_and_two_replicas,
    run_steps,
    tiny_backbone,
    tiny_run,
)
from kill_resume import assert_bit_identical, kill_9_then_resume

from augself_tf.augment import AugmentConfig, ViewPlan, ViewSpec, finish_views
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.shapes import IMAGE_SIZE as SHAPES_SIZE
from augself_tf.data.sources import load_source
from augself_tf.methods import METHODS, build_method, view_plan
from augself_tf.models.torch_init import Linear
from augself_tf.objectives import OBJECTIVES
from augself_tf.objectives.conditioning import Conditioning
from augself_tf.objectives.essl import ESSL
from augself_tf.training.checkpoints import saved_name
from augself_tf.training.loop import train

HEAD = {"essl_hidden": 10, "essl_bottleneck": 5}


def np_head(f: np.ndarray, head: keras.Sequential) -> np.ndarray:
    """The rotation head in NumPy, from its layers' weights: Linear, LayerNorm (biased variance), ReLU."""
    x = f.astype(np.float64)
    for layer in head.layers:
        if isinstance(layer, Linear):
            x = x @ layer.kernel.numpy().astype(np.float64) + layer.bias.numpy().astype(np.float64)
        elif isinstance(layer, keras.layers.LayerNormalization):
            mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
            x = (x - mean) / np.sqrt(var + layer.epsilon) * layer.gamma.numpy() + layer.beta.numpy()
        else:
            assert isinstance(layer, keras.layers.ReLU), layer
            x = np.maximum(x, 0.0)
    return x


def np_essl(model, images: np.ndarray, k0: np.ndarray, training: bool) -> tuple[float, float]:
    """(loss, accuracy): each crop rotated counter-clockwise by r = 0..3 (np.rot90), class (k0 + r) mod 4, the
    backbone on the 4B images as one batch, the head in NumPy, mean cross-entropy."""
    rotated = np.concatenate([np.stack([np.rot90(im, r, axes=(0, 1)) for im in images]) for r in range(4)])
    labels = np.concatenate([(k0 + r) % 4 for r in range(4)])
    f = model.backbone(rotated, training=training).numpy()
    logits = np_head(f, model.objectives["essl"].head)
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean()), float((logits.argmax(-1) == labels).mean())


def randomize_layer_norms(model, seed: int = 0) -> None:
    """γ and β away from (1, 0), so that the test sees them used."""
    rng = np.random.default_rng(seed)
    for layer in model.objectives["essl"].head.layers:
        if isinstance(layer, keras.layers.LayerNormalization):
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape).astype("float32"))
            layer.beta.assign(rng.uniform(-0.5, 0.5, layer.beta.shape).astype("float32"))


def essl_batch(seed: int, n: int = 6, views: int = 3, crop: int = 12) -> dict:
    """A batch of ``views`` views at 8 px whose last view, E-SSL's, is a ``crop``-pixel crop."""
    b = batch(seed, n, views=views)
    b[f"view{views}"] = np.random.default_rng(seed + 100).uniform(0, 1, [n, crop, crop, 3]).astype("float32")
    return b


def k0_of(b: dict, j: int) -> np.ndarray:
    return np.round(b[f"omega{j}"]["rotation"][:, 0]).astype(int)


# ------------------------------------------------------------------------------------------- the loss


@pytest.mark.parametrize("training", [False, True])
def test_the_loss_is_the_rotation_cross_entropy_of_numpy(training):
    model = make_model("simclr", augself=("crop",), essl_weight=0.4, **HEAD)
    randomize_layer_norms(model)
    b = essl_batch(0)
    assert (b["omega3"]["rotation"] > 0).any()  # views that carry a rotation of their own: relabelled
    total, logs, _ = model.compute_losses(b, training=training)
    want, accuracy = np_essl(model, b["view3"], k0_of(b, 3), training)
    np.testing.assert_allclose(float(logs["essl/loss"]), want, rtol=1e-4)
    np.testing.assert_allclose(float(logs["essl/accuracy"]), accuracy)
    np.testing.assert_allclose(float(total), float(logs["loss/method"]) + float(logs["loss/augself"]) + 0.4 * want,
                               rtol=1e-4)


def test_the_head_is_the_reference_codes_shape():
    """ImageNet code: Linear(h)-LN-ReLU-Linear(h)-LN-ReLU-Linear(b)-LN-Linear(4); CIFAR-10 code: no b. h = 0 takes
    the backbone's feature size (6 for the tiny backbone)."""
    def kinds(model):
        return [(type(layer).__name__, getattr(layer, "units", None)) for layer in model.objectives["essl"].head.layers]

    with_b = make_model("simsiam", essl_weight=0.08, essl_bottleneck=256)
    assert kinds(with_b) == [("Linear", 6), ("LayerNormalization", None), ("ReLU", None), ("Linear", 6),
                             ("LayerNormalization", None), ("ReLU", None), ("Linear", 256),
                             ("LayerNormalization", None), ("Linear", 4)]
    without = make_model("simclr", essl_weight=0.4, essl_hidden=16, essl_bottleneck=0)
    assert [k for k, _ in kinds(without)] == ["Linear", "LayerNormalization", "ReLU"] * 2 + ["Linear"]


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_composes_and_its_crop_is_the_view_after_the_methods_own(method):
    """The extra crop is the view after the method's (LooC: after its 4) and goes through the online backbone."""
    n_views = view_plan(method, {}, {"essl_weight": 0.4}).num_views
    assert n_views == METHODS[method].view_plan({}).num_views + 1
    model = make_model(method, essl_weight=0.4, **HEAD)
    assert model.objectives["essl"].view_index(model) == n_views - 1
    b = essl_batch(1, views=n_views)
    _, logs, _ = model.compute_losses(b, training=False)
    want, _ = np_essl(model, b[f"view{n_views}"], k0_of(b, n_views), False)
    np.testing.assert_allclose(float(logs["essl/loss"]), want, rtol=1e-4)
    assert all(math.isfinite(float(v)) for v in logs.values())


def test_a_conditioned_projector_and_augself_compose_with_it():
    """--condition conditions the method's projector on views 1 and 2; E-SSL's loss is unchanged by it."""
    model = build_method("simsiam", tiny_backbone(), options=SMALL, objective_options={"essl_weight": 0.4, **HEAD},
                         augself=("crop", "color"), conditioning=Conditioning.create(("crop", "color"), 4, 2))
    model.build_all(8)
    b = essl_batch(5)
    _, logs, _ = model.compute_losses(b, training=False)
    want, _ = np_essl(model, b["view3"], k0_of(b, 3), False)
    np.testing.assert_allclose(float(logs["essl/loss"]), want, rtol=1e-4)
    assert float(logs["loss/augself"]) > 0


def test_the_head_and_the_backbone_train_on_it():
    model = make_model("simsiam", augself=(), essl_weight=1.0, **HEAD)
    compile_model(model)
    before = [w.numpy().copy() for w in model.objectives["essl"].head.trainable_weights]
    logs = run_steps(model, [essl_batch(2), essl_batch(3)])
    assert logs[0]["essl/loss"] != logs[1]["essl/loss"]
    after = model.objectives["essl"].head.trainable_weights
    assert all(not np.array_equal(a, w.numpy()) for a, w in zip(before, after, strict=True))


def test_two_replicas_equal_one_device():
    b = essl_batch(4, n=8)
    # One AugSelf head: a second is the same MLP through the same code, reduced the same way (E-SSL with two heads:
    # the conditioned-projector test above).
    single, double, one, two = one_device_and_two_replicas(
        lambda: make_model("simclr", augself=("crop",), sync=True, essl_weight=0.4, **HEAD), b)
    np.testing.assert_allclose(two["essl/loss"], one["essl/loss"], rtol=1e-5)
    assert_replicas_equal_one_device(single, double, one, two)


# ------------------------------------------------------------------------------------------- the view

CONFIG = AugmentConfig(image_size=32, probabilities={"blur_prob": 1.0, "rotation_prob": 0.5})


def _stream(options: dict, photometric: str = "host", config: AugmentConfig = CONFIG, method: str = "simclr"):
    plan = view_plan(method, {}, {"essl_weight": 0.4, **options})
    return make_pair_dataset(load_source("shapes", "test"), config, seed=3, batch_size=8, shuffle_buffer=100,
                             start_epoch=1, photometric=photometric, views=plan)


def _areas_within(omega_crop: np.ndarray, lo: float, hi: float) -> None:
    """The crop's pixel box area lies in [lo, hi] of the image's, up to rounding each side to whole pixels."""
    h, w = omega_crop[:, 2] * SHAPES_SIZE, omega_crop[:, 3] * SHAPES_SIZE
    slack = 0.5 * (h + w) + 0.25
    area = h * w
    assert np.all(area >= lo * SHAPES_SIZE**2 - slack) and np.all(area <= hi * SHAPES_SIZE**2 + slack), area


def test_the_extra_crop_has_its_declared_size_and_crop_range():
    b = next(iter(_stream({"essl_crop_size": 12.0, "essl_crop_scale": "0.05,0.14"}).take(1)))
    assert b["view3"].shape == (8, 12, 12, 3) and b["view1"].shape == (8, 32, 32, 3)
    _areas_within(b["omega3"]["crop"].numpy(), 0.05, 0.14)
    for j in (1, 2):  # the method's views keep the run's range
        _areas_within(b[f"omega{j}"]["crop"].numpy(), 0.2, 1.0)
    assert b["omega1"]["crop"].numpy()[:, 2:].prod(-1).max() > 0.14 + 0.1
    # a fraction of --image_size, rounded half up: 0.43 · 32 = 13.76 -> 14
    b = next(iter(_stream({"essl_crop_scale": "0.2,1"}).take(1)))
    assert b["view3"].shape == (8, 14, 14, 3)
    _areas_within(b["omega3"]["crop"].numpy(), 0.2, 1.0)


def test_host_and_device_modes_agree_on_the_extra_crop_with_its_own_blur_kernel():
    """64-px views (blur kernel 7) and a 24-px crop (kernel 3), every view blurred: finishing the device batch with
    the run's kernel instead of the crop's own would show here."""
    config = AugmentConfig(image_size=64, probabilities={"blur_prob": 1.0, "rotation_prob": 0.5})
    options = {"essl_crop_size": 24.0}
    host = next(iter(_stream(options, "host", config).take(1)))
    device = next(iter(_stream(options, "device", config).take(1)))
    assert device["view3"].dtype == tf.uint8 and device["view3"].shape == (8, 24, 24, 3)
    finished = finish_views(device, config)
    for j in (1, 2, 3):
        assert np.abs(finished[f"view{j}"].numpy() - host[f"view{j}"].numpy()).mean() <= 2e-3, j
        for key, value in host[f"omega{j}"].items():
            if key == "color_diff":
                np.testing.assert_allclose(finished[f"omega{j}"][key].numpy(), value.numpy(), atol=2e-3)
            else:
                np.testing.assert_array_equal(finished[f"omega{j}"][key].numpy(), value.numpy(), err_msg=key)


def test_views_one_and_two_are_the_two_view_pipelines():
    """E-SSL adds a view and changes none of the others: the two-view batch's views and ω to the byte (exact replay
    across a resume: the kill -9 test below)."""
    pair = next(iter(make_pair_dataset(load_source("shapes", "test"), CONFIG, seed=3, batch_size=8,
                                       shuffle_buffer=100, start_epoch=1).take(1)))
    a = next(iter(_stream({}).take(1)))
    assert set(a) == {*pair, "view3", "omega3"}
    for key in pair:
        tf.nest.map_structure(lambda x, y: np.testing.assert_array_equal(x.numpy(), y.numpy()), pair[key], a[key])


def test_a_view_spec_without_size_or_range_is_the_run_itself():
    assert ViewSpec().config_for(CONFIG) is CONFIG
    assert ViewSpec(size_fraction=0.43).config_for(AugmentConfig(image_size=224)).image_size == 96
    assert ViewSpec(size_fraction=0.43).config_for(AugmentConfig(image_size=64)).image_size == 28
    small = ViewSpec(image_size=12, crop_scale=(0.05, 0.14)).config_for(CONFIG)
    assert (small.image_size, small.crop_scale, small.probabilities) == (12, (0.05, 0.14), CONFIG.probabilities)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("options", "message"), [
    ({"essl_crop_scale": "0,0.5"}, "--essl_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got '0,0.5'"),
    ({"essl_crop_scale": "0.2,1.5"}, "--essl_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got '0.2,1.5'"),
    ({"essl_crop_scale": "0.5,0.2"}, "--essl_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got '0.5,0.2'"),
    ({"essl_crop_scale": "small"}, "--essl_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got 'small'"),
    ({"essl_crop_size": 0.0}, "--essl_crop_size must be a fraction of --image_size in (0, 1] or a number of "
                              "pixels >= 8, got 0.0"),
    ({"essl_crop_size": 6.0}, "--essl_crop_size in pixels must be a whole number >= 8, got 6"),
    ({"essl_crop_size": 12.5}, "--essl_crop_size in pixels must be a whole number >= 8, got 12.5"),
    ({"essl_hidden": -1}, "--essl_hidden must be >= 0, got -1"),
])
def test_a_bad_option_is_one_line_naming_its_flag(options, message):
    with pytest.raises(ValueError) as err:
        make_model("simclr", essl_weight=0.4, **{**HEAD, **options})
    assert str(err.value) == message


def test_a_crop_under_8_pixels_at_the_runs_image_size_is_one_line():
    def build(image_size: int):
        model = build_method("simclr", tiny_backbone(),
                             objective_options={"essl_weight": 0.4, "essl_crop_size": 0.1, **HEAD},
                             augment=AugmentConfig(image_size=image_size))
        model.build_all(image_size)

    build(96)  # 10 px
    with pytest.raises(ValueError, match=r"^--essl_crop_size=0.1 gives a 2-pixel crop at --image_size=16; it must "
                                         r"be at least 8 pixels$"):
        build(16)


def test_a_view_plan_refuses_a_view_size_or_range_no_view_can_have():
    for spec, message in [(ViewSpec(crop_scale=(0.0, 0.5)), "view 3: crop_scale must satisfy 0 < lo <= hi <= 1"),
                          (ViewSpec(image_size=0), "view 3: image_size must be a positive int, got 0"),
                          (ViewSpec(size_fraction=1.5), "view 3: size_fraction must be in (0, 1], got 1.5"),
                          (ViewSpec(image_size=8, size_fraction=0.5), "view 3 gives both image_size and")]:
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            ViewPlan((ViewSpec(), ViewSpec(), spec))


def test_essl_is_registered_once_with_its_flags():
    assert OBJECTIVES["essl"] is ESSL
    assert view_plan("simclr", {}, {"essl_weight": 0.0}).num_views == 2  # 0 = off: no extra view


# ------------------------------------------------------------------------------------------- whole runs


@pytest.mark.slow
def test_a_two_replica_run_with_augself_exports_the_backbone_alone(tmp_path):
    cfg = tiny_run(str(tmp_path / "run"), method="simclr", cpu_replicas=2, max_steps=2, export=True,
                   method_options={"projector_hidden": 32, "projector_dim": 16},
                   objective_options={"essl_weight": 0.4, "essl_hidden": 16, "essl_bottleneck": 8,
                                      "essl_crop_size": 8.0})
    result = train(cfg)
    assert result.steps == 2 and all(np.isfinite(v) for v in result.last_logs.values())
    assert "essl/loss" in result.last_logs
    assert_export_is_the_backbone(result)


ESSL_RUN = ("--method=simsiam", "--augself=crop,color", "--essl_weight=0.4", "--essl_crop_size=8",
            "--essl_hidden=16", "--essl_bottleneck=8", "--dataset=shapes", "--split=test", "--width=0.0625",
            "--image_size=16", "--batch_size=16", "--max_steps=5", "--checkpoint_every=1", "--log_every=1",
            "--projector_dim=16", "--predictor_hidden=8", "--noexport", "--photometric=device", "--monitor=none")


@pytest.mark.slow
def test_kill_9_mid_run_then_the_same_command_ends_bit_identical(tmp_path):
    """Two replicas, --deterministic, device mode (the crop's own blur kernel in the step): as tests/test_resume.py."""
    a, b = kill_9_then_resume(tmp_path, ESSL_RUN, kill_after=2, steps=5)
    assert any("essl_head" in k for k in a)
    assert int(a[saved_name("optimizer/torch_sgd/iteration")]) == 5
    assert_bit_identical(a, b)
