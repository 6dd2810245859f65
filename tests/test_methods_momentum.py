"""The momentum encoder MoCo and BYOL share (augself_tf/methods/momentum.py): initial copy, the EMA rule
against NumPy, and its variables kept away from the optimizer; `MomentumMethod`, the one owner of its creation and
update for every momentum method, a toy one included."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, compile_model, make_model, tiny_backbone
from package_source import modules

from augself_tf.losses.negative_cosine import negative_cosine
from augself_tf.methods import METHODS
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.methods.momentum import MomentumEncoder, MomentumMethod
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


# ------------------------------------------------------------------------- MomentumMethod: the one owner
class ToyMomentum(MomentumMethod):
    """A BYOL-like toy: its own prefix, and a momentum that changes every step so the step index is checked."""

    method_name = "toymomentum"
    momentum_prefix = "toy"

    @dataclasses.dataclass(frozen=True)
    class Options:
        pass

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        self.projector = self.conditioned(mlp([6, 4], synchronized_bn=self.synchronized_bn, name="projector"))
        self.create_momentum_encoder([6, 4])

    def build_heads(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))
        self.initialize_momentum_encoder(feature_dim)

    def momentum_at(self, step):
        return 0.5 + 0.25 * tf.cast(step, tf.float32)  # 0.5 after the first step, 0.75 after the second

    def method_loss(self, f1, f2, batch, training):
        _, t2 = self.encode_momentum(batch["view2"], batch["omega2"], training)
        return negative_cosine(self.projector(f1, training=training), t2), {}


def _online_and_target(model: MomentumMethod) -> tuple[list, list]:
    encoder = model.momentum_encoder
    return (model.backbone.weights + model.projector.weights, encoder.backbone.weights + encoder.projector.weights)


def _check_steps(model: MomentumMethod, momenta: list[float]) -> None:
    """One train step per m in `momenta`: after each, target = m·old target + (1 − m)·new online weight."""
    online, target = _online_and_target(model)
    # One trace for every step (run_steps traces anew per call): it must read each step's momentum from the step
    # counter at run time, not from a value frozen in at trace time.
    step = tf.function(model.train_step)
    for k, m in enumerate(momenta):
        before = [t.numpy() for t in target]
        step(batch(k))
        assert float(model.current_momentum()) == pytest.approx(m, abs=1e-7)
        moved = 0.0
        for o, t, old in zip(online, target, before, strict=True):
            if o.trainable:
                np.testing.assert_allclose(t.numpy(), m * old + (1 - m) * o.numpy(), rtol=1e-5, atol=1e-7,
                                           err_msg=t.path)
                moved = max(moved, float(np.abs(t.numpy() - old).max()))
        assert moved > 0


def test_a_toy_momentum_method_is_created_hidden_and_updated_by_the_owner(tmp_path):
    with METHODS.registered("toymomentum", ToyMomentum):
        model = make_model("toymomentum", augself=("crop",))
    assert model.momentum_encoder is model.toy_encoder and model.toy_encoder.name == "toy_encoder"
    assert {id(v) for v in model.target_variables()} == {id(v) for v in model.toy_encoder.trainable_variables}
    assert not {id(v) for v in model.target_variables()} & {id(v) for v in model.optimized_variables()}
    online, target = _online_and_target(model)
    for o, t in zip(online, target, strict=True):  # copied when built
        np.testing.assert_array_equal(t.numpy(), o.numpy())
    compile_model(model, lr=0.5)
    _check_steps(model, [0.5, 0.75])  # m of the 0-based step just taken
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = [k for k in tf.train.load_checkpoint(path).get_variable_to_shape_map() if k.startswith("model/toy_")]
    assert keys and all(k.startswith(("model/toy_backbone/", "model/toy_projector/")) for k in keys)


@pytest.mark.parametrize("method, options, momenta", [
    ("moco", dict(key_momentum=0.5, queue_size=16), [0.5, 0.5]),
    ("byol", dict(target_momentum=0.9, total_steps=2), [0.9, 1 - 0.1 * (math.cos(math.pi / 2) + 1) / 2]),
])
def test_moco_and_byol_updates_go_through_the_owner_with_their_momentum(method, options, momenta):
    model = make_model(method, augself=(), **options)
    assert isinstance(model, MomentumMethod)
    compile_model(model, lr=0.5)
    _check_steps(model, momenta)


def test_a_momentum_method_must_say_its_momentum():
    class Silent(ToyMomentum):
        momentum_at = MomentumMethod.momentum_at

    with pytest.raises(NotImplementedError, match="^Silent must say which momentum each update uses"):
        Silent(tiny_backbone()).momentum_at(tf.constant(0.0))


def test_only_momentum_py_builds_or_updates_a_momentum_encoder():
    """Every other method gets its target through MomentumMethod: no second owner of the EMA update."""
    methods = {m: p for m, p in modules().items() if m.startswith("augself_tf.methods.")}
    assert "augself_tf.methods.moco" in methods  # the walk works
    owners = []
    for module, path in methods.items():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        if "MomentumEncoder(" in source or ".update(self.backbone" in source:
            owners.append(module)
    assert owners == ["augself_tf.methods.momentum"]
    momentum = ["moco", "byol", "looc", "mocov3", "dino"]
    assert [n for n, cls in METHODS.items() if cls.target_variables is not AugSelfModel.target_variables] == [
        n for n, cls in METHODS.items() if issubclass(cls, MomentumMethod)] == momentum
