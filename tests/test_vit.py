"""The ViT backbone (augself_tf/models/vit.py) against independent NumPy computations: a whole forward pass with
its weights copied out, MoCo v3's sin-cos table and PyTorch's bicubic interpolation transcribed as loops, drop-path,
`clone_model`, the frozen patch projection, and the export (class token, patch tokens, the backbone alone)."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from augself_tf.export.saved_model import PATCH_TOKENS, export_backbone
from augself_tf.models import vit
from augself_tf.models.vit import DropPath, ViTSize, bicubic_matrix, build_vit, sincos_position_embedding

MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)


@pytest.fixture
def tiny_size(monkeypatch):
    """A ViT of width 8, 2 blocks, 2 heads, patch 4, registered for the test only."""
    monkeypatch.setitem(vit.VIT_SIZES, "vit_test", ViTSize(8, 2, 2, 4))
    return "vit_test"


def _randomize(model: keras.Model, seed: int = 0) -> None:
    """Every weight random (LayerNorm scales around 1): zero biases or unit scales would hide a transposition."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        value = rng.normal(0.0, 0.5, v.shape)
        if v.path.endswith("gamma"):
            value = 1.0 + 0.2 * value
        v.assign(value.astype(np.float32))


# --------------------------------------------------------------------------- NumPy transcriptions
def moco_v3_sincos(h: int, w: int, dim: int, temperature: float = 10000.0) -> np.ndarray:
    """vits.py `build_2d_sincos_position_embedding`, element by element: torch.meshgrid(arange(w), arange(h)) is
    'ij', so flattened index m = i·h + j has grid_w = i and grid_h = j."""
    pos_dim = dim // 4
    out = np.zeros([1 + h * w, dim])
    for i in range(w):
        for j in range(h):
            m = i * h + j
            for d in range(pos_dim):
                omega = 1.0 / temperature ** (d / pos_dim)
                out[1 + m, d] = math.sin(i * omega)
                out[1 + m, pos_dim + d] = math.cos(i * omega)
                out[1 + m, 2 * pos_dim + d] = math.sin(j * omega)
                out[1 + m, 3 * pos_dim + d] = math.cos(j * omega)
    return out


def torch_bicubic_1d(values: np.ndarray, out_size: int) -> np.ndarray:
    """aten upsample_bicubic2d along axis 0 with scale_factor (out + 0.1)/in, align_corners False (DINO's call):
    src = (dst + 0.5)/scale_factor − 0.5, taps floor(src) − 1 .. + 2 clamped, A = −0.75."""
    n_in = values.shape[0]
    if n_in == out_size:  # DINO returns the table untouched
        return values.copy()
    a = -0.75
    scale_factor = (out_size + 0.1) / n_in

    def cc1(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def cc2(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    out = np.zeros((out_size,) + values.shape[1:])
    for dst in range(out_size):
        src = (dst + 0.5) / scale_factor - 0.5
        base = math.floor(src)
        t = src - base
        coeffs = [cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)]
        for tap, c in enumerate(coeffs):
            out[dst] += c * values[min(max(base - 1 + tap, 0), n_in - 1)]
    return out


def numpy_vit(images: np.ndarray, weights: dict[str, np.ndarray], *, patch: int, heads: int, depth: int,
              built_grid: int) -> np.ndarray:
    """timm's VisionTransformer forward (eval mode) in NumPy, from the Keras weights by name: the class token
    after the final LayerNorm."""
    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-6) * weights[f"{name}/gamma"] + weights[f"{name}/beta"]

    def dense(x, name):
        return x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"]

    def gelu(x):
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))

    x = (images - np.array(MEAN)) / np.array(STD)
    n, height, width, _ = x.shape
    gh, gw = height // patch, width // patch
    kernel = weights["patch_embed/kernel"]  # [p, p, 3, D]
    dim = kernel.shape[-1]
    tokens = np.zeros([n, gh * gw, dim])
    for r in range(gh):
        for c in range(gw):
            window = x[:, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch, :]
            tokens[:, r * gw + c] = np.einsum("nijc,ijcd->nd", window, kernel) + weights["patch_embed/bias"]
    pos = weights["token_embedding/pos_embed"][0]
    grid = pos[1:].reshape(built_grid, built_grid, dim)
    grid = torch_bicubic_1d(grid, gh)  # rows
    grid = np.swapaxes(torch_bicubic_1d(np.swapaxes(grid, 0, 1), gw), 0, 1)  # columns
    pos = np.concatenate([pos[:1], grid.reshape(-1, dim)])
    cls = np.broadcast_to(weights["token_embedding/cls_token"], (n, 1, dim))
    x = np.concatenate([cls, tokens], 1) + pos
    hd = dim // heads
    for b in range(1, depth + 1):
        y = ln(x, f"block{b}/norm1")
        qkv = dense(y, f"block{b}/qkv").reshape(n, -1, 3, heads, hd).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        logits = q @ np.swapaxes(k, -1, -2) * hd ** -0.5
        attn = np.exp(logits - logits.max(-1, keepdims=True))
        attn /= attn.sum(-1, keepdims=True)
        y = (attn @ v).transpose(0, 2, 1, 3).reshape(n, -1, dim)
        x = x + dense(y, f"block{b}/proj")
        y = gelu(dense(ln(x, f"block{b}/norm2"), f"block{b}/fc1"))
        x = x + dense(y, f"block{b}/fc2")
    return ln(x, "encoder_norm")[:, 0]


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("side", [8, 12])  # the built 2×2 grid, and a 3×3 grid that interpolates its embedding
def test_forward_matches_numpy_vit_with_drop_path_off_at_inference(tiny_size, side):
    model = build_vit(tiny_size, image_size=8, position="learned", drop_path=0.5, input_mean=MEAN, input_std=STD)
    _randomize(model)
    images = np.random.default_rng(1).uniform(size=(3, side, side, 3)).astype(np.float32)
    weights = {v.path: v.numpy().astype(np.float64) for v in model.weights if "seed" not in v.path}
    ref = numpy_vit(images.astype(np.float64), weights, patch=4, heads=2, depth=2, built_grid=2)
    ours = model(images, training=False).numpy()
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4)
    assert np.abs(model(images, training=True).numpy() - ours).max() > 1e-3  # drop-path acts in training only


