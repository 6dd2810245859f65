"""The momentum encoder MoCo and BYOL share (augself_tf/methods/momentum.py): initial copy, the EMA rule
against NumPy, and its variables kept away from the optimizer."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, make_model, tiny_backbone

from augself_tf.methods.momentum import MomentumEncoder
from augself_tf.models.resnet import mlp


def _online_and_encoder():
    backbone = tiny_backbone()
    projector = mlp([5, 4], name="projector")
    projector(tf.zeros([2, 6]))
    encoder = MomentumEncoder(backbone, [5, 4], synchronized_bn=False, name="key")
    encoder.initialize(backbone, projector, feature_dim=6)
    return backbone, projector, encoder


def test_initialize_copies_every_online_weight():
    backbone, projector, encoder = _online_and_encoder()
    online = backbone.weights + projector.weights
    target = encoder.backbone.weights + encoder.projector.weights
    assert len(online) == len(target) > 0
    for o, t in zip(online, target, strict=True):
        assert o is not t
        np.testing.assert_array_equal(t.numpy(), o.numpy())
    assert encoder.name == "key_encoder" and encoder.projector.name == "key_projector"


@pytest.mark.parametrize("momentum", [0.9, tf.constant(0.75)], ids=["float", "tensor"])
def test_update_is_the_ema_of_trainable_weights_and_keeps_own_bn_statistics(momentum):
    backbone, projector, encoder = _online_and_encoder()
    rng = np.random.default_rng(0)
    online = backbone.weights + projector.weights
    target = encoder.backbone.weights + encoder.projector.weights
    for o in online:  # the online network moved away from the target
        o.assign(o.numpy() + rng.normal(size=o.shape).astype("float32"))
    before = [t.numpy() for t in target]
    encoder.update(backbone, projector, momentum)
    m = float(momentum)
    for o, t, old in zip(online, target, before, strict=True):
        if o.trainable:
            np.testing.assert_allclose(t.numpy(), m * old + (1 - m) * o.numpy(), rtol=1e-6, atol=1e-7)
        else:  # batch-norm moving statistics
            np.testing.assert_array_equal(t.numpy(), old)


def test_encode_is_the_projection_of_the_backbone_features():
    backbone, projector, encoder = _online_and_encoder()
    images = batch(0)["view1"]
    features, projection = encoder.encode(images, training=False)
    np.testing.assert_allclose(features.numpy(), backbone(images, training=False).numpy(), rtol=1e-6)
    np.testing.assert_allclose(projection.numpy(), projector(features, training=False).numpy(), rtol=1e-6)


@pytest.mark.parametrize("method, encoder", [("moco", "key_encoder"), ("byol", "target_encoder")])
def test_target_variables_are_tracked_but_not_optimized(method, encoder):
    model = make_model(method, queue_size=16)
    target = {id(v) for v in getattr(model, encoder).trainable_variables}
    assert target and target == {id(v) for v in model.target_variables()}
    assert target <= {id(v) for v in model.trainable_variables}
    assert not target & {id(v) for v in model.optimized_variables()}


@pytest.mark.parametrize("method, prefix", [("moco", "key"), ("byol", "target")])
def test_checkpoint_keys_of_the_target_networks_are_those_of_earlier_runs(tmp_path, method, prefix):
    """Runs saved before the shared encoder stored model/key_backbone/..., model/key_projector/...: still so."""
    model = make_model(method, queue_size=16)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = [k for k in tf.train.load_checkpoint(path).get_variable_to_shape_map() if k.startswith(f"model/{prefix}_")]
    assert len(keys) == len(getattr(model, f"{prefix}_encoder").weights)
    assert all(k.startswith((f"model/{prefix}_backbone/", f"model/{prefix}_projector/")) for k in keys), keys
