"""CASSLE complete: the four ways the ω-embedding enters the projector (--condition_kind), the conditioned SimSiam
predictor (--condition_predictor) and relative descriptors (--condition_descriptor).

Every kind is checked against a NumPy forward pass written from the reference's equations (mprzewie/AugSelf at
0e55f0f: ``cond_utils.AugProjector.forward``, ``AugSSPredictor.forward``, ``models.load_mlp``,
``transforms.extract_diff``), with the weights read from the Keras layers by name; our layer code is not used.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import each_method
from helpers import (
    assert_replicas_equal_one_device,
    batch,
    compile_model,
    one_device_and_two_replicas,
    run_steps,
    tiny_run,
)
from test_conditioning import CASSLE, build, conditioned_batch, head

from augself_tf.augment import AugmentConfig
from augself_tf.methods.model_config import ModelConfig
from augself_tf.models.resnet import mlp
from augself_tf.models.torch_init import Linear
from augself_tf.objectives.conditioning import (
    CONDITION_KINDS,
    ConditionedHead,
    Conditioning,
    condition_head,
)
from augself_tf.training.loop import train

KINDS = ["concat", "add", "mul", "hypernet"]
EPS = 1e-5  # PyTorch's BatchNorm1d default, as our BN's


# ------------------------------------------------------------------------ the reference's equations, in NumPy


def np_bn(x: np.ndarray, bn: keras.layers.Layer, training: bool) -> np.ndarray:
    """torch BatchNorm1d: batch statistics (biased variance) in training, running statistics otherwise."""
    if training:
        mean, var = x.mean(0), x.var(0)
    else:
        mean, var = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    y = (x - mean) / np.sqrt(var + EPS)
    return y * bn.gamma.numpy() + bn.beta.numpy() if bn.scale else y


def np_load_mlp(x: np.ndarray, seq: keras.Sequential, num_layers: int, last_bn: bool, training: bool) -> np.ndarray:
    """``models.load_mlp(n_in, n_hidden, n_out, num_layers, last_bn)``: (Linear without bias, BN, ReLU) ×
    (num_layers − 1), then Linear (with a bias unless last_bn) and BN if last_bn; weights from ``seq``'s layers
    ``<name>_fc<i>`` / ``<name>_bn<i>``."""
    for i in range(1, num_layers + 1):
        fc = seq.get_layer(f"{seq.name}_fc{i}")
        last = i == num_layers
        assert fc.use_bias == (last and not last_bn), fc.name
        x = x @ fc.kernel.numpy() + (fc.bias.numpy() if fc.use_bias else 0.0)
        if not last or last_bn:
            x = np_bn(x, seq.get_layer(f"{seq.name}_bn{i}"), training)
        if not last:
            x = np.maximum(x, 0.0)
    return x


def np_hypernet(f: np.ndarray, generated: np.ndarray, proj_depth: int, proj_out: int) -> np.ndarray:
    """``AugProjector.forward`` for ``aug_treatment == hn`` (``aug_hn_type == mlp``): the layers_config of its
    __init__, then per layer bmm(x, W.reshape(b, in, out)) + b, ReLU between layers."""
    b_s, n = f.shape
    configs, total = [], 0
    layer_in = layer_out = n
    for i in range(proj_depth):
        if i == proj_depth - 1:
            layer_out = proj_out
        configs.append((layer_in, layer_out, (total, total + layer_in * layer_out),
                        (total + layer_in * layer_out, total + layer_in * layer_out + layer_out)))
        total += layer_in * layer_out + layer_out
        layer_in = layer_out
    assert generated.shape == (b_s, total)
    x = f.reshape(b_s, 1, n)
    for i, (w_in, w_out, (ws, we), (bs, be)) in enumerate(configs):
        x = np.matmul(x, generated[:, ws:we].reshape(b_s, w_in, w_out)) + generated[:, bs:be].reshape(b_s, 1, w_out)
        if i != len(configs) - 1:
            x = np.maximum(x, 0.0)
    return x.reshape(b_s, -1)


def np_projector(kind: str, f: np.ndarray, d: np.ndarray, layer: ConditionedHead, head_layers: int, last_bn: bool,
                 depth: int, out: int, training: bool) -> np.ndarray:
    """``AugProjector.forward``: proj-cat / proj-add / proj-mul through ``aug_processor`` and the projector, hn
    through ``projector_hn``."""
    emb = np_load_mlp(d, layer.embedding, depth, last_bn=True, training=training)  # load_mlp's default last_bn
    if kind == "hypernet":
        return np_hypernet(f, emb, head_layers, out)
    assert emb.shape[1] == (f.shape[1] if kind in ("add", "mul") else layer.conditioning.width)
    x = {"concat": lambda: np.concatenate([f, emb], 1), "add": lambda: f + emb, "mul": lambda: f * emb}[kind]()
    if head_layers == 1:  # a single Linear (the supervised classifier): nn.Linear with its bias
        return x @ layer.head.kernel.numpy() + layer.head.bias.numpy()
    return np_load_mlp(x, layer.head, head_layers, last_bn, training)


def randomize(layer: keras.layers.Layer, seed: int) -> None:
    """Every weight of ``layer`` random (BN statistics and affine parameters included): nothing is an identity."""
    rng = np.random.default_rng(seed)
    for v in layer.weights:
        shape = tuple(v.shape)
        if "moving_variance" in v.path:
            value = rng.uniform(0.5, 2.0, shape)
        elif "gamma" in v.path:
            value = rng.uniform(0.5, 1.5, shape)
        elif "kernel" in v.path:
            value = rng.normal(0, 1 / np.sqrt(shape[0]), shape)
        else:
            value = rng.normal(0, 0.3, shape)
        v.assign(value.astype("float32"))


# ------------------------------------------------------------------------ each kind against NumPy


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("head_layers, last_bn", [(2, False), (2, True), (3, True), (1, False)],
                         ids=["mlp2", "mlp2-last-bn", "mlp3-last-bn", "linear"])
def test_each_kind_is_the_references_forward_pass(kind, head_layers, last_bn):
    keras.utils.set_random_seed(0)
    conditioning = Conditioning.create(("crop", "flip", "color"), width=5, depth=3, kind=kind)
    features, out = 6, 4
    if head_layers == 1:
        g = Linear(out, name="classifier")
    else:
        g = mlp([7] * (head_layers - 1) + [out], last_bn=last_bn, name="projector")
    layer = condition_head(g, conditioning, synchronized_bn=False)
    assert type(layer) is CONDITION_KINDS[kind] and isinstance(layer, ConditionedHead)
    rng = np.random.default_rng(1)
    f = rng.normal(size=[8, features]).astype("float32")
    d = rng.normal(size=[8, conditioning.size]).astype("float32")
    layer(np.concatenate([f, d], 1))
    randomize(layer, 2)
    if kind == "hypernet":
        # The hypernetwork generates every layer's weights and biases; the head's own weights do not exist.
        sizes = [(features, features)] * (head_layers - 1) + [(features, out)]
        assert layer.embedding.layers[-2].units == sum(i * o + o for i, o in sizes)
        assert {id(v) for v in layer.weights} == {id(v) for v in layer.embedding.weights}
    for training in (False, True):
        # Training mode first uses batch statistics (the layer's moving ones are then updated, so compare before).
        expected = np_projector(kind, f, d, layer, head_layers, last_bn, conditioning.depth, out, training)
        got = layer(np.concatenate([f, d], 1), training=training).numpy()
        assert got.shape == (8, out)
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-5, err_msg=f"{kind} training={training}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", each_method(["simsiam", "moco", "byol", "supervised"]))
def test_every_kind_conditions_each_method_and_trains_its_omega_mlp(method, kind):
    model = build(method, condition=CASSLE, condition_width=4, condition_depth=2, condition_kind=kind)
    conditioned = head(model)
    assert type(conditioned) is CONDITION_KINDS[kind]
    if method in ("moco", "byol"):  # the momentum target is the same kind, with its own EMA ω-MLP
        target = (model.key_encoder if method == "moco" else model.target_encoder).projector
        assert type(target) is CONDITION_KINDS[kind]
        assert {id(v) for v in target.trainable_variables} <= {id(v) for v in model.target_variables()}
    b = conditioned_batch(0)
    variables = conditioned.trainable_variables
    assert {id(v) for v in variables} <= {id(v) for v in model.optimized_variables()}
    with tf.GradientTape() as tape:
        total = model.compute_losses(b, training=True).total
    for v, g in zip(variables, tape.gradient(total, variables), strict=True):
        assert g is not None and float(tf.norm(g)) > 0, v.path
    other = {**b, "omega1": conditioned_batch(5)["omega1"]}
    assert float(model.compute_losses(other, False).logs["loss/method"]) != pytest.approx(
        float(model.compute_losses(b, False).logs["loss/method"]), rel=1e-6)
    compile_model(model)
    assert np.isfinite(run_steps(model, [b])[0]["loss/total"])


class GateHead(CONDITION_KINDS["add"]):
    """A kind made as docs/architecture.md says: a ConditionedHead subclass and its registry line, nothing else."""

    reference_name = "none"
    help_line = "f ⊙ sigmoid(e(d)) into the projector"

    @staticmethod
    def combine(features, embedded):
        return features * tf.sigmoid(embedded)


def test_a_new_kind_is_a_subclass_and_its_registry_line():
    with CONDITION_KINDS.registered("gate", GateHead):
        model = build("moco", condition=("crop", "color"), condition_width=4, condition_depth=2, condition_kind="gate")
        assert type(model.projector) is GateHead and type(model.key_encoder.projector) is GateHead
        compile_model(model)
        assert np.isfinite(run_steps(model, [conditioned_batch(1)])[0]["loss/method"])
    assert "gate" not in CONDITION_KINDS


# ------------------------------------------------------------------------ SimSiam's conditioned predictor


@pytest.mark.parametrize("kind", ["concat", "mul"])
def test_the_conditioned_predictor_is_the_references_aug_ss_predictor(kind):
    """``AugSSPredictor``: h([z, e_h(d)]), e_h = load_mlp(n, W, W, depth) its own, h = load_mlp(out + W, out // 4,
    out, 2, last_bn=False); p1 reads view 1's own description (``predictor(z1, d1_cat)``); trained at h's constant
    lr. Concatenation whatever the projector's kind (the reference offers proj-cat only)."""
    model = build("simsiam", condition=("crop", "color"), condition_width=4, condition_depth=2, condition_kind=kind,
                  condition_predictor=True)
    predictor = model.predictor
    assert type(predictor) is CONDITION_KINDS["concat"] and type(model.projector) is CONDITION_KINDS[kind]
    assert {id(v) for v in predictor.embedding.weights}.isdisjoint({id(v) for v in model.projector.weights})
    assert {id(v) for v in predictor.trainable_variables} == {id(v) for v in model.constant_lr_variables()}
    randomize(predictor, 3)
    b = conditioned_batch(2)
    f1, f2 = (model.backbone(b[k], training=False) for k in ("view1", "view2"))
    x1, x2 = model.head_input(f1, b["omega1"]), model.head_input(f2, b["omega2"])
    z1, z2 = (model.projector(x, training=False).numpy() for x in (x1, x2))
    d1, d2 = model.describe(b["omega1"]).numpy(), model.describe(b["omega2"]).numpy()

    def np_predict(z, d):
        emb = np_load_mlp(d, predictor.embedding, 2, last_bn=True, training=False)
        return np_load_mlp(np.concatenate([z, emb], 1), predictor.head, 2, last_bn=False, training=False)

    def cos(a, b):  # F.cosine_similarity: a·b / max(|a||b|, 1e-8), 0 for a zero row (a projection ReLU zeroed)
        return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-8)

    p1, p2 = np_predict(z1, d1), np_predict(z2, d2)
    expected = 0.5 * (-cos(p1, z2).mean() - cos(p2, z1).mean())
    loss, _ = model.method_loss(x1, x2, b, training=False)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_flags_that_would_do_nothing_are_refused_in_one_line():
    for fields, message in [
        ({"condition_kind": "hypernet"}, "--condition_kind=hypernet needs --condition"),
        ({"condition_descriptor": "relative"}, "--condition_descriptor=relative needs --condition"),
        ({"condition_predictor": True}, "--condition_predictor needs --condition"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            ModelConfig(**fields)
        assert "\n" not in str(err.value)
    ModelConfig(condition=("crop",), condition_kind="hypernet", condition_predictor=True)  # with descriptors: fine
    # A run's default directory names the kind, the descriptor mode and the predictor when they are not the default.
    cfg = tiny_run("", method="simsiam", condition=("crop",), condition_kind="hypernet",
                   condition_descriptor="relative", condition_predictor=True)
    assert dataclasses.replace(cfg, model_dir=None).resolved_model_dir().endswith(
        "simsiam_augself_crop_color_condition_crop_hypernet_relative_predictor")
    with pytest.raises(ValueError, match="--condition_predictor: method 'moco' has no predictor that reads the "
                                         "description"):
        build("moco", condition=("crop",), condition_predictor=True)


# ------------------------------------------------------------------------ relative descriptors


def test_relative_descriptors_are_the_references_extract_diff():
    """``extract_diff(t1, t2, w1, w2)``: crop centres both in view 1's displayed frame (flipped by view 1's flip),
    sizes subtracted; flip = 1 if both views agree; colour, colour shift, σ, solarize subtracted. Grayscale (absent
    from extract_diff) is subtracted as well, rotation is the one-hot of (k1 − k2) mod 4."""
    config = AugmentConfig(image_size=16)
    names = ["blur", "color", "color_diff", "crop", "flip", "grayscale", "rotation", "solarize"]
    conditioning = Conditioning.create(names, kind="concat", descriptor="relative")
    b = conditioned_batch(3)
    w1, w2 = b["omega1"], b["omega2"]
    got = conditioning.describe(w1, config, w2).numpy()
    f1, f2 = w1["flip"][:, 0] > 0.5, w2["flip"][:, 0] > 0.5
    cx1 = np.where(f1, 1 - w1["crop"][:, 1], w1["crop"][:, 1])
    cx2 = np.where(f1, 1 - w2["crop"][:, 1], w2["crop"][:, 1])  # view 1's flip, as extract_diff
    k1, k2 = w1["rotation"][:, 0].astype(int), w2["rotation"][:, 0].astype(int)
    expected = {
        "blur": (w1["blur"] - w2["blur"]) * config.blur_sigma[1],  # σ in pixels, as our absolute descriptor
        "color": w1["color"] - w2["color"],
        "color_diff": w1["color_diff"] - w2["color_diff"],
        "crop": np.stack([w1["crop"][:, 0] - w2["crop"][:, 0], cx1 - cx2, *(w1["crop"][:, 2:] - w2["crop"][:, 2:]).T],
                         1),
        "flip": (f1 == f2).astype("float32")[:, None],
        "grayscale": w1["grayscale"] - w2["grayscale"],
        "rotation": np.eye(4)[(k1 - k2) % 4],
        "solarize": w1["solarize"] - w2["solarize"],
    }
    np.testing.assert_allclose(got, np.concatenate([expected[n] for n in conditioning.names], 1), atol=1e-6)
    with pytest.raises(ValueError, match="need the other view's ω"):
        conditioning.describe(w1, config)


@pytest.mark.parametrize("method", each_method(["simsiam", "moco", "byol"]))
def test_relative_descriptors_reach_every_branch_with_the_other_view(method, monkeypatch):
    """Every description a method asks for (online views, momentum targets) is of one view relative to the other."""
    model = build(method, condition=("crop", "flip"), condition_width=4, condition_depth=2,
                  condition_descriptor="relative")
    b = batch(4)
    seen = []
    describe = type(model.conditioning).describe

    def spy(self, omega_, config, other=None):
        seen.append((omega_["crop"], None if other is None else other["crop"]))
        return describe(self, omega_, config, other)

    monkeypatch.setattr(type(model.conditioning), "describe", spy)
    model.compute_losses(b, training=False)
    pairs = {"12": (b["omega1"]["crop"], b["omega2"]["crop"]), "21": (b["omega2"]["crop"], b["omega1"]["crop"])}
    found = set()
    for mine, other in seen:
        assert other is not None
        found |= {k for k, (a, c) in pairs.items() if np.array_equal(mine, a) and np.array_equal(other, c)}
    assert found == {"12", "21"} and len(seen) == {"simsiam": 2, "moco": 2, "byol": 4}[method]


# ------------------------------------------------------------------------ replicas and the whole program


def test_two_replicas_equal_one_device_with_a_hypernetwork_and_a_conditioned_predictor():
    """SimSiam, hypernet projector, conditioned predictor, relative descriptors, synchronised BN (the hypernetwork
    normalises each generated weight over the global batch): 2 replicas = 1 device."""
    b = conditioned_batch(6)
    common = dict(condition=("crop", "color", "grayscale"), condition_width=8, condition_depth=2,
                  condition_kind="hypernet", condition_predictor=True, condition_descriptor="relative", sync=True)
    assert_replicas_equal_one_device(*one_device_and_two_replicas(lambda: build("simsiam", **common), b))


@pytest.mark.slow
def test_a_hypernetwork_run_on_two_replicas_with_augself_exports_the_backbone_alone(tmp_path):
    """train(): SimSiam + AugSelf{crop,color} + hypernet projector on crop, color, conditioned predictor, relative
    descriptors, on 2 replicas; the SavedModel is the backbone."""
    cfg = tiny_run(str(tmp_path / "run"), method="simsiam", condition=("crop", "color"), condition_kind="hypernet",
                   condition_predictor=True, condition_descriptor="relative", condition_width=8, condition_depth=2,
                   cpu_replicas=2, max_steps=2, export=True,
                   method_options={"projector_dim": 16, "predictor_hidden": 8})
    result = train(cfg)
    assert result.steps == 2 and all(np.isfinite(v) for v in result.last_logs.values())
    assert result.model.distribute_strategy.num_replicas_in_sync == 2
    assert type(result.model.projector) is CONDITION_KINDS["hypernet"]
    loaded = tf.saved_model.load(result.saved_model_dir)
    assert len(loaded.trainable_weights) == len(result.model.backbone.trainable_variables)
    images = np.random.default_rng(0).uniform(size=[2, 16, 16, 3]).astype("float32")
    features = loaded.signatures["serving_default"](images=tf.constant(images))["features"].numpy()
    np.testing.assert_allclose(features, result.model.backbone(images, training=False).numpy(), rtol=1e-4, atol=1e-5)
