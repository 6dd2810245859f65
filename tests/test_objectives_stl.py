"""STL (augself_tf/objectives/stl.py, augself_tf/losses/stl_terms.py): its terms against NumPy written from STL's
``model.py`` (jaemyung-u/stl), 2 replicas = 1 device, the aligned pairs of the input pipeline, the export and exact
resume. The NumPy side reads the heads' weights by name; none of our layer code runs in it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    assert_export_is_the_backbone,
    assert_replicas_equal_one_device,
    batch,
    make_model,
    np_log_softmax,
    one_device_and_two_replicas,
    tiny_run,
)
from kill_resume import assert_bit_identical, kill_9_then_resume
from onednn_kernels import under_onednn
from test_views import CONFIGS, PINNED, _digest

from augself_tf.augment import AugmentConfig, finish_views
from augself_tf.augment.views import TWO_VIEWS
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.losses.stl_terms import hyper_map, swap_pairs, transformation_pairs
from augself_tf.methods import build_method, view_plan
from augself_tf.models.resnet import build_backbone
from augself_tf.objectives import Forward
from augself_tf.objectives.stl import STL
from augself_tf.training.checkpoints import saved_name
from augself_tf.training.loop import train

ALIGNED = ("crop", "color", "grayscale")
# Small heads: k = 3 (the reduced map) or the tiny backbone's 6 features (STL's unreduced one).
SMALL_STL = dict(stl_weight=1.0, stl_trans_dim=5, stl_projector_hidden=7, stl_projector_dim=4)


# ------------------------------------------------------------------ NumPy, from STL's model.py


def np_info_nce(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    """STL's ``info_nce_loss``: normalise, scores of cat(z1, z2) with itself / t, self masked, CE to the other."""
    z = np.concatenate([z1, z2]).astype("float64")
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    n = len(z1)
    scores = z @ z.T / t
    np.fill_diagonal(scores, -np.inf)
    labels = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return float(np.mean(-np_log_softmax(scores)[np.arange(2 * n), labels]))


def np_mlp(x: np.ndarray, w: dict, name: str, layers: int) -> np.ndarray:
    """STL's ``load_mlp`` in training mode: (Linear no bias, BN over the batch, ReLU) × (layers − 1), Linear."""
    for i in range(1, layers + 1):
        x = x @ w[f"{name}/{name}_fc{i}/kernel"]
        if i < layers:
            mean, var = x.mean(0), x.var(0)
            x = (x - mean) / np.sqrt(var + 1e-5) * w[f"{name}/{name}_bn{i}/gamma"] + w[f"{name}/{name}_bn{i}/beta"]
            x = np.maximum(x, 0)
    return x


def np_stl_terms(y1: np.ndarray, y2: np.ndarray, w: dict, reduced: bool, t: float = 0.2) -> tuple[float, float]:
    """STL.forward's equi_loss and trans_loss (``model.py``), y the backbone features; with ``reduced`` the
    hypernetwork's map acts on y·A (our --stl_equi_dim) instead of y."""
    b = len(y1)
    even, odd = np.arange(0, b, 2), np.arange(1, b, 2)
    shifted = np.stack([odd, even], 1).reshape(-1)
    t122 = np_mlp(np.concatenate([y1, y2], 1), w, "stl_trans_backbone", 2)
    t221 = np_mlp(np.concatenate([y2, y1], 1), w, "stl_trans_backbone", 2)
    tr1 = np.concatenate([t122[even], t221[even]])
    tr2 = np.concatenate([t122[odd], t221[odd]])
    if reduced:
        y1, y2 = y1 @ w["stl_equi_in/kernel"], y2 @ w["stl_equi_in/kernel"]
    k = y1.shape[1]

    def equi_transform(r, tt):  # EquiTrans.forward: bmm(r, W^T) with W = hypernet(t).view(-1, out, in)
        weights = (tt @ w["stl_hypernet/kernel"]).reshape(-1, k, k)
        return np.einsum("bi,boi->bo", r, weights)

    pred1 = equi_transform(y2, t221[shifted])
    pred2 = equi_transform(y1, t122[shifted])
    proj = lambda x: np_mlp(x, w, "stl_equi_projector", 2)  # noqa: E731
    z_equi = np.concatenate([proj(y1), proj(y2)])
    z_pred = np.concatenate([proj(pred1), proj(pred2)])
    equi = np_info_nce(z_equi, z_pred, t)
    trans = np_info_nce(np_mlp(tr1, w, "stl_trans_projector", 2), np_mlp(tr2, w, "stl_trans_projector", 2), t)
    return equi, trans


