"""Conditioned projectors (--condition, CASSLE): the descriptors are TRUE (the view is rebuilt from them and the
image), a model without conditioning is today's model, and with it every method's projector reads ω and
trains its ω-embedding MLP — on one device, on 2 replicas, in device photometric mode; the export stays the
backbone alone. The kill -9 resume of a conditioned run is in tests/test_resume.py."""

from __future__ import annotations

import dataclasses
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import each_method
from helpers import (
    SMALL,
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    eager_steps,
    one_device_and_two_replicas,
    run_steps,
    tiny_backbone,
    tiny_run,
    with_conditioning,
)
from test_augment import GRAY, NP_JITTER, np_blur, random_image, rebuild_from_crop

from augself_tf.augment import AugmentConfig, augment_view, finish_views, registry
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.methods import build_method
from augself_tf.methods.model_config import ModelConfig
from augself_tf.objectives.conditioning import DEFAULT_DEPTH, DEFAULT_WIDTH, ConditionedHead, Conditioning
from augself_tf.training.loop import train

METHODS = ["simsiam", "moco", "byol", "simclr", "swav", "supervised"]
# The reference's descriptors and sizes (mprzewie/AugSelf cond_utils.AUG_DESC_SIZE_CONFIG).
REFERENCE_SIZES = {"crop": 4, "color": 4, "flip": 1, "blur": 1, "grayscale": 1, "color_diff": 3}
# What the reference's ImageNet-100 MoCo v2 + CASSLE run conditions on (its README; flags/imagenet100_moco_cassle.cfg).
CASSLE = ("crop", "color", "color_diff", "blur", "grayscale")
SIZE = 8


def conditioned_batch(seed: int = 0, n: int = 8, size: int = SIZE) -> dict:
    """helpers.batch plus random ω entries the descriptors read beyond AugSelf's (grayscale, colour shift)."""
    out = batch(seed, n=n, size=size)
    rng = np.random.default_rng(seed + 100)
    for key in ("omega1", "omega2"):
        out[key] = {**out[key], "grayscale": (rng.uniform(size=[n, 1]) < 0.5).astype("float32"),
                    "color_diff": rng.normal(0, 0.1, [n, 3]).astype("float32")}
    return out


def build(method: str, *, seed: int = 1, sync: bool = False, **common) -> keras.Model:
    """A built model on the tiny backbone with SMALL heads; ``common`` goes to the base (condition, augself...).
    Outside a strategy scope, layer names depend only on the arguments (Keras' name counters are reset)."""
    if not tf.distribute.has_strategy():  # resetting would drop the scope's graph state
        # the name counters only: its gc.collect walked all that earlier tests left alive (3% of the tier in a profile)
        keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(seed)
    common.setdefault("augment", AugmentConfig(image_size=SIZE))
    model = build_method(method, tiny_backbone(sync), options={**SMALL, "queue_size": 16, "total_steps": 10},
                         synchronized_bn=sync, **with_conditioning(common))
    model.build_all(SIZE)
    return model


def head(model) -> ConditionedHead:
    """The head a method conditions: its projector, or the supervised classifier."""
    return model.classifier if model.method_name == "supervised" else model.projector


# ----------------------------------------------------------------------------------- the descriptors


def test_descriptors_are_the_references_and_declared_in_the_registry():
    assert {name: registry.DESCRIPTORS[name].dim for name in REFERENCE_SIZES} == REFERENCE_SIZES
    # Every descriptor is declared by a pipeline step, beside its ω; colour's shift is measured there.
    declared = {d.name: s.name for s in registry.PIPELINE for d in s.descriptors}
    assert set(declared) == set(registry.DESCRIPTORS) and declared["color_diff"] == "color"
    assert registry.OMEGA_DIMS["grayscale"] == 1 and registry.OMEGA_DIMS["color_diff"] == 3
    assert registry.parse_condition("none") == registry.parse_condition("") == ()
    assert registry.parse_condition(" color, crop,color") == ("color", "crop")
    with pytest.raises(ValueError, match="unknown descriptor 'hue'"):
        registry.parse_condition("crop,hue")
    # The description concatenates the descriptors sorted by name, as the reference's sorted(aug_cond).
    conditioning = Conditioning.create(["grayscale", "crop", "color_diff"])
    assert conditioning.names == ("color_diff", "crop", "grayscale") and conditioning.size == 8
    assert (conditioning.width, conditioning.depth) == (DEFAULT_WIDTH, DEFAULT_DEPTH) == (64, 6)
    assert Conditioning.create(()) is None


