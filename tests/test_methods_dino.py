"""DINO (augself_tf/methods/dino.py): its head (with and without BN) and loss against NumPy (crops of one size
through the backbone together, the teacher on the global crops, the center), the EMA teacher and the center after a
step, the teacher temperature's warm-up, the last layer held out of the first epoch, a ViT teacher without
drop-path, 2 replicas equal to one device with local crops; its multi-crop views (each crop rebuilt from the image
and its own ω, sizes and area ranges, views 1 and 2 the two-view pipeline's); bad options in one line; whole runs
that export the backbone alone and resume exactly after kill -9."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    S,
    assert_export_is_the_backbone,
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    eager_steps,
    make_model,
    one_device_and_two_replicas,
    tiny_backbone,
    tiny_run,
)
from kill_resume import assert_bit_identical, kill_9_then_resume
from scipy.special import erf
from test_augment import OFF, random_image, rebuild_from_crop
from test_losses_dino import np_dino_loss, np_target_entropy

from augself_tf.augment import AugmentConfig, finish_views
from augself_tf.augment.pipeline import augment_views
from augself_tf.augment.views import TWO_VIEWS
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.shapes import IMAGE_SIZE as SHAPES_SIZE
from augself_tf.data.sources import load_source
from augself_tf.methods import METHODS, build_method, view_plan
from augself_tf.methods.dino import DINO
from augself_tf.methods.model_config import WIDTH_DEFAULT
from augself_tf.models import vit
from augself_tf.models.vit import ViTSize, build_vit
from augself_tf.objectives.conditioning import Conditioning
from augself_tf.training import step_loop
from augself_tf.training.loop import train
from augself_tf.training.optim import build_optimizer
from augself_tf.training.step_loop import build_monitors

HEAD = {"dino_out_dim": 12, "dino_hidden": 10, "dino_bottleneck": 6}
LOCAL = 4  # side of the local crops of the test batches


def dino_batch(seed: int, n: int = 8, local_crops: int = 2) -> dict:
    """Two global crops at S px and ``local_crops`` local ones at LOCAL px, with ω and labels."""
    b = batch(seed, n, views=2 + local_crops)
    rng = np.random.default_rng(seed + 1000)
    for j in range(3, 3 + local_crops):
        b[f"view{j}"] = rng.uniform(0, 1, [n, LOCAL, LOCAL, 3]).astype("float32")
    return b


def dino_model(local_crops: int = 2, augself=("crop",), **options) -> DINO:
    return make_model("dino", augself=augself, local_crops=local_crops, **{**HEAD, **options})


def np_head(x: np.ndarray, head, bn_inputs: list | None = None) -> np.ndarray:
    """DINOHead.forward in NumPy: Linear–GELU (exact)–Linear–GELU–Linear, l2 norm, weight-normalised last layer;
    with its BNs (``use_bn``), each hidden Linear's output normalised by the batch's mean and biased variance (torch's
    BatchNorm1d in train mode, eps 1e-5), then scaled by γ and shifted by β. ``bn_inputs`` collects each BN's input."""
    x = np.asarray(x, np.float64)
    for i, linear in enumerate(head.linears):
        x = x @ linear.kernel.numpy().astype(np.float64) + linear.bias.numpy()
        if i < 2:
            if head.norms:
                if bn_inputs is not None:
                    bn_inputs.append(x)
                bn = head.norms[i]
                x = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * bn.gamma.numpy() + bn.beta.numpy()
            x = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    v = head.last_v.numpy().astype(np.float64)
    return x @ (head.last_g.numpy() * v / np.linalg.norm(v, axis=0, keepdims=True))


# ------------------------------------------------------------------------------------------- head and loss


def test_the_head_is_dinos_with_its_last_layer_normalised_to_one():
    model = dino_model()
    head = model.projector
    assert [linear.units for linear in head.linears] == [10, 10, 6] and head.last_v.shape == (6, 12)
    assert head.last_g.shape == (1, 12) and not head.last_g.trainable  # norm_last_layer: g fixed at 1
    x = np.random.default_rng(0).normal(size=[5, model.feature_dim]).astype("float32")
    np.testing.assert_allclose(head(x).numpy(), np_head(x, head), rtol=1e-4, atol=1e-6)
    trained = dino_model(norm_last_layer=False).projector
    assert trained.last_g.trainable and trained.last_layer_variables() == [trained.last_v, trained.last_g]
    assert head.norms == []  # DINO's default: no BN


