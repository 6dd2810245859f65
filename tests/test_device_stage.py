"""The device stage: tf.data does the geometry and ships uint8 views, `finish_views` applies the photometric
steps batched in the training step. Same seeds -> same ω and, up to uint8 rounding, the same views as the
host pipeline, on real images; plus a toy augmentation registered in the test alone, predicted and trained."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf
from helpers import make_config, real_images

from augself_tf.augment import AugmentConfig, augment_view, augment_view_for_device, finish_views, ops, registry
from augself_tf.augment.steps import DEVICE, HOST, Augmentation, Descriptor, Measurement, Probability, tanh_mse
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.training.loop import train

ON = dict(flip_prob=1.0, jitter_prob=1.0, gray_prob=0.0, blur_prob=1.0, rotation_prob=1.0, solarize_prob=1.0)
OFF = dict(flip_prob=0.0, jitter_prob=0.0, gray_prob=0.0, blur_prob=0.0)


IMAGES = real_images(tiny=(97, 16), cifar=(211, 8))


def _stack(items: list) -> dict:
    return tf.nest.map_structure(lambda *xs: tf.stack(xs), *items)


def _device_batch(config: AugmentConfig, salt: int) -> dict:
    """Every image's device-mode view (uint8) with its ω and device-stage draws, as a pair batch whose two
    views are the same, ready for finish_views."""
    views, omegas, draws = [], [], []
    for i, image in enumerate(IMAGES):
        view8, omega, params = augment_view_for_device(image, tf.constant([salt, i], tf.int64), config)
        assert view8.dtype == tf.uint8
        views.append(view8)
        omegas.append(omega)
        draws.append(params)
    views, omegas, draws = tf.stack(views), _stack(omegas), _stack(draws)
    return {"view1": views, "view2": views, "device1": draws, "device2": draws, "omega1": omegas, "omega2": omegas}


def _both_modes(config: AugmentConfig, salt: int) -> tuple[np.ndarray, np.ndarray, list, list, dict]:
    """(host views, finished device views, host ω, device ω (the measurements finish_views adds included),
    device draws) for every image."""
    host, omega_h = [], []
    for i, image in enumerate(IMAGES):
        view, omega = augment_view(image, tf.constant([salt, i], tf.int64), config)
        host.append(view.numpy())
        omega_h.append(omega)
    batch = _device_batch(config, salt)
    params = batch["device1"]
    finished = finish_views(batch, config)
    assert finished["view1"].dtype == tf.float32
    measured = {m.name for s in registry.PIPELINE if s.stage == DEVICE for m in s.measurements}
    assert set(finished["omega1"]) == set(batch["omega1"]) | measured and measured
    omega_d = [{k: v[i] for k, v in finished["omega1"].items()} for i in range(len(IMAGES))]
    return np.stack(host), finished["view1"].numpy(), omega_h, omega_d, params


@pytest.mark.parametrize(
    "name, config",
    [
        ("every op on", AugmentConfig(image_size=40, probabilities=ON)),
        ("every op on, grayscale too", AugmentConfig(image_size=40, probabilities={**ON, "gray_prob": 1.0})),
        ("every op off", AugmentConfig(image_size=40, probabilities=OFF)),
        ("the paper's probabilities", AugmentConfig(image_size=40)),
        ("the paper's, 96 px (9-tap blur), strong colour", AugmentConfig(image_size=96, color_strength=1.5)),
    ],
)
def test_device_stage_equals_host_pipeline_on_real_images(name, config):
    host, device, omega_h, omega_d, params = _both_modes(config, salt=hash(name) % 1000)
    assert device.shape == host.shape
    assert np.abs(device - host).mean() <= 2e-3, name
    for a, b in zip(omega_h, omega_d, strict=True):
        assert a.keys() == b.keys() == set(registry.OMEGA_DIMS)
        for key in a:
            if key == "color_diff":  # measured on the view entering the jitter: uint8-rounded in device mode
                np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), atol=2e-3, err_msg=key)
            else:  # drawn: identical
                np.testing.assert_array_equal(a[key].numpy(), b[key].numpy(), err_msg=key)
    if config.probability("jitter_prob") == 1.0:  # the batch mixes jitter orders: each example must get its own
        assert len({tuple(o) for o in params["color"]["order"].numpy()}) >= 5


@pytest.mark.usefixtures("production_graph_optimizer")  # the step as XLA compiles it in production
def test_finish_views_compiled_with_xla_gives_the_same_views():
    """--jit_compile traces finish_views inside the XLA-compiled step: the same views and ω as uncompiled."""
    config = AugmentConfig(image_size=40, probabilities=ON)
    batch = _device_batch(config, salt=11)
    want = finish_views(batch, config)
    got = tf.function(lambda b: finish_views(b, config), jit_compile=True)(batch)
    np.testing.assert_allclose(got["view1"].numpy(), want["view1"].numpy(), rtol=0, atol=1e-5)
    for key in want["omega1"]:
        np.testing.assert_allclose(got["omega1"][key].numpy(), want["omega1"][key].numpy(), rtol=0, atol=1e-5,
                                   err_msg=key)


def test_rounding_is_the_only_difference_without_thresholds():
    """With solarization off, nothing can amplify the uint8 rounding: each pixel within a few 1/255 steps."""
    config = AugmentConfig(image_size=40, probabilities={**ON, "solarize_prob": 0.0})
    host, device, *_ = _both_modes(config, salt=7)
    assert np.abs(device - host).max() <= 4 / 255


def test_finish_views_only_casts_a_host_batch():
    config = AugmentConfig(image_size=16)
    ds = make_pair_dataset(load_source("shapes", "test"), config, seed=0, batch_size=4, num_epochs=1)
    batch = next(iter(ds))
    out = finish_views(batch, config)
    for key in ("view1", "view2"):
        np.testing.assert_array_equal(out[key].numpy(), batch[key].numpy())
    with pytest.raises(ValueError, match="device-stage draws"):
        finish_views({**batch, "view1": tf.cast(batch["view1"] * 255, tf.uint8)}, config)


def test_device_mode_dataset_ships_uint8_and_the_same_omega():
    config = AugmentConfig(image_size=16)
    source = load_source("shapes", "test")
    host = next(iter(make_pair_dataset(source, config, seed=3, batch_size=8, num_epochs=1)))
    dev = next(iter(make_pair_dataset(source, config, seed=3, batch_size=8, num_epochs=1, photometric="device")))
    assert dev["view1"].dtype == tf.uint8 and host["view1"].dtype == tf.float32
    assert set(dev) == set(host) | {"device1", "device2"}
    assert set(dev["device1"]) == {s.name for s in registry.PIPELINE if s.stage == DEVICE}
    finished = finish_views(dev, config)
    for view in ("omega1", "omega2"):
        assert set(dev[view]) == set(host[view]) - {"color_diff"}  # measured by finish_views, on the device
        assert set(finished[view]) == set(host[view]) == set(registry.OMEGA_DIMS)
        for key in host[view]:
            if key == "color_diff":
                np.testing.assert_allclose(finished[view][key].numpy(), host[view][key].numpy(), atol=2e-3)
            else:
                np.testing.assert_array_equal(dev[view][key].numpy(), host[view][key].numpy())
    assert np.abs(finished["view2"].numpy() - host["view2"].numpy()).mean() <= 2e-3
    with pytest.raises(ValueError, match="photometric must be one of host, device"):
        make_pair_dataset(source, config, seed=3, batch_size=8, photometric="gpu")


def _jitter_one_by_one(x: np.ndarray, factors: np.ndarray, order: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """Each example alone, its 4 adjustments applied in its own order (no batching across examples)."""
    steps = [lambda y, f: ops.adjust_brightness(y, f[0]), lambda y, f: ops.adjust_contrast(y, f[1]),
             lambda y, f: ops.adjust_saturation(y, f[2]), lambda y, f: ops.adjust_hue_batch(y, f[3:4])]
    out = []
    for b in range(len(x)):
        y = tf.constant(x[b : b + 1])
        for k in order[b] if applied[b] else ():
            y = steps[k](y, tf.constant(factors[b]))
        out.append(y.numpy()[0])
    return np.stack(out)


def test_batched_jitter_gives_each_example_its_own_order_by_every_method():
    """All 24 orders in one batch, some examples not jittered: partition (each adjustment on the examples that
    need it) and select (all four everywhere) both equal the example-by-example computation bit for bit, also
    when a part is empty (one order for the whole batch, nothing applied) and for a batch of one."""
    rng = np.random.default_rng(5)
    orders = np.array(list(itertools.permutations(range(4))), np.int32)
    n = len(orders)
    x = rng.uniform(size=(n, 12, 12, 3)).astype(np.float32)
    x[:, :2] = rng.integers(0, 2, size=(n, 2, 12, 3))  # saturated pixels: the clipping matters
    factors = np.stack([rng.uniform(0.2, 1.8, n), rng.uniform(0.2, 1.8, n), rng.uniform(0.2, 1.8, n),
                        rng.uniform(-0.5, 0.5, n)], 1).astype(np.float32)
    applied = rng.uniform(size=n) < 0.75
    applied[:2] = [True, False]
    cases = {
        "all 24 orders": (x, factors, orders, applied),
        "one order for all": (x, factors, np.tile(orders[9], (n, 1)), np.ones(n, bool)),
        "nothing applied": (x, factors, orders, np.zeros(n, bool)),
        "a batch of one": (x[:1], factors[:1], orders[16:17], np.ones(1, bool)),
    }
    # One traced function per method, the cases its arguments (as the training step passes them): a trace per
    # batch shape, not one per case.
    graphs = {method: tf.function(functools.partial(ops.color_jitter_batch, method=method))
              for method in ops.JITTER_METHODS}
    for name, (xs, fs, os_, ap) in cases.items():
        want = _jitter_one_by_one(xs, fs, os_, ap)
        for method in ops.JITTER_METHODS:
            got = ops.color_jitter_batch(tf.constant(xs), fs, os_, tf.constant(ap), method=method).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, {method}")
            graph = graphs[method](tf.constant(xs), tf.constant(fs), tf.constant(os_), tf.constant(ap)).numpy()
            np.testing.assert_array_equal(graph, want, err_msg=f"{name}, {method}, graph")
    without_mask = ops.color_jitter_batch(tf.constant(x), factors, orders).numpy()
    np.testing.assert_array_equal(without_mask, _jitter_one_by_one(x, factors, orders, np.ones(n, bool)))
    with pytest.raises(ValueError, match="method must be one of"):
        ops.color_jitter_batch(tf.constant(x), factors, orders, method="gather")


@pytest.mark.usefixtures("production_graph_optimizer")  # the jitter as XLA compiles it in production
def test_batched_jitter_takes_static_shapes_under_xla_and_gives_the_same_pixels():
    """Compiled with XLA, "auto" builds the select form, as before (dynamic partitions compile but run ~14x
    slower there); otherwise the partition form on a CPU (select on a GPU: tests/test_host_ops.py). Compiled or
    not, every form gives the example-by-example pixels (XLA fuses and reorders the float arithmetic, hence a
    tolerance, not bit equality)."""
    rng = np.random.default_rng(6)
    orders = np.array(list(itertools.permutations(range(4))), np.int32)
    n = len(orders)
    x = rng.uniform(size=(n, 8, 8, 3)).astype(np.float32)
    x[:, :2] = rng.integers(0, 2, size=(n, 2, 8, 3))  # saturated and grey pixels, where hue is singular
    factors = np.stack([rng.uniform(0.2, 1.8, n), rng.uniform(0.2, 1.8, n), rng.uniform(0.2, 1.8, n),
                        rng.uniform(-0.5, 0.5, n)], 1).astype(np.float32)
    applied = np.arange(n) % 3 != 0
    want = _jitter_one_by_one(x, factors, orders, applied)
    xt = tf.constant(x)
    for jit in (False, True):
        fn = tf.function(lambda a: ops.color_jitter_batch(a, factors, orders, tf.constant(applied)), jit_compile=jit)
        op_types = {op.type for op in fn.get_concrete_function(xt).graph.get_operations()}
        assert ("DynamicPartition" in op_types) == (not jit and not ops.replica_on_accelerator()), jit
        np.testing.assert_allclose(fn(xt).numpy(), want, rtol=0, atol=1e-5, err_msg=f"auto, jit={jit}")
    for method in ops.JITTER_METHODS:
        fn = tf.function(functools.partial(ops.color_jitter_batch, method=method), jit_compile=True)
        got = fn(xt, tf.constant(factors), tf.constant(orders), tf.constant(applied)).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"{method} under XLA")


# ------------------------------------------------------------------ a toy augmentation, in this test only

SHIFT = 0.2


def _sample_shift(seed, shape, config):
    seeds = tf.random.experimental.stateless_split(seed, 2)
    return {"applied": tf.random.stateless_uniform([], seeds[0]) < config.probability("shift_prob"),
            "delta": tf.random.stateless_uniform([], seeds[1], -SHIFT, SHIFT)}


def _shift(image, params, config):
    return tf.where(params["applied"], tf.clip_by_value(image + params["delta"], 0.0, 1.0), image)


def _shift_batch(images, params, config):
    delta = tf.reshape(tf.where(params["applied"], params["delta"], 0.0), [-1, 1, 1, 1])
    return tf.clip_by_value(images + delta, 0.0, 1.0)


def _shift_omega(params, config):
    return tf.reshape(tf.where(params["applied"], params["delta"] / SHIFT, 0.0), [1])


TOY = Augmentation(
    name="shift", seed_slot=40, sample=_sample_shift, transform=_shift, stage=DEVICE,
    transform_batch=_shift_batch, omega=_shift_omega, omega_dim=1,
    probability=Probability("shift_prob", 0.5, "Brightness-shift probability."),
    head_dim=1, target=lambda o1, o2: o1["shift"] - o2["shift"], loss=tanh_mse, metric=tanh_mse,
    descriptors=(Descriptor("shift", 1, lambda omega, config: omega["shift"] * SHIFT),),  # δ itself
)


@pytest.fixture
def toy_registered():
    with registry.registered(TOY, after="color"):
        yield
    assert "shift" not in registry.AUGMENTATIONS


def test_a_toy_augmentation_is_one_entry_and_the_device_stage_applies_it(toy_registered):
    assert [s.name for s in registry.PIPELINE][:4] == ["crop", "flip", "color", "shift"]
    assert "shift" in registry.AUGSELF_CHOICES and registry.parse_augself("crop,shift") == ("crop", "shift")
    assert "shift" in registry.CONDITION_CHOICES and registry.parse_condition("shift,crop") == ("shift", "crop")
    config = AugmentConfig(image_size=16, probabilities={"shift_prob": 1.0})
    assert config.probability("shift_prob") == 1.0 and AugmentConfig().probability("shift_prob") == 0.5
    with pytest.raises(ValueError, match="shift_prob must be a probability"):
        AugmentConfig(probabilities={"shift_prob": 1.5})
    # ω travels from tf.data, the device stage applies it, and the two modes agree on real images.
    host, device, omega_h, _, _ = _both_modes(dataclasses.replace(config, image_size=32), salt=11)
    assert np.abs(device - host).mean() <= 2e-3
    assert all(abs(float(o["shift"][0])) > 0 for o in omega_h)


def test_a_pair_dataset_built_after_a_registration_runs_the_pipeline_registered_then():
    """Pair datasets of one config share a traced view function per process: one built while a step takes another's
    place (the same seed slots, so the same input signature) draws the new step, and one built after the swap is
    undone gives the first dataset's batch again, bit for bit."""
    rows = {"image": np.random.default_rng(5).integers(0, 256, (8, 20, 20, 3), np.uint8),
            "label": np.arange(8, dtype=np.int64)}
    config = AugmentConfig(image_size=16, probabilities=OFF)

    def first_batch() -> dict:
        data = make_pair_dataset((rows, lambda e: e), config, seed=3, batch_size=8, shuffle_buffer=8)
        return tf.nest.map_structure(lambda t: t.numpy(), next(iter(data)))

    names = [step.name for step in registry.PIPELINE]
    before = first_batch()
    rotation = registry.AUGMENTATIONS["rotation"]
    registry.unregister("rotation")
    try:
        with registry.registered(dataclasses.replace(TOY, seed_slot=rotation.seed_slot), after="color"):
            during = first_batch()
    finally:
        registry.register(rotation, after=names[names.index("rotation") - 1])
    assert [step.name for step in registry.PIPELINE] == names
    after = first_batch()
    assert "shift" not in before["omega1"] and set(during["omega1"]) == set(before["omega1"]) - {"rotation"} | {"shift"}
    shifted = during["omega1"]["shift"][:, 0] != 0
    assert shifted.any() and not np.allclose(during["view1"][shifted], before["view1"][shifted])
    tf.nest.map_structure(np.testing.assert_array_equal, after, before)