def _rebuild(image, d: dict, config: AugmentConfig):
    """The view from the image and the descriptors alone, decoded as the reference encodes them; returns
    (candidate views over the jitter orders, their pre-jitter image and jittered image)."""
    size = config.image_size
    flip = bool(d["flip"][0] > 0.5)
    cy, cx, h, w = d["crop"]
    pre = rebuild_from_crop(image, [cy, 1 - cx if flip else cx, h, w], flip, size).astype(np.float64)
    # color = (factor − 1) / (hi − lo) for b, c, s and hue / (hi − lo): factor = identity + d·(hi − lo).
    s = config.jitter_strength
    widths = [(1 + s[i]) - max(0.0, 1 - s[i]) for i in range(3)] + [2 * s[3]]
    factors = [identity + d["color"][i] * widths[i] for i, identity in enumerate([1.0, 1.0, 1.0, 0.0])]
    orders = itertools.permutations(range(4)) if np.any(d["color"] != 0) else [()]
    for order in orders:
        jittered = pre
        for i in order:
            jittered = NP_JITTER[i](jittered, factors[i])
        x = np.repeat((jittered @ GRAY)[..., None], 3, axis=-1) if d["grayscale"][0] > 0.5 else jittered
        sigma = float(d["blur"][0])  # σ in pixels, 0 when not applied
        yield (np_blur(x, sigma, config.blur_kernel_size) if sigma > 0 else x), pre, jittered


def test_the_view_is_rebuilt_from_the_image_and_its_description():
    """Crop, flip, colour factors, grayscale and σ from the description rebuild the view; the colour shift
    is the mean of the pre-jitter image minus that of the jittered one (the reference's color_diff)."""
    image = random_image(30, 40, 3, 5)
    config = AugmentConfig(image_size=24, probabilities=dict(jitter_prob=0.7, gray_prob=0.4, blur_prob=0.6))
    assert config.blur_kernel_size == 3  # a real blur at 24 px
    conditioning = Conditioning.create(list(REFERENCE_SIZES))
    seen = set()
    for s in range(12):
        view, omega = augment_view(tf.constant(image), tf.constant([s, 77], tf.int64), config)
        description = conditioning.describe({k: v[None] for k, v in omega.items()}, config).numpy()[0]
        splits = np.cumsum([REFERENCE_SIZES[n] for n in conditioning.names])[:-1]
        d = dict(zip(conditioning.names, np.split(description, splits), strict=True))
        view = view.numpy()
        match = next(((pre, jit) for cand, pre, jit in _rebuild(image, d, config)
                      if np.abs(cand - view).max() < 1e-4), None)
        assert match is not None, f"seed {s}: the description does not rebuild the view"
        pre, jittered = match
        np.testing.assert_allclose(d["color_diff"], pre.mean((0, 1)) - jittered.mean((0, 1)), atol=1e-5)
        seen |= {("flip", bool(d["flip"][0])), ("jitter", bool(np.any(d["color"]))),
                 ("gray", bool(d["grayscale"][0])), ("blur", bool(d["blur"][0]))}
    assert len(seen) == 8, seen  # every descriptor was seen on and off


def test_device_mode_gives_the_same_descriptions():
    config = AugmentConfig(image_size=16)
    conditioning = Conditioning.create(list(REFERENCE_SIZES))
    source = load_source("shapes", "test")
    host, dev = (finish_views(next(iter(make_pair_dataset(source, config, seed=4, batch_size=16, num_epochs=1,
                                                          photometric=mode))), config) for mode in ("host", "device"))
    start = sum(REFERENCE_SIZES[n] for n in conditioning.names[: conditioning.names.index("color_diff")])
    shift = list(range(start, start + 3))  # the colour shift's columns
    for key in ("omega1", "omega2"):
        a, b = (conditioning.describe(x[key], config).numpy() for x in (host, dev))
        np.testing.assert_array_equal(np.delete(a, shift, 1), np.delete(b, shift, 1))  # drawn: identical
        np.testing.assert_allclose(a[:, shift], b[:, shift], atol=2e-3)  # uint8 rounding before the jitter
        assert np.abs(a[:, shift]).max() > 1e-2


