"""N views from one declaration (augself_tf/augment/views.py): two-view batches unchanged to the byte, and the
draws a view copies from another, tested as truth on real images in host and device modes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import tensorflow as tf
from helpers import real_images
from onednn_kernels import under_onednn

from augself_tf.augment import (
    TWO_VIEWS,
    AugmentConfig,
    ViewPlan,
    ViewSpec,
    augment_views,
    finish_views,
    leave_one_out,
    registry,
)
from augself_tf.augment.steps import Step
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source

ALL_ON = dict(flip_prob=0.5, jitter_prob=0.8, gray_prob=0.2, blur_prob=0.5, rotation_prob=0.5, solarize_prob=0.5)
# Every augmentation but colour off; the crop is the whole (square) image.
ONLY_COLOR = dict(flip_prob=0.0, jitter_prob=1.0, gray_prob=0.0, blur_prob=0.0, rotation_prob=0.0, solarize_prob=0.0)
LOOC = leave_one_out(("color", "rotation"))


def _digest(tree) -> str:
    """sha256 of every array of a (nested) batch: key path, dtype, shape and bytes, in sorted key order."""
    flat = []

    def walk(t, path):
        if isinstance(t, dict):
            for k in t:
                walk(t[k], f"{path}/{k}")
        else:
            flat.append((path, np.asarray(t)))

    walk(tree, "")
    h = hashlib.sha256()
    for path, a in sorted(flat, key=lambda kv: kv[0]):
        h.update(f"{path}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# Computed with the two-view pipeline before view plans existed (two_views drew view 1 and 2 from
# stateless_split(seed, 2) by augment_view / augment_view_for_device), with the fault-tolerance work's per-epoch
# order (branch i29: commit 2bbfa3a + the order fix, which changed the order of every epoch on purpose): shapes
# 'test', seed 3, epoch 1, batches 1 and 2 of 4. "finished" = finish_views of the device batch. TF 2.21's CPU
# kernels with oneDNN on (tests/onednn_kernels.py computes them so on any x86 host).
PINNED = {
    ("default", "host"): ["449e0133c4eeb14fa2ba459ac952fbfe6ae41f7e928e365915b84d847ef6882a",
                          "ada40b2f0ed2f6e1b767005428ec7f6ae3b39bc3d880dd8fc27ebe9093814eb9"],
    ("default", "device"): ["35df8b64ded0d2c9ab8dc58e1ff5a0cf0036e490892f65f7f37fef847ce32a3f",
                            "faaf228e885c30b5b6e038ea624df45945060b9703d3645d714a6f7a653e7538"],
    ("default", "finished"): ["49695de8a2fad113021bbde7dfea35cfacff860f6d11cac8b3d8d2cc8ceec6c9",
                              "d2e657cc5e199ea3ee9d6d77620e570eda6e2c72a7c17dbbd64d4d2fc46f890f"],
    ("all_on", "host"): ["5db6c832eb9a2385170d6669d7146adecc8a464c965b4136f0a931faaf4f1783",
                         "9caf3f4a493189943fa74516981373d4e0b69d9bf1a0cdabbbd80e40743d712b"],
    ("all_on", "device"): ["805a8bc9f403002ac966f5bf5dcaaedeb7379fefa65eb07ff8c30cdf8894f960",
                           "b8b56dcc1b0c3182e6536488763f5f9b31a470a866ee801aef94e23ca48095b4"],
    ("all_on", "finished"): ["9031162ef495716b0baa16993f332a5855b7a8b226b3051372a80fcb8ecef437",
                             "db227377c7209a7109e559c3cb5e69ac4b32f3a73eac832b1d57df7ba4d59b6b"],
}
CONFIGS = {"default": AugmentConfig(image_size=16), "all_on": AugmentConfig(image_size=24, probabilities=ALL_ON)}


def pipeline_digests() -> dict[str, dict[str, list[str]]]:
    """The digests of batches 1 and 2 of the pinned stream, by config and mode ("host", "device", "finished")."""
    return {name: _pipeline_digests(config) for name, config in CONFIGS.items()}


def _pipeline_digests(config: AugmentConfig) -> dict[str, list[str]]:
    got = {}
    for mode in ("host", "device"):
        ds = make_pair_dataset(load_source("shapes", "test"), config, seed=3, batch_size=4, shuffle_buffer=100,
                               start_epoch=1, photometric=mode)
        batches = list(ds.take(2))
        got[mode] = [_digest(b) for b in batches]
        if mode == "device":
            got["finished"] = [_digest(finish_views(b, config)) for b in batches]
    return got


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_two_view_batches_are_byte_identical_to_the_pipeline_before_view_plans(config_name):
    got = under_onednn("test_views", "pipeline_digests")[config_name]
    assert got == {mode: v for (name, mode), v in PINNED.items() if name == config_name}


IMAGES = real_images(tiny=(131, 8), cifar=(307, 4))


_VIEWS: dict[tuple[str, str, str, int], list[dict]] = {}


def _views(config: AugmentConfig, plan: ViewPlan, photometric: str = "host", salt: int = 5) -> list[dict]:
    """Every image's views of ``plan`` (a function of its arguments: computed once per module, eagerly, image by
    image; two tests ask for the same host views)."""
    key = (repr(config), repr(plan), photometric, salt)
    if key not in _VIEWS:
        _VIEWS[key] = _compute_views(config, plan, photometric, salt)
    return _VIEWS[key]


def _compute_views(config: AugmentConfig, plan: ViewPlan, photometric: str, salt: int) -> list[dict]:
    out = [augment_views(image, tf.constant([salt, i], tf.int64), config, plan, photometric)
           for i, image in enumerate(IMAGES)]
    if photometric == "device":  # finish each example as a batch of one, the way the training step does
        out = [{k: (tf.nest.map_structure(lambda t: t[0], v) if isinstance(v, dict) else v[0])
                for k, v in finish_views(tf.nest.map_structure(lambda t: t[None], ex), config).items()}
               for ex in out]
    return out


def test_q_and_k0_of_the_looc_plan_are_the_two_view_pair():
    config = AugmentConfig(image_size=32, probabilities=ALL_ON)
    for pair, looc in zip(_views(config, TWO_VIEWS), _views(config, LOOC), strict=True):
        assert set(looc) == {f"{k}{j}" for k in ("view", "omega") for j in range(1, 5)}
        for key in ("view1", "view2"):
            np.testing.assert_array_equal(looc[key].numpy(), pair[key].numpy())


def test_k_color_is_q_pixel_for_pixel_when_colour_is_the_only_augmentation():
    config = AugmentConfig(image_size=32, crop_min_scale=1.0, crop_ratio=(1.0, 1.0), probabilities=ONLY_COLOR)
    for ex in _views(config, LOOC):
        q, k0, k_color, k_rotation = (ex[f"view{j}"].numpy() for j in range(1, 5))
        np.testing.assert_array_equal(k_color, q)
        assert np.abs(k0 - q).max() > 0.02  # k0 and k_rotation drew their colour afresh
        assert np.abs(k_rotation - q).max() > 0.02


@pytest.mark.parametrize("photometric", ["host", "device"])
def test_k_i_copies_q_draw_of_i_only_and_k0_shares_nothing(photometric):
    config = AugmentConfig(image_size=32, probabilities={**ALL_ON, "jitter_prob": 1.0, "rotation_prob": 1.0})
    crops_differ = 0
    rotations_of_k0 = []
    for ex in _views(config, LOOC, photometric):
        q, k0, k_color, k_rotation = (ex[f"omega{j}"] for j in range(1, 5))
        np.testing.assert_array_equal(k_color["color"].numpy(), q["color"].numpy())
        np.testing.assert_array_equal(k_rotation["rotation"].numpy(), q["rotation"].numpy())
        for other in (k0, k_rotation):  # drew colour afresh (applied with probability 1: continuous ω)
            assert not np.array_equal(other["color"].numpy(), q["color"].numpy())
        for other in (k0, k_color, k_rotation):
            crops_differ += not np.array_equal(other["crop"].numpy(), q["crop"].numpy())
        rotations_of_k0.append(int(k0["rotation"][0]) == int(q["rotation"][0]))
    assert crops_differ == 3 * len(IMAGES)
    assert not all(rotations_of_k0)  # k0's rotation is drawn afresh: it differs from q's on some images


def test_which_seed_rows_each_view_shares():
    """Row s of a view's slot seeds feeds step s: k_i holds q's row for i's slot and only that; k0 holds none."""
    seeds = [s.numpy() for s in LOOC.slot_seeds(tf.constant([9, 4], tf.int64))]
    slot = {s.name: s.seed_slot for s in registry.PIPELINE}
    q, k0, k_color, k_rotation = seeds
    for view, shared in ((k0, set()), (k_color, {slot["color"]}), (k_rotation, {slot["rotation"]})):
        equal = {r for r in range(len(q)) if np.array_equal(view[r], q[r])}
        assert equal == shared


