"""What every method shares (augself_tf/methods/augself_model.py and the registry): the AugSelf loss against an
independent NumPy computation, option defaults and the factory, and the train step on 1 and 2 replicas."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from conftest import mirrored_cpus
from helpers import (
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    make_model,
    omega,
    one_device_and_two_replicas,
    replica_values,
    run_steps,
    tiny_backbone,
    unit,
)

from augself_tf.flag_fields import option
from augself_tf.methods import METHODS, build_method, define_method_flags, method_options_from_flags
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.methods.moco import MoCo
from augself_tf.methods.simclr import SimCLR
from augself_tf.models.resnet import mlp
from augself_tf.objectives import OBJECTIVES, define_objective_flags, objective_options_from_flags

B = 6


def _np_targets(o1: dict, o2: dict) -> dict:
    """docs/architecture.md written out independently of the registry."""
    c1, c2 = o1["crop"].copy(), o2["crop"].copy()
    flipped = o1["flip"][:, 0] > 0.5
    c1[flipped, 1] = 1 - c1[flipped, 1]
    c2[flipped, 1] = 1 - c2[flipped, 1]
    return {
        "crop": c1 - c2,
        "color": o1["color"] - o2["color"],
        "flip": (o1["flip"] == o2["flip"]).astype("float32"),
        "blur": o1["blur"] - o2["blur"],
        "rotation": np.mod(o1["rotation"][:, 0] - o2["rotation"][:, 0], 4).astype("int64"),
        "solarize": o1["solarize"] - o2["solarize"],
    }


def _np_loss(name: str, pred: np.ndarray, target: np.ndarray) -> float:
    if name == "flip":
        z = pred[:, 0]
        t = target[:, 0]
        return float(np.mean(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))))
    if name == "rotation":
        logp = pred - pred.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        return float(-np.mean(logp[np.arange(len(target)), target]))
    return float(np.mean((np.tanh(pred) - target) ** 2))


# ----------------------------------------------------------------------------- AugSelf loss
def test_augself_loss_matches_numpy_both_orders():
    names = ("crop", "flip", "color", "blur", "rotation", "solarize")
    model = make_model("none", augself=names, resnet=True, image_size=16)
    rng = np.random.default_rng(3)
    f1 = rng.normal(size=[B, model.feature_dim]).astype("float32")
    f2 = rng.normal(size=[B, model.feature_dim]).astype("float32")
    o1, o2 = omega(rng, B), omega(rng, B)
    o1["flip"][:3] = 1.0  # some pairs with view 1 flipped
    total, logs = model.objectives["augself"].task_losses(tf.constant(f1), tf.constant(f2), o1, o2, training=False)
    pairs = np.concatenate([np.concatenate([f1, f2], 1), np.concatenate([f2, f1], 1)], 0)
    t12, t21 = _np_targets(o1, o2), _np_targets(o2, o1)
    expected = 0.0
    for name in names:
        pred = model.augself_heads[name](pairs, training=False).numpy()
        target = np.concatenate([t12[name], t21[name]], 0)
        want = _np_loss(name, pred, target)
        np.testing.assert_allclose(float(logs[f"augself/{name}_loss"]), want, rtol=1e-5, atol=1e-6)
        if name in ("flip", "rotation"):
            assert f"augself/{name}_r2" not in logs  # a class has no R²
        else:  # R² of the tanh outputs over the 2B pairs, pooled over the components
            p = np.tanh(pred)
            r2 = 1 - np.sum((p - target) ** 2) / np.sum((target - target.mean(0)) ** 2)
            np.testing.assert_allclose(float(logs[f"augself/{name}_r2"]), r2, rtol=1e-4, atol=1e-6)
        expected += want
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)


# ----------------------------------------------------------------------------- registry, options, factory
def test_new_methods_are_registered_with_their_options():
    for name in ("byol", "simclr", "swav", "supervised"):
        assert METHODS[name].method_name == name
    assert METHODS["supervised"].needs_labels
    assert METHODS["swav"].options["num_prototypes"][0] == 100
    assert METHODS["byol"].options["projector_hidden"][0] == 4096


def test_every_option_is_one_field_of_the_methods_options_and_its_default_applies_when_unset():
    for cls in METHODS.values():
        assert dataclasses.is_dataclass(cls.Options)
        declared = {f.name: (f.default, f.metadata["help"]) for f in dataclasses.fields(cls.Options)
                    if "help" in f.metadata}
        assert cls.options == declared
    # train_main passes None for every flag left unset, and other methods' options too: the default applies.
    model = build_method("simclr", tiny_backbone(), options={"temperature": None, "queue_size": None})
    assert model.temperature == 0.2 and model.method_options == SimCLR.Options()
    model = build_method("simclr", tiny_backbone(), options={"temperature": 0.5, "queue_size": 3})
    assert model.temperature == 0.5 and model.method_options == SimCLR.Options(temperature=0.5)


def _flag_values() -> flags.FlagValues:
    values = flags.FlagValues()
    define_method_flags(values, "test")
    define_objective_flags(values, "test")
    return values


def test_a_shared_option_is_one_flag_whose_help_lists_each_methods_default():
    values = _flag_values()
    # Written out from the methods' declarations: MoCo 0.2, SimCLR 0.2, SwAV 0.1 (SwAV's used to go unshown), LooC 0.2,
    # MoCo v3 0.2.
    assert values["temperature"].help == ("Softmax temperature of the loss (default moco: 0.2, simclr: 0.2, swav: 0.1, "
                                          "looc: 0.2, mocov3: 0.2)")
    assert values["queue_size"].help == "MoCo queue length (keys) (default moco: 65536, looc: 65536)"
    for name in ("temperature", "projector_dim", "queue_size", "num_prototypes"):
        assert values[name].default is None  # unset: each method's own default
    for registry, read in ((METHODS, method_options_from_flags), (OBJECTIVES, objective_options_from_flags)):
        users = {}  # the objectives' options are flags of their own, apart from the methods'
        for method, cls in registry.items():
            for f in dataclasses.fields(cls.Options):
                if "help" in f.metadata:
                    users.setdefault(f.name, []).append(f"{method}: {f.default}")
        for name, defaults in users.items():
            assert values[name].help.endswith(f"(default {', '.join(defaults)})"), name
        assert set(read(values)) == set(users)


def test_a_method_option_named_as_an_objectives_is_refused():
    with pytest.raises(ValueError, match=r"^method 'toy': option --essl_weight is an objective's option"):
        METHODS["toy"] = _toy_method(essl_weight=(0.5, "E-SSL weight"))
    assert "toy" not in METHODS


def _toy_method(**fields) -> type[AugSelfModel]:
    options = dataclasses.make_dataclass(
        "Options", [(k, type(v[0]), option(v[0], v[1], choices=v[2] if len(v) > 2 else None))
                    for k, v in fields.items()], frozen=True)
    return type("Toy", (AugSelfModel,), {"method_name": "toy", "Options": options})


def test_a_shared_option_must_keep_its_type_and_help():
    wrong_type = _toy_method(temperature=(1, "Softmax temperature of the loss"))
    with pytest.raises(ValueError, match=r"^method 'toy': option --temperature has kind int but method 'moco' "
                                         r"declares it with float; a shared option has one kind$"):
        METHODS["toy"] = wrong_type
    wrong_help = _toy_method(temperature=(0.5, "Temperature"))
    with pytest.raises(ValueError, match="option --temperature has help 'Temperature' but method 'moco'"):
        METHODS["toy"] = wrong_help
    assert "toy" not in METHODS
    with METHODS.registered("toy", _toy_method(temperature=(0.5, "Softmax temperature of the loss"))):
        assert _flag_values()["temperature"].help.endswith("swav: 0.1, looc: 0.2, mocov3: 0.2, toy: 0.5)")
    assert "toy" not in METHODS


def test_bool_and_string_method_options_get_bool_string_and_enum_flags():
    toy = _toy_method(use_bias=(False, "Toy: a bias in the projector"), tag=("x", "Toy: a name"),
                      norm=("batch", "Toy: the projector's normalisation", ("batch", "layer")))
    with METHODS.registered("toy", toy):
        values = _flag_values()
        assert [values[n].flag_type() for n in ("use_bias", "tag", "norm")] == ["bool", "string", "string enum"]
        values(["t", "--use_bias", "--tag=y", "--norm=layer"])
        model = build_method("toy", tiny_backbone(), options=method_options_from_flags(values))
        assert model.method_options == toy.Options(use_bias=True, tag="y", norm="layer")
        with pytest.raises(flags.IllegalFlagValueError):
            _flag_values()(["t", "--norm=group"])
        values = _flag_values()
        values(["t", "--nouse_bias"])
        assert method_options_from_flags(values)["use_bias"] is False


def test_methods_refuse_a_second_method_under_a_taken_name():
    with pytest.raises(ValueError, match=r"^method 'moco' is already registered; choose another name$"):
        METHODS["moco"] = MyMethod
    with pytest.raises(ValueError, match="already registered"):
        METHODS.update({"mymethod": MyMethod, "moco": MyMethod})  # all or nothing
    assert METHODS["moco"] is MoCo and "mymethod" not in METHODS


def test_unknown_method_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown method 'simsam'; choose from none, simsiam, moco"):
        build_method("simsam", tiny_backbone())


class MyMethod(AugSelfModel):
    """docs/architecture.md's "Adding a method" example, word for word."""

    method_name = "mymethod"

    @dataclasses.dataclass(frozen=True)
    class Options:  # each option field is a train_main flag
        projector_dim: int = option(128, "Projector output size")  # --projector_dim, shared with the others

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        dim = self.method_options.projector_dim
        self.projector = self.conditioned(mlp([512, dim], synchronized_bn=self.synchronized_bn,
                                              name="projector"))  # reads ω under --condition

    def build_heads(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))

    def method_loss(self, f1, f2, batch, training):
        z1 = tf.math.l2_normalize(tf.cast(self.projector(f1, training=training), tf.float32), -1)
        z2 = tf.math.l2_normalize(tf.cast(self.projector(f2, training=training), tf.float32), -1)
        return -tf.reduce_mean(tf.reduce_sum(z1 * z2, -1)), {}