# ------------------------------------------------------------------ the losses and the objective


def test_the_tensor_pieces_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=[6, 3]).astype("float32")
    np.testing.assert_array_equal(swap_pairs(x).numpy(), x[[1, 0, 3, 2, 5, 4]])
    maps = rng.normal(size=[6, 9]).astype("float32")
    want = np.stack([maps[i].reshape(3, 3) @ x[i] for i in range(6)])  # row-major [out, in]
    np.testing.assert_allclose(hyper_map(x, maps).numpy(), want, rtol=1e-5, atol=1e-6)
    t12, t21 = rng.normal(size=[6, 2]), rng.normal(size=[6, 2])
    a, b = transformation_pairs(tf.constant(t12), tf.constant(t21))
    np.testing.assert_array_equal(a.numpy(), np.concatenate([t12[[0, 2, 4]], t21[[0, 2, 4]]]))
    np.testing.assert_array_equal(b.numpy(), np.concatenate([t12[[1, 3, 5]], t21[[1, 3, 5]]]))


@pytest.mark.parametrize("equi_dim", [3, 0], ids=["reduced-k3", "unreduced-stl"])
def test_each_term_is_stls_forward_in_numpy(equi_dim):
    model = make_model("simclr", augself=(), stl_equi_dim=equi_dim, **SMALL_STL)
    objective = model.objectives["stl"]
    rng = np.random.default_rng(1)
    for v in objective.weights:  # BN γ, β away from 1, 0 so that they are read where they belong
        if v.path.endswith(("gamma", "beta")):
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))
    y1, y2 = (rng.normal(size=[8, model.feature_dim]).astype("float32") for _ in range(2))
    loss, logs = objective.objective_loss(model, {}, Forward(tf.constant(y1), tf.constant(y2), tf.constant(0.0)),
                                          training=True)
    weights = {v.path: v.numpy().astype("float64") for v in objective.weights}
    equi, trans = np_stl_terms(y1.astype("float64"), y2.astype("float64"), weights, reduced=equi_dim > 0)
    np.testing.assert_allclose(float(logs["stl/equivariance"]), equi, rtol=1e-4)
    np.testing.assert_allclose(float(logs["stl/transformation"]), trans, rtol=1e-4)
    np.testing.assert_allclose(float(loss), equi + 0.1 * trans, rtol=1e-4)
    k = equi_dim or model.feature_dim
    assert weights["stl_hypernet/kernel"].shape == (5, k * k)


def test_the_total_is_the_methods_loss_plus_lambda_times_stls_terms():
    model = make_model("simsiam", augself=("crop",), **{**SMALL_STL, "stl_weight": 0.5})
    total, logs, _ = model.compute_losses(batch(2), training=False)
    stl = float(logs["stl/equivariance"]) + 0.1 * float(logs["stl/transformation"])
    np.testing.assert_allclose(float(logs["stl/loss"]), stl, rtol=1e-5)
    np.testing.assert_allclose(float(total), float(logs["loss/method"]) + float(logs["loss/augself"]) + 0.5 * stl,
                               rtol=1e-5)


def test_two_replicas_equal_one_device():
    """SimCLR + STL with synchronised BN: every NT-Xent gathers its negatives, pairs stay inside a replica."""
    b = batch(3, n=8)
    single, double, one, two = one_device_and_two_replicas(
        lambda: make_model("simclr", augself=(), sync=True, stl_equi_dim=3, **SMALL_STL), b)
    for key in ("stl/equivariance", "stl/transformation"):
        np.testing.assert_allclose(two[key], one[key], rtol=1e-5)
    assert_replicas_equal_one_device(single, double, one, two)


