"""MoCo v3 (augself_tf/methods/mocov3.py): its loss against NumPy (keys gathered across replicas, labels offset by
the replica's rank), its heads' shapes on a ViT and a ResNet, the EMA on its cosine momentum, its asymmetric views,
and a step on 2 replicas equal to one on one device."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    S,
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    make_model,
    np_log_softmax,
    one_device_and_two_replicas,
    unit,
)

from augself_tf.augment import AugmentConfig
from augself_tf.augment.pipeline import augment_views
from augself_tf.augment.views import TWO_VIEWS
from augself_tf.losses.moco_v3 import moco_v3_contrastive
from augself_tf.methods import build_method, view_plan
from augself_tf.methods.mocov3 import ASYMMETRIC_VIEWS
from augself_tf.models import vit
from augself_tf.models.vit import ViTSize, build_vit

T = 0.2


def numpy_moco_v3(q: np.ndarray, k_all: np.ndarray, rank: int, temperature: float = T) -> float:
    """builder.py contrastive_loss on one rank: CE(q̂·k̂_allᵀ/T, arange(N) + N·rank)·2T."""
    logits = unit(q) @ unit(k_all).T / temperature
    n = q.shape[0]
    labels = np.arange(n) + n * rank
    return float(-np.mean(np_log_softmax(logits)[np.arange(n), labels]) * 2 * temperature)


def tiny_vit_model(seed: int = 1, **options):
    """MoCo v3 on a ViT of width 8 (2 blocks, patch 4) with small heads."""
    keras.utils.set_random_seed(seed)
    vit.VIT_SIZES["vit_test"] = ViTSize(8, 2, 2, 4)
    try:
        backbone = build_vit("vit_test", image_size=S)
    finally:
        del vit.VIT_SIZES["vit_test"]
    model = build_method("mocov3", backbone, options={"projector_hidden": 16, "projector_dim": 8,
                                                      "predictor_hidden": 12, **options}, augself={"crop": 1.0})
    model.build_all(S)
    return model


@pytest.mark.parametrize("backbone", ["tiny_conv", "vit"])
def test_symmetric_loss_matches_numpy(backbone):
    model = tiny_vit_model() if backbone == "vit" else make_model("mocov3", augself=())
    b = batch(3, n=6)
    f1, f2 = (model.backbone(b[v], training=False) for v in ("view1", "view2"))
    loss, _ = model.method_loss(f1, f2, b, training=False)
    q1, q2 = (model.predictor(model.projector(f, training=False), training=False).numpy() for f in (f1, f2))
    encoder = model.momentum_encoder
    k1, k2 = (encoder.projector(encoder.backbone(b[v], training=False), training=False).numpy()
              for v in ("view1", "view2"))
    want = numpy_moco_v3(q1, k2, 0) + numpy_moco_v3(q2, k1, 0)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["one_device", "collective"])
def test_each_replica_contrasts_its_queries_with_every_replicas_keys(reduction):
    from conftest import mirrored_cpus

    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 8, 5)).astype(np.float32), rng.normal(size=(2, 8, 5)).astype(np.float32)
    strategy = mirrored_cpus(reduction)
    values = [strategy.experimental_distribute_values_from_function(lambda ctx, x=x: x[ctx.replica_id_in_sync_group])
              for x in (q, k)]

    @tf.function
    def run():
        return strategy.run(lambda a, b: moco_v3_contrastive(a, b, T), args=values)

    per_replica = [float(v) for v in strategy.experimental_local_results(run())]
    keys = np.concatenate([k[0], k[1]])
    want = [numpy_moco_v3(q[r], keys, r) for r in range(2)]
    np.testing.assert_allclose(per_replica, want, rtol=1e-5)
    # The rank's offset matters: labels 0..N-1 on replica 1 give another loss.
    assert abs(numpy_moco_v3(q[1], np.concatenate([k[1], k[0]]), 0) - want[1]) < 1e-5  # its own keys, first
    assert abs(numpy_moco_v3(q[1], keys, 0) - want[1]) > 1e-3


def test_heads_are_moco_v3s_and_the_ema_covers_backbone_and_projector_only():
    model = tiny_vit_model()
    names = {v.path.split("/")[-1] for v in model.projector.weights}
    assert not any(v.path.endswith("bias") for v in model.projector.weights + model.predictor.weights)
    assert [layer.name for layer in model.projector.layers if "fc" in layer.name] == \
        ["projector_fc1", "projector_fc2", "projector_fc3"]  # 3 layers on a ViT
    last_bn = model.projector.get_layer("projector_bn3")
    assert not last_bn.center and not last_bn.scale and "moving_variance" in names
    assert not model.predictor.get_layer("predictor_bn2").scale  # the ViT predictor ends in BN without affine
    conv = make_model("mocov3", augself=())
    assert [layer.name for layer in conv.projector.layers if "fc" in layer.name] == ["projector_fc1", "projector_fc2"]
    assert isinstance(conv.predictor.layers[-1], keras.layers.Dense)  # a ResNet's predictor: no BN at the end
    ema = {id(v) for v in model.target_variables()}
    online = model.backbone.trainable_weights + model.projector.trainable_weights
    assert len(ema) == len(online) and not ema & {id(v) for v in model.optimized_variables()}
    assert {id(v) for v in model.predictor.trainable_weights} <= {id(v) for v in model.optimized_variables()}


def test_momentum_encoder_follows_the_cosine_schedule_shifted_to_the_next_step():
    total = 4
    model = make_model("mocov3", augself=("crop",), total_steps=total)
    compile_model(model, lr=0.1, total_steps=total)
    online = model.backbone.trainable_weights + model.projector.trainable_weights
    encoder = model.momentum_encoder
    target = encoder.backbone.trainable_weights + encoder.projector.trainable_weights
    for t in range(total):
        before = [w.numpy() for w in target]
        logs = model.train_step(tf.nest.map_structure(tf.convert_to_tensor, batch(t)))
        m = 1 - 0.5 * (1 + math.cos(math.pi * (t + 1) / total)) * (1 - 0.99)  # main_moco.py, before step t + 1
        assert float(logs["mocov3/momentum"]) == pytest.approx(m, abs=1e-6)
        for o, w, old in zip(online, target, before, strict=True):
            np.testing.assert_allclose(w.numpy(), m * old + (1 - m) * o.numpy(), rtol=1e-5, atol=1e-7)
    assert float(logs["mocov3/momentum"]) == pytest.approx(1.0)
    constant = make_model("mocov3", augself=(), total_steps=total, momentum_cosine=False, moco_momentum=0.999)
    assert [float(constant.momentum_at(tf.constant(t))) for t in (0, total - 1)] == pytest.approx([0.999, 0.999])


def test_views_are_moco_v3s_asymmetric_blur_and_solarization():
    assert view_plan("mocov3", {}) is ASYMMETRIC_VIEWS
    assert view_plan("mocov3", {"asymmetric_views": False}) is TWO_VIEWS
    config = AugmentConfig(image_size=16, probabilities={"blur_prob": 0.5, "solarize_prob": 0.0})
    n = 400
    images = tf.random.stateless_uniform([n, 16, 16, 3], [1, 2], maxval=256, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((tf.cast(images, tf.uint8), tf.range(n, dtype=tf.int64)))
    data = data.map(lambda im, i: augment_views(im, tf.stack([i, tf.constant(7, tf.int64)]), config, ASYMMETRIC_VIEWS))
    views = data.batch(n).get_single_element()
    blurred = [float(np.mean(views[f"omega{j}"]["blur"].numpy()[:, 0] > 0)) for j in (1, 2)]
    solarized = [float(np.mean(views[f"omega{j}"]["solarize"].numpy()[:, 0] < 1)) for j in (1, 2)]
    assert blurred[0] == 1.0 and 0.05 < blurred[1] < 0.16  # p 1.0 and 0.1
    assert solarized[0] == 0.0 and 0.14 < solarized[1] < 0.27  # p 0 and 0.2


def test_two_replicas_equal_one_device_with_keys_gathered():
    b = batch(5, n=8)
    single, double, one, two = one_device_and_two_replicas(
        lambda: make_model("mocov3", augself=("crop",), sync=tf.distribute.has_strategy(), total_steps=10), b)
    assert_replicas_equal_one_device(single, double, one, two)