@pytest.mark.parametrize("h,w,dim", [(4, 4, 16), (3, 5, 8)])
def test_sincos_table_is_moco_v3s(h, w, dim):
    np.testing.assert_allclose(sincos_position_embedding(h, w, dim), moco_v3_sincos(h, w, dim), atol=1e-6)


def test_sincos_is_the_fixed_embedding_of_a_built_vit(tiny_size):
    model = build_vit(tiny_size, image_size=12)  # a 3×3 grid
    layer = model.get_layer("token_embedding")
    np.testing.assert_allclose(layer.pos_embed.numpy()[0], moco_v3_sincos(3, 3, 8), atol=1e-6)
    assert not layer.pos_embed.trainable and layer.cls_token.trainable
    assert abs(float(np.std(layer.cls_token.numpy()))) < 1e-5  # N(0, 1e-6)
    with pytest.raises(ValueError, match="divisible by 4"):
        sincos_position_embedding(2, 2, 6)


@pytest.mark.parametrize("n_in,n_out", [(4, 7), (7, 4), (3, 3), (14, 8)])
def test_interpolation_is_torch_bicubic_at_dinos_scale(n_in, n_out):
    values = np.random.default_rng(2).normal(size=(n_in, 5))
    ours = bicubic_matrix(n_in, n_out).numpy() @ values
    np.testing.assert_allclose(ours, torch_bicubic_1d(values, n_out), rtol=1e-5, atol=1e-5)
    constant = bicubic_matrix(n_in, n_out).numpy() @ np.ones(n_in)  # the taps' weights sum to 1
    np.testing.assert_allclose(constant, np.ones(n_out), atol=1e-6)


def test_drop_path_drops_whole_examples_in_training_only():
    layer = DropPath(0.5, seed=3)
    x = tf.ones([400, 3, 2])
    y = layer(x, training=True).numpy()
    per_example = y.reshape(400, -1)
    assert set(np.unique(per_example)) <= {0.0, 2.0}
    assert np.all(per_example.min(1) == per_example.max(1))  # one draw per example
    assert 0.35 < float(np.mean(per_example[:, 0] == 0.0)) < 0.65
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())