# ----------------------------------------------------------------------------------- the model


@pytest.mark.parametrize("method", each_method(METHODS))
def test_condition_none_is_the_model_and_step_of_today(method):
    """Built with condition=() (or the default kwargs of the feature), a method has the same variables, the
    same values and the same train step as a model built without the feature; it never reads the new ω."""
    plain = build(method, augself=("crop",))
    off = build(method, augself=("crop",), condition=(), condition_width=8, condition_depth=2)
    assert off.conditioning is None and not isinstance(head(off), ConditionedHead)
    assert [v.path for v in off.weights] == [v.path for v in plain.weights]
    assert not any("omega" in v.path or "conditioned" in v.path for v in off.weights)
    for a, b in zip(plain.weights, off.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    b = batch(0)  # AugSelf's ω only: no grayscale or colour-shift entry is needed
    for model in (plain, off):
        compile_model(model)
    # Untraced: the two steps' code and arithmetic are compared; the plain step's trace is every method test's.
    logs_plain, logs_off = eager_steps(plain, [b]), eager_steps(off, [b])
    assert logs_plain == logs_off
    for a, c in zip(plain.weights, off.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), c.numpy(), err_msg=a.path)


@pytest.mark.parametrize("method", each_method(METHODS))
def test_the_projector_reads_omega_and_the_loss_trains_the_omega_mlp(method):
    model = build(method, condition=CASSLE, condition_width=8, condition_depth=3)
    conditioned = head(model)
    assert isinstance(conditioned, ConditionedHead) and model.conditioning.size == 13
    assert len(conditioned.embedding.layers) == 3 * 3 - 1  # (Linear, BN, ReLU) x 2 + Linear, BN
    b = conditioned_batch(0)
    f = model.backbone(b["view1"], training=False)
    d1 = model.describe(b["omega1"])
    d2 = model.describe(b["omega2"])
    assert d1.shape == (8, 13)
    x1, x2 = model.head_input(f, b["omega1"]), model.head_input(f, b["omega2"])
    np.testing.assert_array_equal(x1.numpy(), np.concatenate([f.numpy(), d1.numpy()], 1))
    # Same features, another description: another projection (in training mode too: not a batch constant).
    for training in (False, True):
        z1, z2 = conditioned(x1, training=training).numpy(), conditioned(x2, training=training).numpy()
        assert np.abs(z1 - z2).max() > 1e-3, training
    # ... and exactly the head on [f, e(d)].
    embedded = conditioned.embedding(d1, training=False)
    np.testing.assert_allclose(conditioned(x1, training=False).numpy(),
                               conditioned.head(tf.concat([f, embedded], 1), training=False).numpy(), rtol=1e-6)
    assert not np.allclose(d1.numpy(), d2.numpy())
    # The loss's gradient reaches every kernel of the ω-MLP.
    kernels = [v for v in conditioned.embedding.trainable_variables if "kernel" in v.path]
    assert len(kernels) == 3 and {id(v) for v in kernels} <= {id(v) for v in model.optimized_variables()}
    with tf.GradientTape() as tape:
        total = model.compute_losses(b, training=True).total
    grads = tape.gradient(total, kernels)
    for v, g in zip(kernels, grads, strict=True):
        assert g is not None and float(tf.norm(g)) > 0, v.path
    # Another description of view 1 alone (same images) changes the method's loss.
    other = {**b, "omega1": conditioned_batch(5)["omega1"]}
    assert float(model.compute_losses(other, False).logs["loss/method"]) != pytest.approx(
        float(model.compute_losses(b, False).logs["loss/method"]), rel=1e-6)


@pytest.mark.parametrize("method, encoder", [("moco", "key_encoder"), ("byol", "target_encoder")])
def test_the_momentum_target_has_its_own_ema_omega_mlp(method, encoder):
    model = build(method, condition=("crop", "color"), condition_width=8, condition_depth=2)
    online, target = model.projector.embedding, getattr(model, encoder).projector.embedding
    assert isinstance(getattr(model, encoder).projector, ConditionedHead)
    pairs = list(zip(online.trainable_variables, target.trainable_variables, strict=True))
    assert pairs and {id(t) for _, t in pairs} <= {id(v) for v in model.target_variables()}
    for o, t in pairs:  # copied at build
        assert o is not t
        np.testing.assert_array_equal(o.numpy(), t.numpy())
    compile_model(model, lr=0.5)
    before = [t.numpy() for _, t in pairs]
    eager_steps(model, [conditioned_batch(1)])  # the update's arithmetic (test_condition_kinds traces such steps)
    m = model.key_momentum if method == "moco" else float(model.current_tau())
    moved = 0
    for (o, t), old in zip(pairs, before, strict=True):
        np.testing.assert_allclose(t.numpy(), m * old + (1 - m) * o.numpy(), rtol=1e-5, atol=1e-7, err_msg=t.path)
        moved += not np.array_equal(t.numpy(), old)
    assert moved