def test_a_toy_method_is_one_class_and_one_registry_line():
    with METHODS.registered("mymethod", MyMethod):
        assert METHODS["mymethod"].options == {"projector_dim": (128, "Projector output size")}
        assert _flag_values()["projector_dim"].help.endswith("swav: 128, looc: 128, mocov3: 256, mymethod: 128)")
        model = make_model("mymethod", projector_dim=None, total_steps=2)  # unset flag -> the default, 128
    assert model.optimized_variables()[-1].shape == (128,)  # the projector's last bias
    b = batch(9)
    f1, f2 = model.backbone(b["view1"], training=False), model.backbone(b["view2"], training=False)
    loss, _ = model.method_loss(f1, f2, b, training=False)
    z1 = unit(model.projector(f1, training=False).numpy())
    z2 = unit(model.projector(f2, training=False).numpy())
    np.testing.assert_allclose(float(loss), -np.mean(np.sum(z1 * z2, 1)), rtol=1e-5)
    compile_model(model)
    logs = run_steps(model, [b, b])
    assert all(math.isfinite(v) for log in logs for v in log.values())
    assert logs[1]["loss/method"] != logs[0]["loss/method"] and logs[1]["loss/augself"] > 0


# ----------------------------------------------------------------------------- the train step
@pytest.mark.parametrize("method", ["none", "simsiam", "moco"])
def test_augself_loss_falls_on_a_fixed_batch(method):
    # The tiny backbone: the heads and the backbone learn from the summed loss as on a ResNet (on either, the loss is
    # under 0.21x its first value by step 10, under 0.04x by step 30), without the ResNet step's trace.
    model = make_model(method, augself=("crop", "color"), image_size=16, queue_size=16,
                       projector_dim=16, projector_hidden=16, predictor_hidden=8)
    compile_model(model, lr=0.1)
    logs = run_steps(model, [batch(2, n=16, size=16)] * 30)
    first, last = logs[0]["loss/augself"], logs[-1]["loss/augself"]
    assert np.isfinite(list(logs[-1].values())).all()
    assert last < 0.6 * first, (first, last)


