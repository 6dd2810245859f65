"""Our ResNets compute torchvision's function on normalised input: an independent NumPy forward pass
(the reference's Normalize(mean, std) transform first, symmetric zero padding,
inference-mode BN, max-pool padded with -inf, stride on the bottleneck's 3x3 conv) given the same weights.
Also the reference code's initialisation (PyTorch defaults, zero-init residual BN)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from augself_tf.models.resnet import build_backbone, mlp

EPS = 1e-5


def conv2d(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """PyTorch Conv2d(padding=k//2, bias=False) on NHWC with an HWIO kernel."""
    k = w.shape[0]
    p = k // 2
    x = np.pad(x, [(0, 0), (p, p), (p, p), (0, 0)])
    n, h, wd, c = x.shape
    oh, ow = (h - k) // stride + 1, (wd - k) // stride + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))  # n, h-k+1, w-k+1, c, k, k
    windows = windows[:, : (oh - 1) * stride + 1 : stride, : (ow - 1) * stride + 1 : stride]
    return np.einsum("nhwcij,ijco->nhwo", windows, w, optimize=True)


def batch_norm(x: np.ndarray, bn: dict) -> np.ndarray:
    """PyTorch BatchNorm2d in eval mode: running statistics, eps 1e-5."""
    return (x - bn["mean"]) / np.sqrt(bn["var"] + EPS) * bn["gamma"] + bn["beta"]


def max_pool_3x3_s2_p1(x: np.ndarray) -> np.ndarray:
    """PyTorch MaxPool2d(3, stride=2, padding=1): the padding is -inf, so it never wins a window."""
    x = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))[:, ::2, ::2]
    return windows.max(axis=(-2, -1))


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, 0.0)


STL10_MEAN, STL10_STD = np.array([0.43, 0.42, 0.39]), np.array([0.27, 0.26, 0.27])


def reference_forward(x: np.ndarray, weights: dict, name: str) -> np.ndarray:
    """torchvision's Normalize(STL10's mean, std) then its ResNet (v1.5) forward from a {layer name: weights}
    dict, in float64."""
    x = (x - STL10_MEAN) / STL10_STD
    kind, depths = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet50": ("bottleneck", (3, 4, 6, 3)),
                    "resnet18_cifar": ("basic", (2, 2, 2, 2))}[name]
    if name == "resnet18_cifar":
        x = relu(batch_norm(conv2d(x, weights["stem_conv"], 1), weights["stem_bn"]))
    else:
        x = relu(batch_norm(conv2d(x, weights["stem_conv"], 2), weights["stem_bn"]))
        x = max_pool_3x3_s2_p1(x)
    for stage, depth in enumerate(depths):
        for i in range(depth):
            b = f"s{stage + 1}b{i + 1}"
            stride = 2 if (i == 0 and stage > 0) else 1
            shortcut = x
            if f"{b}_down_conv" in weights:
                shortcut = batch_norm(conv2d(x, weights[f"{b}_down_conv"], stride), weights[f"{b}_down_bn"])
            if kind == "basic":
                y = relu(batch_norm(conv2d(x, weights[f"{b}_conv1"], stride), weights[f"{b}_bn1"]))
                y = batch_norm(conv2d(y, weights[f"{b}_conv2"], 1), weights[f"{b}_bn2"])
            else:
                y = relu(batch_norm(conv2d(x, weights[f"{b}_conv1"], 1), weights[f"{b}_bn1"]))
                y = relu(batch_norm(conv2d(y, weights[f"{b}_conv2"], stride), weights[f"{b}_bn2"]))
                y = batch_norm(conv2d(y, weights[f"{b}_conv3"], 1), weights[f"{b}_bn3"])
            x = relu(shortcut + y)
    return x.mean(axis=(1, 2))


def randomise_bn_and_read_weights(model: keras.Model, rng: np.random.Generator) -> dict:
    """Gives every BN non-trivial statistics and affine terms (γ ≠ 0 too), returns the weights by layer name."""
    weights = {}
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            c = layer.gamma.shape[0]
            bn = {"gamma": rng.uniform(0.5, 1.5, c), "beta": rng.normal(0, 0.2, c),
                  "mean": rng.normal(0, 0.2, c), "var": rng.uniform(0.5, 2.0, c)}
            layer.set_weights([bn["gamma"], bn["beta"], bn["mean"], bn["var"]])
            weights[layer.name] = bn
        elif type(layer).__name__ == "Conv2D":
            weights[layer.name] = layer.kernel.numpy().astype(np.float64)
    return weights


@pytest.mark.parametrize(
    "name, width, size",
    [("resnet18", 0.125, (37, 33)), ("resnet18", 0.125, (32, 32)), ("resnet50", 0.0625, (35, 38)),
     ("resnet18_cifar", 0.125, (15, 17)), ("resnet18_cifar", 0.125, (32, 32))],
)
def test_backbone_equals_an_independent_torchvision_forward(name: str, width: float, size: tuple[int, int]) -> None:
    """Random BN statistics/affines (γ ≠ 0 everywhere), odd and even sizes: Keras in inference mode equals NumPy."""
    rng = np.random.default_rng(0)
    model = build_backbone(name, width, input_mean=tuple(STL10_MEAN), input_std=tuple(STL10_STD))
    weights = randomise_bn_and_read_weights(model, rng)
    x = rng.uniform(0, 1, (2, *size, 3))
    ours = model(x.astype(np.float32), training=False).numpy()
    ref = reference_forward(x, weights, name)
    assert ours.shape == ref.shape
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    assert err <= 1e-4, f"{name} {size}: max relative error {err:.2e}"


def test_initialisation_is_the_reference_codes() -> None:
    """PyTorch's defaults (the reference resets every Conv2d/Linear): U(±1/√fan_in); BN γ=1 except γ=0 last."""
    keras.utils.set_random_seed(0)  # as train() seeds it; the bounds below hold for any seed but fixed is repeatable
    model = build_backbone("resnet18", 0.25)
    for layer in model.layers:
        if type(layer).__name__ == "Conv2D":
            w = layer.kernel.numpy()
            bound = 1.0 / np.sqrt(np.prod(w.shape[:3])) * (1 + 1e-6)  # float32 rounding of the limit
            assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound, layer.name
            if w.size > 1000:
                np.testing.assert_allclose(w.std(), bound / np.sqrt(3), rtol=0.1, err_msg=layer.name)
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma = layer.gamma.numpy()
            last = layer.name.endswith("_bn2") and "down" not in layer.name
            assert np.all(gamma == (0.0 if last else 1.0)), layer.name
    head = mlp([512, 512, 4], name="head")
    head.build((None, 256))
    fc3 = head.get_layer("head_fc3")
    bound = 1.0 / np.sqrt(512) * (1 + 1e-6)
    kernel, bias = fc3.kernel.numpy(), fc3.bias.numpy()
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.95 * bound  # glorot's would be 0.1
    assert np.abs(bias).max() <= bound and np.all(bias != 0)  # Keras' default bias is 0
    assert not hasattr(head.get_layer("head_fc1"), "bias") or head.get_layer("head_fc1").bias is None