def test_two_replicas_equal_one_device_with_a_conditioned_projector():
    """SimCLR (negatives over the global batch) with the ω-MLP's BN synchronised: 2 replicas = 1 device."""
    b = conditioned_batch(6)
    common = dict(condition=("crop", "color", "grayscale"), condition_width=8, condition_depth=2, sync=True)
    single, double, one, two = one_device_and_two_replicas(lambda: build("simclr", **common), b)
    assert_replicas_equal_one_device(single, double, one, two)
    # The check covered the ω-MLP: its weights are among those compared.
    embedding = {id(v) for v in double.projector.embedding.weights}
    assert embedding and embedding <= {id(w) for w in double.weights}


@pytest.mark.slow
def test_a_conditioned_run_with_augself_in_device_mode_exports_the_backbone_alone(tmp_path):
    """train(): MoCo + AugSelf{crop,color} + the reference's five descriptors, device photometric mode."""
    cfg = tiny_run(str(tmp_path / "run"), condition=CASSLE, condition_width=16, condition_depth=2, max_steps=2,
                   photometric="device", export=True)
    result = train(cfg)
    assert result.steps == 2 and all(np.isfinite(v) for v in result.last_logs.values())
    assert result.last_logs["loss/augself"] > 0
    model = result.model
    assert model.conditioning.names == tuple(sorted(CASSLE)) and isinstance(model.projector, ConditionedHead)
    assert isinstance(model.key_encoder.projector, ConditionedHead)
    loaded = tf.saved_model.load(result.saved_model_dir)
    assert len(loaded.trainable_weights) == len(model.backbone.trainable_variables)
    assert not any("omega" in v.name or "projector" in v.name for v in loaded.trainable_weights)
    images = np.random.default_rng(0).uniform(size=[2, 16, 16, 3]).astype("float32")
    features = loaded.signatures["serving_default"](images=tf.constant(images))["features"].numpy()
    np.testing.assert_allclose(features, model.backbone(images, training=False).numpy(), rtol=1e-4, atol=1e-5)
    assert dataclasses.replace(cfg, model_dir=None).resolved_model_dir().endswith(
        "moco_augself_crop_color_condition_crop_color_color_diff_blur_grayscale")


def test_the_model_is_handed_the_conditioning_its_settings_built():
    """ModelConfig builds the Conditioning once, from its condition* fields, and hands that object to the model."""
    cfg = ModelConfig(method="simsiam", condition=("crop", "color"), condition_width=4, condition_depth=2,
                      condition_kind="hypernet", width=0.0625)
    built = cfg.conditioning()
    assert built == Conditioning.create(("color", "crop"), 4, 2, kind="hypernet") and cfg.conditioning() is built
    model = cfg.build(options={**SMALL, "total_steps": 1, "steps_per_epoch": 1}, input_mean=(0.5,) * 3,
                      input_std=(0.25,) * 3, synchronized_bn=False, augment=AugmentConfig(image_size=SIZE))
    assert model.conditioning is built
    assert dataclasses.replace(cfg, condition=(), condition_kind="concat").conditioning() is None


def test_a_method_that_conditions_no_head_is_refused():
    with pytest.raises(ValueError, match="method 'none' conditions no head"):
        build("none", condition=("crop",))
    # docs/architecture.md's "Adding a method" example wraps its projector: conditioning then just works.
    from test_methods_base import MyMethod

    from augself_tf.methods import METHODS

    with METHODS.registered("mymethod", MyMethod):
        model = build("mymethod", condition=("crop", "flip"), condition_width=4, condition_depth=1)
    assert isinstance(model.projector, ConditionedHead) and model.head_input_dim == model.feature_dim + 5
    compile_model(model)
    assert np.isfinite(run_steps(model, [batch(3)])[0]["loss/method"])