def test_drop_path_on_two_replicas_drops_what_one_device_drops_and_each_replica_its_own_examples():
    """The layer's seed state is mirrored, so without care both replicas would draw the same mask: each must take its
    rows of the global batch's mask (examples 0-3 on replica 0, 4-7 on replica 1), as one device draws them."""
    x = tf.reshape(tf.range(1.0, 9.0), [8, 1, 1]) * tf.ones([8, 3, 2])
    one = DropPath(0.5, seed=11)(x, training=True).numpy()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    assert len(devices) == 2, "conftest provides two logical CPUs"
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        layer = DropPath(0.5, seed=11)
    halves = strategy.experimental_distribute_values_from_function(
        lambda ctx: x[ctx.replica_id_in_sync_group * 4:(ctx.replica_id_in_sync_group + 1) * 4])
    out = strategy.run(tf.function(lambda v: layer(v, training=True)), args=(halves,))
    both = np.concatenate([t.numpy() for t in strategy.experimental_local_results(out)])
    np.testing.assert_array_equal(both, one)
    kept = one.reshape(8, -1)[:, 0] != 0.0
    assert kept[:4].tolist() != kept[4:].tolist()  # the two replicas' masks differ (this seed's draw)


def test_clone_model_gives_the_same_function_on_new_variables(tiny_size):
    model = build_vit(tiny_size, image_size=8, frozen_patch_projection=True)
    _randomize(model)
    clone = keras.models.clone_model(model)
    assert {id(v) for v in clone.weights}.isdisjoint(id(v) for v in model.weights)
    for a, b in zip(model.weights, clone.weights, strict=True):
        assert a.path == b.path and a.trainable == b.trainable
        b.assign(a)
    images = np.random.default_rng(4).uniform(size=(2, 12, 12, 3)).astype(np.float32)
    np.testing.assert_allclose(clone(images).numpy(), model(images).numpy(), rtol=1e-6, atol=1e-6)
    # --stop-grad-conv1: the patch projection is no trainable variable, in the clone too.
    for m in (model, clone):
        assert not any(v.path.startswith("patch_embed/") for v in m.trainable_variables)


def test_moco_v3_initialisation_bounds(tiny_size, monkeypatch):
    monkeypatch.setitem(vit.VIT_SIZES, "vit_wide", ViTSize(64, 1, 4, 4))
    model = build_vit("vit_wide", image_size=8)
    weights = {v.path: v.numpy() for v in model.weights}
    qkv = weights["block1/qkv/kernel"]
    bound = math.sqrt(6.0 / (64 + 64))  # each of q, k, v as its own D×D matrix
    assert qkv.shape == (64, 192) and np.abs(qkv).max() <= bound and np.abs(qkv).max() > 0.9 * bound
    fc1 = weights["block1/fc1/kernel"]
    xavier = math.sqrt(6.0 / (64 + 256))
    assert np.abs(fc1).max() <= xavier and np.abs(fc1).max() > 0.9 * xavier
    patch = weights["patch_embed/kernel"]
    patch_bound = math.sqrt(6.0 / (3 * 16 + 64))
    assert np.abs(patch).max() <= patch_bound and np.abs(patch).max() > 0.9 * patch_bound
    for name in ("block1/qkv/bias", "block1/fc1/bias", "patch_embed/bias"):
        assert not weights[name].any()


def test_export_serves_the_class_token_and_the_patch_tokens_of_the_backbone_alone(tiny_size, tmp_path):
    backbone = build_vit(tiny_size, image_size=8, input_mean=MEAN, input_std=STD)
    _randomize(backbone)
    path = export_backbone(backbone, str(tmp_path / "saved_model"))
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", PATCH_TOKENS}
    images = np.random.default_rng(5).uniform(size=(2, 16, 16, 3)).astype(np.float32)  # another size: interpolated
    served = loaded.signatures["serving_default"](images=tf.constant(images))["features"].numpy()
    np.testing.assert_allclose(served, backbone(images, training=False).numpy(), rtol=1e-5, atol=1e-5)
    tokens = loaded.signatures[PATCH_TOKENS](images=tf.constant(images))["tokens"].numpy()
    assert tokens.shape == (2, 16, 8)  # a 4×4 grid of patches, class token left out
    full = keras.Model(backbone.input, backbone.get_layer("encoder_norm").output)(images).numpy()
    np.testing.assert_allclose(tokens, full[:, 1:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(served, full[:, 0], rtol=1e-5, atol=1e-5)
    # The backbone's variables, nothing else: what the file holds adds up to its parameters.
    stored = tf.train.list_variables(f"{path}/variables/variables")
    stored_size = sum(int(np.prod(shape)) for name, shape in stored if "VARIABLE_VALUE" in name)
    assert stored_size == sum(int(np.prod(v.shape)) for v in backbone.weights)
    assert len(loaded.trainable_weights) == len(backbone.trainable_weights)
