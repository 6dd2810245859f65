"""ResNet backbones (He et al. 2016) returning global-average-pooled features.

The first layer normalises [0, 1] pixels with the pretraining set's mean and std, as the reference code's last
transform does, so a SavedModel takes [0, 1] images and needs nothing else.
`resnet18` / `resnet50` use the ImageNet stem (7×7 stride-2 conv + max-pool); `resnet18_cifar` uses a 3×3
stride-1 stem without max-pool for 32 px images. They compute torchvision's function (symmetric padding,
stride on the bottleneck's 3×3 conv; tested against an independent NumPy forward pass) and start from the
reference code's initialisation: PyTorch's default conv/linear init and, on the last BN of every residual
branch, γ=0 so each block begins as the identity (torchvision's `zero_init_residual=True`).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import KerasTensor, layers

from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD
from augself_tf.models.batch_norm import BatchNorm
from augself_tf.models.torch_init import Linear, torch_default_kernel

BACKBONES = ("resnet18", "resnet50", "resnet18_cifar")

_STAGES = {
    "resnet18": ("basic", (2, 2, 2, 2), "imagenet"),
    "resnet50": ("bottleneck", (3, 4, 6, 3), "imagenet"),
    "resnet18_cifar": ("basic", (2, 2, 2, 2), "cifar"),
}


def batch_norm(synchronized: bool, zero_init: bool = False, name: str | None = None, **kwargs) -> layers.Layer:
    """BN with PyTorch's defaults (momentum 0.1 there = 0.9 here, eps 1e-5) and its unbiased moving variance
    (:class:`BatchNorm`); `synchronized`: statistics over all replicas; `kwargs` go to the layer."""
    return BatchNorm(synchronized=synchronized, momentum=0.9, epsilon=1e-5,
                     gamma_initializer="zeros" if zero_init else "ones", name=name, **kwargs)


@keras.saving.register_keras_serializable(package="augself_tf")
class InputNormalization(layers.Layer):
    """(x − mean) / std per channel with constant statistics (no weights, so nothing to train or restore).

    Args:
      mean, std: three per-channel values for images in [0, 1].
    """

    def __init__(self, mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"input normalisation needs 3 means and 3 positive stds, got {mean} and {std}")

    def call(self, inputs):
        x = keras.ops.cast(inputs, self.compute_dtype)
        mean = keras.ops.convert_to_tensor(self.mean, self.compute_dtype)
        scale = keras.ops.convert_to_tensor([1.0 / s for s in self.std], self.compute_dtype)
        return (x - mean) * scale

    def get_config(self) -> dict:
        return {**super().get_config(), "mean": list(self.mean), "std": list(self.std)}


def _conv(filters: int, kernel: int, stride: int, name: str) -> Callable[[KerasTensor], KerasTensor]:
    """Conv k×k without bias with PyTorch's padding k//2 on every side and its default initialisation.

    Keras' "same" is already that at stride 1 (odd k); at stride 2 it pads only the bottom/right, which
    shifts each strided conv by a pixel against its shortcut, so only strided convs are padded explicitly
    (explicit padding everywhere cost 18–34% of a CPU step).
    """
    explicit = kernel > 1 and stride > 1
    conv = layers.Conv2D(filters, kernel, strides=stride, padding="valid" if explicit else "same",
                         use_bias=False, kernel_initializer=torch_default_kernel(), name=name)
    if not explicit:
        return conv
    pad = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")
    return lambda x: conv(pad(x))


def _block(x: KerasTensor, filters: int, stride: int, kind: str, sync: bool, name: str) -> KerasTensor:
    out_filters = filters * (4 if kind == "bottleneck" else 1)
    shortcut = x
    if stride != 1 or x.shape[-1] != out_filters:
        shortcut = _conv(out_filters, 1, stride, f"{name}_down_conv")(x)
        shortcut = batch_norm(sync, name=f"{name}_down_bn")(shortcut)
    if kind == "basic":
        y = _conv(filters, 3, stride, f"{name}_conv1")(x)
        y = layers.ReLU()(batch_norm(sync, name=f"{name}_bn1")(y))
        y = _conv(filters, 3, 1, f"{name}_conv2")(y)
        y = batch_norm(sync, zero_init=True, name=f"{name}_bn2")(y)
    else:
        y = _conv(filters, 1, 1, f"{name}_conv1")(x)
        y = layers.ReLU()(batch_norm(sync, name=f"{name}_bn1")(y))
        y = _conv(filters, 3, stride, f"{name}_conv2")(y)
        y = layers.ReLU()(batch_norm(sync, name=f"{name}_bn2")(y))
        y = _conv(out_filters, 1, 1, f"{name}_conv3")(y)
        y = batch_norm(sync, zero_init=True, name=f"{name}_bn3")(y)
    return layers.ReLU()(layers.Add()([shortcut, y]))


def build_backbone(
    name: str = "resnet18",
    width: float = 1.0,
    synchronized_bn: bool = False,
    model_name: str | None = None,
    input_mean: tuple[float, ...] = IMAGENET_MEAN,
    input_std: tuple[float, ...] = IMAGENET_STD,
) -> keras.Model:
    """Builds a ResNet feature extractor mapping [N, H, W, 3] images to [N, d] pooled features.

    Args:
      name: one of `BACKBONES`.
      width: multiplier on every stage's channel count (1.0 = the standard network; 0.25 for CPU runs).
      synchronized_bn: use cross-replica batch statistics (for multi-device training).
      model_name: Keras name of the returned model.
      input_mean, input_std: per-channel statistics the first layer normalises [0, 1] images with
        (the pretraining set's, as the reference code; ImageNet's by default).
    """
    if name not in _STAGES:
        raise ValueError(f"unknown backbone '{name}'; choose from {', '.join(BACKBONES)}")
    if width <= 0:
        raise ValueError(f"backbone width must be positive, got {width}")
    kind, depths, stem = _STAGES[name]
    base = max(1, int(round(64 * width)))
    inputs = keras.Input((None, None, 3), name="images")
    x = InputNormalization(input_mean, input_std, name="input_normalization")(inputs)
    if stem == "imagenet":
        x = _conv(base, 7, 2, "stem_conv")(x)
        x = layers.ReLU()(batch_norm(synchronized_bn, name="stem_bn")(x))
        # torchvision pads with -inf; post-ReLU values are >= 0 and each window holds a real pixel: 0-pad is exact.
        x = layers.MaxPooling2D(3, 2, padding="valid")(layers.ZeroPadding2D(1, name="stem_pool_pad")(x))
    else:
        x = _conv(base, 3, 1, "stem_conv")(x)
        x = layers.ReLU()(batch_norm(synchronized_bn, name="stem_bn")(x))
    for stage, depth in enumerate(depths):
        for i in range(depth):
            stride = 2 if (i == 0 and stage > 0) else 1
            x = _block(x, base * 2**stage, stride, kind, synchronized_bn, f"s{stage + 1}b{i + 1}")
    features = layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, features, name=model_name or name)


def mlp(
    dims: list[int] | tuple[int, ...],
    *,
    hidden_bn: bool = True,
    last_bn: bool = False,
    synchronized_bn: bool = False,
    name: str,
    dtype: str | None = None,
    last_bn_affine: bool = True,
    bias: bool = True,
) -> keras.Sequential:
    """Linear–BN–ReLU stack ending in a Linear (optionally followed by BN, as SimSiam's projector).

    `dims` lists the output size of every linear layer; the input size is inferred at build time.
    Linear layers before a BN drop their bias (the BN's β plays its part); ``bias=False`` drops every bias (MoCo
    v3's MLPs). ``last_bn_affine=False``: the last BN has no γ and β (MoCo v3's). `dtype`: a Keras dtype policy
    for every layer (e.g. "float32" to keep a head out of mixed precision); None = the global policy.
    """
    kw = {} if dtype is None else {"dtype": dtype}
    stack: list[layers.Layer] = []
    for i, d in enumerate(dims):
        last = i == len(dims) - 1
        use_bn = (last and last_bn) or (not last and hidden_bn)
        stack.append(Linear(d, use_bias=bias and not use_bn, name=f"{name}_fc{i + 1}", **kw))
        if use_bn:
            affine = {} if not last or last_bn_affine else {"center": False, "scale": False}
            stack.append(batch_norm(synchronized_bn, name=f"{name}_bn{i + 1}", **kw, **affine))
        if not last:
            stack.append(layers.ReLU(name=f"{name}_relu{i + 1}", **kw))
    return keras.Sequential(stack, name=name)