def test_a_bn_head_normalises_each_hidden_layer_with_the_batch_in_the_student_and_the_teacher():
    model = dino_model(use_bn_in_head=True)
    head, teacher_head = model.projector, model.momentum_encoder.projector
    assert [n.name for n in head.norms] == ["student_head_bn1", "student_head_bn2"] and len(teacher_head.norms) == 2
    rng = np.random.default_rng(1)
    for bn in head.norms + teacher_head.norms:  # γ and β away from 1 and 0, so that the comparison reads them
        bn.gamma.assign(rng.uniform(0.5, 1.5, bn.gamma.shape).astype("float32"))
        bn.beta.assign(rng.normal(size=bn.beta.shape).astype("float32"))
    x = rng.normal(size=[6, model.feature_dim]).astype("float32")
    np.testing.assert_allclose(head(x, training=True).numpy(), np_head(x, head), rtol=1e-4, atol=1e-5)
    # The teacher's head sees its batch too (DINO's teacher in train mode): the loss is DINO's on those targets.
    model.center.assign(rng.normal(size=(1, 12)).astype("float32"))
    b = tf.nest.map_structure(tf.convert_to_tensor, dino_batch(2))
    forward = model.method_forward(b, training=True)
    glob = np.concatenate([b["view1"], b["view2"]])
    local = np.concatenate([b["view3"], b["view4"]])
    student = np_head(np.concatenate([model.backbone(glob, training=True).numpy(),
                                      model.backbone(local, training=True).numpy()]), head)
    encoder = model.momentum_encoder
    teacher = np_head(encoder.backbone(glob, training=True).numpy(), teacher_head)
    want = np_dino_loss(student, teacher, model.center.numpy(), 4, 2, 0.1, 0.04)
    np.testing.assert_allclose(float(forward.loss), want, rtol=1e-4)
    # Without the batch's statistics (the moving ones, at their start) the head is another function.
    assert np.abs(head(x, training=False).numpy() - np_head(x, head)).max() > 1e-3