@pytest.mark.slow  # a whole train() run (docs/development.md): the entry above stays in the fast tier
def test_a_toy_augmentation_is_predicted_and_trained(toy_registered, tmp_path):
    config = AugmentConfig(image_size=16, probabilities={"shift_prob": 1.0})
    cfg = make_config(method="simsiam", augself=("crop", "shift"), condition=("shift",), dataset="shapes",
                      backbone="resnet18_cifar", condition_width=8, condition_depth=2,
                      width=0.0625, augment=config, batch_size=8, max_steps=1, model_dir=str(tmp_path),
                      method_options={"projector_dim": 16, "predictor_hidden": 8}, verbose=0, export=False,
                      photometric="device", shuffle_buffer=64, monitor="none")
    result = train(cfg)
    assert result.steps == 1
    assert np.isfinite(result.last_logs["augself/shift_loss"]) and result.last_logs["augself/shift_loss"] > 0
    assert "shift" in result.model.augself_heads
    # Its descriptor is what the conditioned projector reads (tests/test_conditioning.py tests the mechanism).
    assert result.model.conditioning.names == ("shift",) and result.model.conditioning.size == 1
    assert result.model.projector.embedding.trainable_variables


def test_register_rejects_what_would_break_the_contract():
    with pytest.raises(ValueError, match="unique names and seed slots"):
        registry.register(dataclasses.replace(TOY, seed_slot=2), after="color")
    with pytest.raises(ValueError, match="descriptors must have unique names"):
        registry.register(dataclasses.replace(TOY, descriptors=(Descriptor("crop", 1, None),)), after="color")
    with pytest.raises(ValueError, match="measurements must have names distinct"):
        registry.register(dataclasses.replace(TOY, measurements=(Measurement("flip", 1, None),)),
                          after="color")
    with pytest.raises(ValueError, match="does not commute"):
        registry.register(dataclasses.replace(TOY, stage=HOST), after="blur")
    with pytest.raises(ValueError, match="unknown step"):
        registry.register(TOY, after="nothing")
    with pytest.raises(ValueError, match="probability knobs must have unique names"):
        registry.register(dataclasses.replace(TOY, probability=Probability("flip_prob", 0.5, "x")), after="color")
    # A taken name is refused in one line, also while a test has registered its own step temporarily.
    with pytest.raises(ValueError, match=r"^augmentation step 'color' is already registered; choose another name$"):
        registry.register(dataclasses.replace(TOY, name="color", seed_slot=41), after="blur")
    with registry.registered(TOY, after="color"), pytest.raises(ValueError, match="'shift' is already registered"):
        registry.register(dataclasses.replace(TOY, seed_slot=41), after="blur")
    assert "shift" not in registry.AUGMENTATIONS and "shift_prob" not in AugmentConfig().probabilities
    with pytest.raises(TypeError):
        registry.AUGMENTATIONS["shift"] = TOY  # published read-only: steps are added with register
    assert [s.name for s in registry.PIPELINE] == ["crop", "flip", "color", "solarize", "grayscale", "blur",
                                                     "rotation"]