def test_stl_composes_with_simclr_simsiam_byol_and_refuses_the_rest_in_one_line():
    for method in ("simclr", "simsiam", "byol"):
        assert "stl" in make_model(method, **SMALL_STL).objectives  # with AugSelf{crop, color} too
    # One backbone for the refusals: each is raised as the model is made, before the backbone is read or cloned.
    backbone = build_backbone("resnet18_cifar", 0.0625)
    for method in ("moco", "swav", "supervised", "looc", "none"):
        with pytest.raises(ValueError, match=rf"^--stl_weight does not compose with --method={method}; it "
                                             r"composes with simclr, simsiam, byol$"):
            build_method(method, backbone, objective_options={"stl_weight": 1.0})


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("stl_aligned", "crop,wobble", r"^--stl_aligned: unknown augmentation 'wobble'; choose from crop, flip"),
    ("stl_aligned", " , ", r"^--stl_aligned needs at least one step"),
    ("stl_temperature", 0.0, r"^--stl_temperature must be positive, got 0.0$"),
    ("stl_equi_dim", -1, r"^--stl_equi_dim must be >= 0, got -1$"),
    ("stl_trans_weight", -0.1, r"^--stl_trans_weight must be >= 0, got -0.1$"),
])
def test_a_bad_stl_flag_is_one_clear_line(flag, value, message):
    with pytest.raises(ValueError, match=message):
        STL.Options(stl_weight=1.0, **{flag: value})


# ------------------------------------------------------------------ aligned pairs in the input pipeline


def _stream(plan, photometric="host", batch_size=8, **kwargs):
    config = AugmentConfig(image_size=16)
    return make_pair_dataset(load_source("shapes", "test"), config, seed=3, batch_size=batch_size,
                             shuffle_buffer=64, photometric=photometric, views=plan, **kwargs)


def test_view_plan_with_stl_aligns_crop_colour_and_grayscale_and_off_is_the_two_view_plan():
    assert view_plan("simsiam", {}, {"stl_weight": 1.0}) == dataclasses.replace(TWO_VIEWS, aligned=ALIGNED)
    assert view_plan("simsiam", {}, {"stl_weight": 1.0, "stl_aligned": "crop"}).aligned == ("crop",)
    assert view_plan("simsiam", {}, {"stl_weight": 0.0}) == TWO_VIEWS == view_plan("simsiam", {})


def stl_off_digests() -> dict[str, list[str]]:
    """The digests of batches 1 and 2 of the pinned stream, host mode, by config, drawn by SimCLR's view plan with
    STL off."""
    plan = view_plan("simclr", {}, {"stl_weight": 0.0})
    got = {}
    for name, config in CONFIGS.items():
        ds = make_pair_dataset(load_source("shapes", "test"), config, seed=3, batch_size=4, shuffle_buffer=100,
                               start_epoch=1, photometric="host", views=plan)
        got[name] = [_digest(b) for b in ds.take(2)]
    return got


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_two_view_batches_with_stl_off_keep_their_pinned_hashes(config_name):
    assert under_onednn("test_objectives_stl", "stl_off_digests")[config_name] == PINNED[(config_name, "host")]


def test_pairs_in_a_real_batch_share_crop_colour_grayscale_not_flip_host_and_device_alike():
    plan = view_plan("simsiam", {}, {"stl_weight": 1.0})
    host = next(iter(_stream(plan, "host", batch_size=16)))
    device = finish_views(next(iter(_stream(plan, "device", batch_size=16))), AugmentConfig(image_size=16))
    flips_differ = 0
    for j in (1, 2):
        omega = {k: v.numpy() for k, v in host[f"omega{j}"].items()}
        for name in ALIGNED:  # shapes images are all 64 px, so a shared crop draw is a shared box
            np.testing.assert_array_equal(omega[name][0::2], omega[name][1::2], err_msg=f"view {j} {name}")
        assert len({tuple(r) for r in omega["crop"][0::2]}) == 8  # the pairs differ from each other
        flips_differ += int(np.sum(omega["flip"][0::2] != omega["flip"][1::2]))
        assert not np.array_equal(omega["blur"][0::2], omega["blur"][1::2])
        for name, value in omega.items():  # the device stage reads the same draws
            if name != "color_diff":
                np.testing.assert_array_equal(device[f"omega{j}"][name].numpy(), value, err_msg=name)
        np.testing.assert_allclose(device[f"view{j}"].numpy(), host[f"view{j}"].numpy(), atol=0.02)
    assert flips_differ > 0  # flips are each example's own
    assert not np.array_equal(host["omega1"]["crop"].numpy(), host["omega2"]["crop"].numpy())