def test_the_loss_is_dinos_on_crops_grouped_by_size_with_the_teacher_on_the_global_crops():
    model = dino_model(local_crops=2)
    rng = np.random.default_rng(3)
    model.center.assign(rng.normal(size=(1, 12)).astype("float32"))
    b = tf.nest.map_structure(tf.convert_to_tensor, dino_batch(1))
    forward = model.method_forward(b, training=True)
    glob = np.concatenate([b["view1"], b["view2"]])
    local = np.concatenate([b["view3"], b["view4"]])
    f_global = model.backbone(glob, training=True).numpy()
    student = np_head(np.concatenate([f_global, model.backbone(local, training=True).numpy()]), model.projector)
    encoder = model.momentum_encoder
    teacher = np_head(encoder.backbone(glob, training=True).numpy(), encoder.projector)
    want = np_dino_loss(student, teacher, model.center.numpy(), 4, 2, 0.1, 0.04)
    np.testing.assert_allclose(float(forward.loss), want, rtol=1e-4)
    # DINO's collapse curves: the teacher's target entropy, and the rest of the loss (the mean KL).
    entropy = np_target_entropy(teacher, model.center.numpy(), 0.04)
    np.testing.assert_allclose(float(forward.logs["collapse/teacher_entropy"]), entropy, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(forward.logs["collapse/kl"]), want - entropy, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(forward.f1.numpy(), f_global[:8], rtol=1e-5, atol=1e-6)  # AugSelf's: global crops
    np.testing.assert_allclose(forward.f2.numpy(), f_global[8:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(forward.aux["batch_mean"].numpy(), teacher.mean(0, keepdims=True), rtol=1e-4,
                               atol=1e-6)
    # The grouping matters (BN's batch statistics): each crop alone through the backbone is another loss.
    alone = np.concatenate([model.backbone(b[f"view{j}"], training=True).numpy() for j in range(1, 5)])
    other = np_dino_loss(np_head(alone, model.projector), teacher, model.center.numpy(), 4, 2, 0.1, 0.04)
    assert abs(other - want) > 1e-4


@pytest.mark.parametrize("use_bn_in_head", [False, True], ids=["dinos_head", "bn_head"])
def test_a_step_moves_the_teacher_by_its_cosine_momentum_and_the_center_by_0_9(use_bn_in_head):
    """γ and β move with the EMA as every trained weight; a BN head's moving statistics are not averaged (DINO's
    EMA covers parameters, not buffers): the teacher's follow its own batches."""
    model = dino_model(local_crops=1, total_steps=4, use_bn_in_head=use_bn_in_head)
    compile_model(model, lr=0.1, total_steps=4)
    online = model.backbone.weights + model.projector.weights
    encoder = model.momentum_encoder
    target = encoder.backbone.weights + encoder.projector.weights
    b = dino_batch(2, local_crops=1)
    for t in range(2):
        glob = np.concatenate([b["view1"], b["view2"]])
        bn_inputs: list[np.ndarray] = []  # each teacher BN's input: its batch mean moves the BN's moving mean
        teacher = np_head(encoder.backbone(glob, training=True).numpy(), encoder.projector, bn_inputs)
        batch_means = [(bn.moving_mean.numpy(), x.mean(0)) for bn, x in zip(encoder.projector.norms, bn_inputs,
                                                                             strict=True)]
        before = [w.numpy() for w in target]
        center = model.center.numpy()
        logs = eager_steps(model, [b])[0]
        m = 1 - (1 - 0.996) * (math.cos(math.pi * t / 4) + 1) / 2  # momentum_schedule[it] after step it
        assert logs["dino/momentum"] == pytest.approx(m, abs=1e-6)
        for o, w, old in zip(online, target, before, strict=True):
            if o.trainable:
                np.testing.assert_allclose(w.numpy(), m * old + (1 - m) * o.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(model.center.numpy(), 0.9 * center + 0.1 * teacher.mean(0, keepdims=True),
                                   rtol=1e-4, atol=1e-6)
        assert np.abs(model.center.numpy()).max() > 0
        for bn, (old_mean, batch_mean) in zip(encoder.projector.norms, batch_means, strict=True):
            np.testing.assert_allclose(bn.moving_mean.numpy(), 0.9 * old_mean + 0.1 * batch_mean, rtol=1e-4,
                                       atol=1e-6)
    assert len(encoder.projector.norms) == (2 if use_bn_in_head else 0)


def test_the_teacher_temperature_warms_up_linearly_per_epoch():
    model = dino_model(steps_per_epoch=2, warmup_teacher_temperature=0.04, teacher_temperature=0.07,
                       teacher_temperature_epochs=3)
    schedule = np.concatenate((np.linspace(0.04, 0.07, 3), np.ones(2) * 0.07))  # DINOLoss.teacher_temp_schedule
    got = [float(model.teacher_temperature_at(tf.constant(step))) for step in range(10)]
    np.testing.assert_allclose(got, np.repeat(schedule, 2), rtol=1e-6)
    assert float(dino_model().teacher_temperature_at(tf.constant(7))) == pytest.approx(0.04)


def test_the_last_layer_is_left_out_of_the_first_epochs_update():
    model = dino_model(local_crops=0, steps_per_epoch=2, freeze_last_layer_epochs=1, total_steps=6)
    held, steps = model.held_variables()
    assert held == [model.projector.last_v] and steps == 2
    model.compile(optimizer=build_optimizer(0.05, 256, 6, optimizer="adamw", weight_decay=0.04,
                                            held_variables=held, held_steps=steps))
    model.optimizer.build(model.optimized_variables())
    v0 = model.projector.last_v.numpy()
    first = model.projector.linears[0].kernel.numpy()
    eager_steps(model, [dino_batch(s, local_crops=0) for s in range(2)])
    np.testing.assert_array_equal(model.projector.last_v.numpy(), v0)  # neither moved nor decayed
    assert not np.array_equal(model.projector.linears[0].kernel.numpy(), first)
    eager_steps(model, [dino_batch(2, local_crops=0)])
    assert not np.array_equal(model.projector.last_v.numpy(), v0)


@pytest.mark.parametrize("use_bn_in_head", [False, True], ids=["dinos_head", "bn_head"])
def test_a_vit_teacher_runs_without_drop_path_and_local_crops_interpolate_the_position_embedding(use_bn_in_head):
    """The ViT teacher's backbone runs in inference mode (no drop-path), its head in training mode as DINO's whole
    teacher (a BN head normalises with the batch's statistics)."""
    keras.utils.set_random_seed(1)
    vit.VIT_SIZES["vit_test"] = ViTSize(8, 2, 2, 4)
    try:
        backbone = build_vit("vit_test", image_size=S, drop_path=0.5, position="learned")
    finally:
        del vit.VIT_SIZES["vit_test"]
    model = build_method("dino", backbone, options={**HEAD, "local_crops": 2, "local_crop_size": float(LOCAL),
                                                    "use_bn_in_head": use_bn_in_head},
                         augself={"crop": 1.0}, augment=AugmentConfig(image_size=S))
    model.build_all(S)
    b = tf.nest.map_structure(tf.convert_to_tensor, dino_batch(4))
    glob = tf.concat([b["view1"], b["view2"]], 0)
    encoder = model.momentum_encoder
    features = encoder.backbone(glob, training=False).numpy()
    teacher = np_head(features, encoder.projector)
    for _ in range(2):  # the student's drop-path draws change; the teacher's outputs do not
        forward = model.method_forward(b, training=True)
        np.testing.assert_allclose(forward.aux["batch_mean"].numpy(), tf.reduce_mean(teacher, 0, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
    assert np.isfinite(float(forward.loss))


@pytest.mark.parametrize("use_bn_in_head", [False, True], ids=["dinos_head", "bn_head"])
def test_two_replicas_equal_one_device_with_local_crops_and_the_center_all_reduced(use_bn_in_head):
    b = dino_batch(5, n=8)
    single, double, one, two = one_device_and_two_replicas(
        lambda: dino_model(local_crops=2, sync=tf.distribute.has_strategy(), total_steps=10,
                           use_bn_in_head=use_bn_in_head), b)
    assert np.abs(single.center.numpy()).max() > 0
    assert_replicas_equal_one_device(single, double, one, two)  # every weight, the center among them


# ------------------------------------------------------------------------------------------- the views

CONFIG = AugmentConfig(image_size=32)


def _areas_within(omega_crop: np.ndarray, lo: float, hi: float, size: int = SHAPES_SIZE) -> None:
    """The crop's pixel box area lies in [lo, hi] of the image's, up to rounding each side to whole pixels."""
    h, w = omega_crop[:, 2] * size, omega_crop[:, 3] * size
    slack = 0.5 * (h + w) + 0.25
    area = h * w
    assert np.all(area >= lo * size**2 - slack) and np.all(area <= hi * size**2 + slack), area


def _stream(options: dict, photometric: str = "host", config: AugmentConfig = CONFIG):
    return make_pair_dataset(load_source("shapes", "test"), config, seed=3, batch_size=8, shuffle_buffer=100,
                             start_epoch=1, photometric=photometric, views=view_plan("dino", options))


def test_multi_crop_views_have_their_sizes_and_area_ranges():
    b = next(iter(_stream({"local_crops": 3, "local_crop_size": 12.0}).take(1)))
    assert [b[f"view{j}"].shape[1] for j in range(1, 6)] == [32, 32, 12, 12, 12] and "view6" not in b
    for j in (1, 2):
        _areas_within(b[f"omega{j}"]["crop"].numpy(), 0.4, 1.0)  # auto: DINO's 0.4-1 with local crops
    for j in (3, 4, 5):
        _areas_within(b[f"omega{j}"]["crop"].numpy(), 0.05, 0.4)
    assert view_plan("dino", {}).views[0].crop_scale == (0.14, 1.0)  # without local crops: DINO's advice
    # a fraction of --image_size, rounded half up: 0.43 · 32 = 13.76 -> 14; DINO's 96 of 224 px
    assert view_plan("dino", {"local_crops": 1}).views[2].config_for(CONFIG).image_size == 14
    assert view_plan("dino", {"local_crops": 1}).views[2].config_for(AugmentConfig(image_size=224)).image_size == 96
    plan = view_plan("dino", {"global_crops": 3, "local_crops": 1, "global_crop_scale": "0.3,0.9"})
    assert [v.crop_scale for v in plan.views] == [(0.3, 0.9)] * 3 + [(0.05, 0.4)]
    assert dict(plan.views[0].probabilities) == {"blur_prob": 1.0, "solarize_prob": 0.0}  # BYOL's asymmetric pair
    assert dict(plan.views[1].probabilities) == {"blur_prob": 0.1, "solarize_prob": 0.2}
    assert plan.views[2].probabilities == () and plan.views[3].probabilities == ()  # the run's


def test_every_crop_is_rebuilt_from_the_image_and_its_own_omega():
    """Crop and flip on, the rest off: each global and local crop is the box its ω names, resized to its own side
    (flipped where its ω says), and the crops differ (each is drawn from its own seed row)."""
    image = random_image(40, 56, 3, 7)
    config = AugmentConfig(image_size=24, probabilities={**OFF, "flip_prob": 0.5})
    plan = view_plan("dino", {"local_crops": 4, "local_crop_size": 10.0, "asymmetric_views": False})
    boxes = []
    for s in range(4):
        out = augment_views(tf.constant(image), tf.constant([s, 5], tf.int64), config, plan)
        for j in range(1, 7):
            view, omega = out[f"view{j}"].numpy(), {k: v.numpy() for k, v in out[f"omega{j}"].items()}
            size = 24 if j <= 2 else 10
            assert view.shape == (size, size, 3)
            flip = bool(omega["flip"][0])
            np.testing.assert_allclose(view, rebuild_from_crop(image, omega["crop"], flip, size), atol=1e-5)
            boxes.append(tuple(omega["crop"]))
            lo, hi = (0.4, 1.0) if j <= 2 else (0.05, 0.4)
            h, w = omega["crop"][2] * 40, omega["crop"][3] * 56
            assert lo * 40 * 56 - (h + w) <= h * w <= hi * 40 * 56 + (h + w)
    assert len(set(boxes)) == len(boxes)


def test_host_and_device_modes_agree_on_every_crop():
    config = AugmentConfig(image_size=64, probabilities={"blur_prob": 0.5})
    options = {"local_crops": 2, "local_crop_size": 24.0}
    host = next(iter(_stream(options, "host", config).take(1)))
    finished = finish_views(next(iter(_stream(options, "device", config).take(1))), config)
    for j in range(1, 5):
        assert np.abs(finished[f"view{j}"].numpy() - host[f"view{j}"].numpy()).mean() <= 2e-3, j
        for key in ("crop", "flip", "color", "blur", "solarize"):
            np.testing.assert_array_equal(finished[f"omega{j}"][key].numpy(), host[f"omega{j}"][key].numpy())


def test_global_crops_one_and_two_are_the_two_view_pipelines_and_every_plan_of_the_others_is_unchanged():
    """With the run's area range and symmetric probabilities, DINO's first two crops are the two-view batch to the
    byte: the local crops are drawn from seed rows of their own."""
    pair = next(iter(make_pair_dataset(load_source("shapes", "test"), CONFIG, seed=3, batch_size=8,
                                       shuffle_buffer=100, start_epoch=1).take(1)))
    a = next(iter(_stream({"local_crops": 2, "global_crop_scale": "0.2,1", "asymmetric_views": False}).take(1)))
    for key in pair:
        tf.nest.map_structure(lambda x, y: np.testing.assert_array_equal(x.numpy(), y.numpy()), pair[key], a[key])
    for method in METHODS:
        if method not in ("dino", "looc", "mocov3"):
            assert view_plan(method, {"local_crops": 4}) is TWO_VIEWS  # multi-crop flags are DINO's alone


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("options", "message"), [
    ({"global_crops": 1}, "--global_crops must be >= 2 (the teacher's crops, each against the others), got 1"),
    ({"local_crops": -1}, "--local_crops must be >= 0, got -1"),
    ({"global_crop_scale": "0.5,0.2"}, "--global_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got '0.5,0.2'"),
    ({"local_crop_scale": "big"}, "--local_crop_scale must be lo,hi with 0 < lo <= hi <= 1, got 'big'"),
    ({"local_crop_size": 12.5}, "--local_crop_size in pixels must be a whole number, got 12.5"),
    ({"local_crop_size": 0.0}, "--local_crop_size must be > 0, got 0.0"),
    ({"teacher_temperature": 0.0}, "--teacher_temperature must be > 0, got 0.0"),
    ({"center_momentum": 1.5}, "--center_momentum must be in [0, 1], got 1.5"),
])
def test_a_bad_option_is_one_line_naming_its_flag(options, message):
    with pytest.raises(ValueError) as err:
        dino_model(**options)
    assert str(err.value) == message


def test_local_crops_below_a_vits_patch_and_a_conditioned_head_are_one_line():
    vit.VIT_SIZES["vit_test"] = ViTSize(8, 2, 2, 4)
    try:
        backbone = build_vit("vit_test", image_size=16)
    finally:
        del vit.VIT_SIZES["vit_test"]
    with pytest.raises(ValueError, match=r"^--local_crop_size=0.1 gives 2-pixel local crops at --image_size=16, "
                                         r"below the ViT's 4-pixel patch; choose a larger --local_crop_size$"):
        build_method("dino", backbone, options={**HEAD, "local_crops": 2, "local_crop_size": 0.1},
                     augment=AugmentConfig(image_size=16))
    model = build_method("dino", tiny_backbone(), options=HEAD, conditioning=Conditioning.create(("crop",)))
    with pytest.raises(ValueError, match=r"^--condition: method 'dino' conditions no head"):
        model.build_all(S)


# ------------------------------------------------------------------------------------------- whole runs

DINO_OPTIONS = {**HEAD, "local_crops": 2, "local_crop_size": 8.0}


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["vit_pico", "resnet18"])
def test_a_two_replica_multi_crop_run_with_augself_exports_the_backbone_alone(tmp_path, backbone):
    cfg = tiny_run(str(tmp_path / "run"), method="dino", backbone=backbone, cpu_replicas=2, max_steps=2,
                   export=True, augself=("crop", "color"), optimizer="adamw", clip_grad=3.0, weight_decay=0.04,
                   weight_decay_end=0.4, weight_decay_exclude="1d", method_options=DINO_OPTIONS,
                   **({"width": WIDTH_DEFAULT} if backbone == "vit_pico" else {}))  # a ViT refuses tiny_run's
    result = train(cfg)
    assert result.steps == 2 and all(np.isfinite(v) for v in result.last_logs.values())
    assert {"dino/teacher_temperature", "augself/crop_loss"} <= set(result.last_logs)
    vit_tokens = ("patch_tokens",) if backbone == "vit_pico" else ()
    assert_export_is_the_backbone(result, signatures=("serving_default", *vit_tokens))


def test_the_export_and_the_monitors_are_the_teachers_backbone_as_dino_evaluates_it(tmp_path, monkeypatch):
    monitored = []

    def recording(plan, cfg, strategy, backbone, *rest):
        monitored.append(backbone)
        return build_monitors(plan, cfg, strategy, backbone, *rest)

    monkeypatch.setattr(step_loop, "build_monitors", recording)
    cfg = tiny_run(str(tmp_path / "run"), method="dino", max_steps=2, export=True, optimizer="adamw", lr=0.05,
                   method_options=DINO_OPTIONS, monitor="knn", monitor_bank_size=32, monitor_query_size=16)
    result = train(cfg)
    model = result.model
    assert model.evaluated_backbone is model.momentum_encoder.backbone
    loaded = assert_export_is_the_backbone(result)  # the export gives the teacher's features
    images = tf.random.stateless_uniform([2, 16, 16, 3], seed=[0, 1])
    exported = loaded.signatures["serving_default"](images=images)["features"].numpy()
    student = model.backbone(images, training=False).numpy()
    assert np.abs(exported - student).max() > 1e-3  # two AdamW steps moved the student away from its EMA
    assert len(monitored) == 1 and monitored[0] is model.momentum_encoder.backbone


DINO_RUN = ("--method=dino", "--backbone=vit_pico", "--patch_size=8", "--augself=crop,color", "--local_crops=2",
            "--local_crop_size=8",
            "--dino_out_dim=16", "--dino_hidden=16", "--dino_bottleneck=8", "--optimizer=adamw", "--clip_grad=3",
            "--weight_decay=0.04", "--weight_decay_end=0.4", "--weight_decay_exclude=1d", "--drop_path=0.1",
            "--dataset=shapes", "--split=test", "--image_size=16", "--batch_size=16", "--max_steps=5",
            "--checkpoint_every=1", "--log_every=1", "--noexport", "--photometric=device", "--monitor=none")


@pytest.mark.slow
def test_kill_9_mid_run_then_the_same_command_ends_bit_identical(tmp_path):
    """Two replicas, local crops, the center, the teacher and the held last layer (one epoch of the 5 steps is 62
    steps long: held throughout; the held test above covers its release)."""
    a, b = kill_9_then_resume(tmp_path, DINO_RUN, kill_after=2, steps=5)
    assert any("center" in k for k in a)
    assert any("teacher_head" in k for k in a)
    assert_bit_identical(a, b)