def test_host_and_device_modes_give_the_same_n_views():
    """The same draws and ω (the device-measured colour shift up to uint8 rounding), and the same views up to
    the uint8 rounding of the device stage's input (the bound of tests/test_device_stage.py)."""
    config = AugmentConfig(image_size=32, probabilities=ALL_ON)
    host, device = _views(config, LOOC), _views(config, LOOC, "device")
    for j in range(1, 5):
        h = np.stack([ex[f"view{j}"].numpy() for ex in host])
        d = np.stack([ex[f"view{j}"].numpy() for ex in device])
        assert np.abs(d - h).mean() <= 2e-3, j
        for a, b in zip(host, device, strict=True):
            assert a[f"omega{j}"].keys() == b[f"omega{j}"].keys()
            for key, value in a[f"omega{j}"].items():
                if key == "color_diff":
                    np.testing.assert_allclose(b[f"omega{j}"][key].numpy(), value.numpy(), atol=2e-3)
                else:
                    np.testing.assert_array_equal(b[f"omega{j}"][key].numpy(), value.numpy(), err_msg=key)


def test_a_dataset_of_four_views_replays_exactly_and_device_batches_finish_all_four():
    source = load_source("shapes", "test")
    config = AugmentConfig(image_size=16)
    kwargs = dict(seed=2, batch_size=4, shuffle_buffer=100, start_epoch=1, views=LOOC)
    a, b = (next(iter(make_pair_dataset(source, config, **kwargs))) for _ in range(2))
    assert _digest(a) == _digest(b) and {f"view{j}" for j in range(1, 5)} <= set(a)
    device = next(iter(make_pair_dataset(source, config, photometric="device", **kwargs)))
    finished = finish_views(device, config)
    for j in range(1, 5):
        assert finished[f"view{j}"].dtype == tf.float32
        assert "color_diff" in finished[f"omega{j}"]  # measured by the device stage on every view
        assert np.abs(finished[f"view{j}"].numpy() - a[f"view{j}"].numpy()).mean() <= 2e-3


def test_a_plan_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="unknown augmentation 'sepia'"):
        leave_one_out(("sepia",))
    with pytest.raises(ValueError, match="only from an earlier view"):
        ViewPlan((ViewSpec(), ViewSpec((("color", 1),))))
    with pytest.raises(ValueError, match="at least 2 views"):
        ViewPlan((ViewSpec(),))
    no_omega = Step(name="shake", seed_slot=40, sample=lambda seed, shape, config: {},
                    transform=lambda image, params, config: image)
    with registry.registered(no_omega, after="crop"):
        with pytest.raises(ValueError, match="'shake' has no parameters ω to copy"):
            leave_one_out(("shake",))