def test_the_first_example_of_a_pair_is_what_it_is_without_pairs():
    plain = next(iter(_stream(TWO_VIEWS)))
    paired = next(iter(_stream(view_plan("simsiam", {}, {"stl_weight": 1.0}))))
    for key in ("view1", "view2"):
        np.testing.assert_array_equal(paired[key].numpy()[0::2], plain[key].numpy()[0::2])
        assert not np.array_equal(paired[key].numpy()[1::2], plain[key].numpy()[1::2])


def test_pairs_are_the_same_after_a_resume_and_within_each_shard():
    plan = view_plan("simsiam", {}, {"stl_weight": 1.0})
    whole = list(_stream(plan, batches_per_epoch=3).take(3))
    resumed = list(_stream(plan, batches_per_epoch=3, skip_batches=1).take(2))
    for a, b in zip(whole[1:], resumed, strict=True):
        np.testing.assert_array_equal(a["view1"].numpy(), b["view1"].numpy())
        np.testing.assert_array_equal(a["omega2"]["crop"].numpy(), b["omega2"]["crop"].numpy())
    for index in range(2):
        shard = next(iter(_stream(plan, shard=(index, 2))))
        np.testing.assert_array_equal(shard["omega1"]["color"].numpy()[0::2], shard["omega1"]["color"].numpy()[1::2])


def test_an_odd_batch_per_replica_is_refused_in_one_line():
    plan = view_plan("simsiam", {}, {"stl_weight": 1.0})
    with pytest.raises(ValueError, match=r"^aligned pairs \(crop, color, grayscale\) need an even batch per replica, "
                                         r"got 5: choose --batch_size as a multiple of 2 x the replicas$"):
        _stream(plan, batch_size=5)


# ------------------------------------------------------------------ whole runs


@pytest.mark.slow
def test_a_simsiam_stl_run_exports_the_backbone_alone(tmp_path):
    cfg = tiny_run(str(tmp_path / "run"), method="simsiam", max_steps=2, export=True,
                   method_options={"projector_dim": 16, "predictor_hidden": 8},
                   objective_options=SMALL_STL)
    result = train(cfg)
    assert result.steps == 2 and result.last_logs["stl/loss"] > 0
    loaded = assert_export_is_the_backbone(result)
    assert not any("stl" in v.name or "projector" in v.name for v in loaded.trainable_weights)


SIMSIAM_STL = ("--method=simsiam", "--stl_weight=1", "--stl_equi_dim=8", "--augself=crop,color", "--dataset=shapes",
               "--split=test", "--width=0.0625", "--image_size=16", "--batch_size=16", "--max_steps=5",
               "--checkpoint_every=1", "--log_every=1", "--projector_dim=16", "--predictor_hidden=8", "--noexport",
               "--photometric=device", "--monitor=none")


@pytest.mark.slow
def test_kill_9_mid_epoch_then_same_command_ends_bit_identical(tmp_path):
    """tests/test_resume.py's pattern on 2 replicas, --deterministic: STL's heads, optimizer state and the aligned
    pairs of the resumed steps must replay exactly."""
    a, b = kill_9_then_resume(tmp_path, SIMSIAM_STL, kill_after=2, steps=5)
    assert any("stl_hypernet" in k for k in a)
    assert int(a[saved_name("optimizer/torch_sgd/iteration")]) == 5
    assert_bit_identical(a, b)