# The plain runs are the AugSelf runs' method losses without the heads: in the slow tier.
# One AugSelf head: what is checked is the replicas' sync, and a second head is the same MLP through the same code
# (two heads on one device: test_augself_loss_falls_on_a_fixed_batch, and every method in test_mixed_precision.py).
@pytest.mark.parametrize("augself", [pytest.param((), marks=pytest.mark.slow), ("crop",)], ids=["plain", "augself"])
@pytest.mark.parametrize("method", ["byol", "simclr", "swav", "supervised"])
def test_method_trains_on_two_replicas(method, augself):
    strategy = mirrored_cpus()
    with strategy.scope():
        model = make_model(method, augself=augself, sync=True, total_steps=3, steps_per_epoch=1)
    compile_model(model, strategy, total_steps=3)
    logs = run_steps(model, [batch(0), batch(1)], strategy)
    for log in logs:
        assert all(math.isfinite(v) for v in log.values()), log
    assert logs[-1]["loss/method"] != 0.0
    assert (logs[-1]["loss/augself"] > 0) == bool(augself)
    for w in model.weights:  # replicas stay in sync
        values = replica_values(w)
        for v in values[1:]:
            np.testing.assert_allclose(v, values[0], rtol=1e-5, atol=1e-6, err_msg=w.path)


# Per case: image size, batch seed, options (one AugSelf head, crop, as above). SimCLR's negatives and SwAV's
# Sinkhorn sums span the global batch.
TWO_REPLICA_CASES = {
    "simsiam": (16, 0, {"projector_dim": 32, "predictor_hidden": 8}),
    "simclr": (8, 6, {"total_steps": 10}),
    "swav": (8, 6, {"total_steps": 10, "freeze_prototypes_steps": 0}),
}


# What --cpu_replicas runs (one_device) for every case; what GPUs run (collective) for SimSiam in the fast tier and
# for every case in the slow one.
@pytest.mark.parametrize(("method", "reduction"), [
    (m, r) if r == "one_device" or m == "simsiam" else pytest.param(m, r, marks=pytest.mark.slow)
    for m in TWO_REPLICA_CASES for r in ("one_device", "collective")])
def test_two_replicas_equal_one_device_on_the_same_global_batch(method, reduction):
    size, seed, options = TWO_REPLICA_CASES[method]
    b = batch(seed, n=8, size=size)
    runs = one_device_and_two_replicas(
        lambda: make_model(method, augself=("crop",), sync=True, image_size=size, **options), b, reduction)
    assert_replicas_equal_one_device(*runs)
