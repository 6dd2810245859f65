"""Deterministic image ops used by the augmentation pipeline.

Every op here takes its parameters explicitly (no randomness): the random draws live in
``geometric.py`` and ``photometric.py``. Images are float32 [H, W, 3] in [0, 1] unless stated otherwise. All ops are
graph-safe (usable inside ``tf.data.Dataset.map``) and work with dynamic H and W.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

# The one image -> float32 RGB [0, 1] conversion, shared with the evaluation view; named here with the other ops.
from augself_tf.image_preprocess import to_float_rgb as to_float_rgb

# ITU-R 601-2 luma, as PIL's convert("L") (what the reference code's PIL-based transforms use).
# torchvision's tensor path uses 0.2989 for red; the difference is < 1e-4 per pixel.
GRAY_WEIGHTS = (0.299, 0.587, 0.114)

# Index of each colour-jitter adjustment in ``factors`` / ``order`` of ``color_jitter``.
BRIGHTNESS, CONTRAST, SATURATION, HUE = 0, 1, 2, 3


def crop_and_resize(image: tf.Tensor, offset: tf.Tensor, size: tf.Tensor, out_size: int) -> tf.Tensor:
    """Crops image[y0:y0+h, x0:x0+w] and resizes it to [out_size, out_size] (bilinear, antialiased).

    Antialiasing is on when a side shrinks, like PIL's bilinear resize that torchvision applies to PIL
    images in the reference code (tf.image.resize without it aliases when shrinking a large crop).

    Args:
      image: float32 [H, W, C].
      offset: int [2] (y0, x0) in pixels.
      size: int [2] (h, w) in pixels.
      out_size: side of the square output.
    """
    offset = tf.cast(offset, tf.int32)
    size = tf.cast(size, tf.int32)
    crop = tf.slice(image, tf.concat([offset, [0]], 0), tf.concat([size, [-1]], 0))
    # Antialiasing only changes a shrinking resize, and costs a slower kernel: use it only then.
    return tf.cond(
        tf.reduce_any(size > out_size),
        lambda: tf.image.resize(crop, [out_size, out_size], method="bilinear", antialias=True),
        lambda: tf.image.resize(crop, [out_size, out_size], method="bilinear"),
    )


def rgb_to_grayscale(x: tf.Tensor) -> tf.Tensor:
    """0.299 R + 0.587 G + 0.114 B of [..., 3] -> [..., 1]."""
    # Hand-written rather than tf.image.rgb_to_grayscale so the weights are explicit and match PIL.
    return tf.reduce_sum(x * tf.constant(GRAY_WEIGHTS, x.dtype), axis=-1, keepdims=True)


def grayscale(x: tf.Tensor) -> tf.Tensor:
    """The grayscale image replicated to 3 channels."""
    return tf.tile(rgb_to_grayscale(x), [1] * (x.shape.rank - 1) + [3])


def _blend(x: tf.Tensor, other: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision's _blend: clip(factor * x + (1 - factor) * other, 0, 1)."""
    return tf.clip_by_value(factor * x + (1.0 - factor) * other, 0.0, 1.0)


def adjust_brightness(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_brightness: clip(x * factor, 0, 1)."""
    return tf.clip_by_value(x * factor, 0.0, 1.0)


def adjust_contrast(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_contrast: blend x with the mean of its grayscale image."""
    # tf.image.adjust_contrast blends per channel with each channel's own mean: not torchvision's op.
    mean = tf.reduce_mean(rgb_to_grayscale(x), axis=[-3, -2, -1], keepdims=True)
    return _blend(x, mean, factor)


def adjust_saturation(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """torchvision adjust_saturation: blend x with its grayscale image."""
    # tf.image.adjust_saturation scales S in HSV space: not torchvision's op.
    return _blend(x, rgb_to_grayscale(x), factor)


def adjust_hue(x: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """Rotates the hue by ``delta`` turns (RGB -> HSV, h = (h + delta) mod 1, HSV -> RGB), as torchvision."""
    return tf.clip_by_value(tf.image.adjust_hue(x, delta), 0.0, 1.0)


def color_jitter(x: tf.Tensor, factors: tf.Tensor, order: tf.Tensor) -> tf.Tensor:
    """Applies brightness, contrast, saturation and hue adjustments in the given order.

    Args:
      x: float32 [H, W, 3] in [0, 1].
      factors: float32 [4] = (brightness, contrast, saturation, hue delta).
      order: int32 [4], a permutation of {0, 1, 2, 3} (BRIGHTNESS, CONTRAST, SATURATION, HUE);
        order[i] is the adjustment applied at step i.
    """
    factors = tf.cast(factors, tf.float32)
    order = tf.cast(order, tf.int32)
    branches = [
        lambda y: adjust_brightness(y, factors[BRIGHTNESS]),
        lambda y: adjust_contrast(y, factors[CONTRAST]),
        lambda y: adjust_saturation(y, factors[SATURATION]),
        lambda y: adjust_hue(y, factors[HUE]),
    ]
    for i in range(4):
        # Bind the current x in each branch (default argument) so switch_case runs only one of them.
        x = tf.switch_case(order[i], [lambda f=f, y=x: f(y) for f in branches])
    return x


def adjust_hue_batch(x: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """``adjust_hue`` of images [B, H, W, 3] by a per-example delta [B] (tf.image.adjust_hue takes a scalar)."""
    hsv = tf.image.rgb_to_hsv(x)
    hue = tf.math.floormod(hsv[..., :1] + tf.reshape(delta, [-1, 1, 1, 1]), 1.0)
    return tf.clip_by_value(tf.image.hsv_to_rgb(tf.concat([hue, hsv[..., 1:]], -1)), 0.0, 1.0)


JITTER_METHODS = ("auto", "partition", "select")
#: device types whose replicas take the select jitter: the partition's sizes and indices pass through host memory
#: there (a GPU's dynamic_partition copies its part sizes to the host, dynamic_stitch reads its indices there).
ACCELERATOR_DEVICE_TYPES = ("GPU", "TPU")

# The method "auto" builds within ``jitter_method`` (None: chosen by XLA and the device). A plain global, not a
# thread-local: MirroredStrategy traces each replica's step in a thread of its own.
_forced_method: str | None = None


@contextlib.contextmanager
def jitter_method(method: str) -> Iterator[None]:
    """Within: ``color_jitter_batch(..., method="auto")`` builds ``method`` wherever it is traced (e.g. inside
    ``finish_views`` in the training step), so a benchmark can time each form on the same device."""
    global _forced_method
    if method not in JITTER_METHODS:
        raise ValueError(f"method must be one of {', '.join(JITTER_METHODS)}, got {method!r}")
    previous, _forced_method = _forced_method, None if method == "auto" else method
    try:
        yield
    finally:
        _forced_method = previous


def _in_xla_context() -> bool:
    """Whether the op being built will be XLA-compiled (inside ``tf.function(jit_compile=True)``)."""
    # No public API says so; tf.function(jit_compile=True) traces inside an XLAControlFlowContext, which this
    # finds (also from nested graphs). Without the private module, assume no XLA: the result is the same.
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - a TensorFlow that moved it
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def _scope_device() -> str:
    """The device an op built here is pinned to: the graph's device scope (a replica's device under
    ``strategy.run``), else the eager context's (a ``tf.function`` traced under ``tf.device``); "" if none."""
    # No public API reads the device scope without adding an op; distribute's device_util does it this way.
    try:
        from tensorflow.python.distribute import device_util
        from tensorflow.python.eager import context

        graph = tf.compat.v1.get_default_graph()
        if not tf.executing_eagerly():
            probe = device_util._FakeOperation()
            graph._apply_device_functions(probe)
            if probe.device:
                return probe.device
        return context.context().device_name or ""
    except (ImportError, AttributeError):  # pragma: no cover - a TensorFlow that moved them
        return ""


def replica_on_accelerator() -> bool:
    """Whether ops built here run on a GPU or TPU: the device they are pinned to (a replica's device under a
    strategy) or, when none is named, where TensorFlow's placer puts them (the first GPU or TPU if one is
    visible)."""
    device_type = tf.DeviceSpec.from_string(_scope_device()).device_type
    if device_type:  # a scope that names only a job or task leaves the device type to the placer
        return device_type.upper() in ACCELERATOR_DEVICE_TYPES
    return any(tf.config.list_logical_devices(kind) for kind in ACCELERATOR_DEVICE_TYPES)


def resolve_jitter_method(method: str = "auto") -> str:
    """The form ``color_jitter_batch`` builds here for ``method``: "auto" is the form set by ``jitter_method``,
    else "select" when XLA-compiled or on a GPU/TPU replica (static shapes, nothing through host memory),
    else "partition" (on CPU, 5.7x less CPU than "select": docs/benchmarks.md §4.2)."""
    if method not in JITTER_METHODS:
        raise ValueError(f"method must be one of {', '.join(JITTER_METHODS)}, got {method!r}")
    if method != "auto":
        return method
    if _forced_method is not None:
        return _forced_method
    return "select" if _in_xla_context() or replica_on_accelerator() else "partition"


def _jitter_ops() -> list:
    """The 4 adjustments, indexed BRIGHTNESS..HUE, as fns of (images [n, H, W, 3], their factors [n, 4])."""

    def column(f: tf.Tensor, i: int) -> tf.Tensor:
        return tf.reshape(f[:, i], [-1, 1, 1, 1])

    return [
        lambda y, f: adjust_brightness(y, column(f, BRIGHTNESS)),
        lambda y, f: adjust_contrast(y, column(f, CONTRAST)),
        lambda y, f: adjust_saturation(y, column(f, SATURATION)),
        lambda y, f: adjust_hue_batch(y, f[:, HUE]),
    ]


def color_jitter_batch(
    x: tf.Tensor,
    factors: tf.Tensor,
    order: tf.Tensor,
    applied: tf.Tensor | None = None,
    *,
    method: str = "auto",
) -> tf.Tensor:
    """``color_jitter`` of images [B, H, W, 3] with per-example factors [B, 4] and orders [B, 4].

    Args:
      x: float32 [B, H, W, 3] in [0, 1].
      factors: [B, 4] = (brightness, contrast, saturation, hue delta) per example.
      order: int [B, 4], each row a permutation of {0, 1, 2, 3}; row b's adjustment at step i is order[b, i].
      applied: optional bool [B]; examples where it is False are returned unchanged (and cost nothing with
        ``"partition"``).
      method: how the per-example order is applied; uncompiled, both forms give the same values bit for bit.
        ``"partition"``: at each of the 4 steps the batch is split by the adjustment each example needs
        (``tf.dynamic_partition``), each adjustment runs only on its part, and ``tf.dynamic_stitch`` puts
        the parts back: 4 adjustments per example in all, whatever the mix of orders. On a 2-core CPU,
        512 views at 96 px, 5.7x less CPU than ``"select"`` (docs/benchmarks.md §4.2).
        ``"select"``: at each step all 4 adjustments run on the whole batch and each example keeps the one
        its order names (16 adjustments per example). Static shapes only, which XLA needs: compiled, the
        partition's dynamic shapes ran ~14x slower than this on CPU. Nothing passes through host memory: on a
        GPU, ``tf.dynamic_partition`` copies its part sizes to the host and ``tf.dynamic_stitch`` reads its
        indices there, 32 device-to-host trips per replica per step for two views (``runtime/host_ops.py``).
        ``"auto"`` (``resolve_jitter_method``): ``"select"`` when XLA-compiled or built for a GPU/TPU replica,
        else ``"partition"``; ``jitter_method`` overrides it.
    """
    method = resolve_jitter_method(method)
    factors = tf.cast(factors, tf.float32)
    order = tf.cast(order, tf.int32)
    adjust = _jitter_ops()
    if method == "select":
        y = x
        for i in range(4):
            candidates = [fn(y, factors) for fn in adjust]
            pick = tf.reshape(order[:, i], [-1, 1, 1, 1])
            y_next = candidates[HUE]
            for op in (BRIGHTNESS, CONTRAST, SATURATION):
                y_next = tf.where(tf.equal(pick, op), candidates[op], y_next)
            y = y_next
        return y if applied is None else tf.where(tf.reshape(applied, [-1, 1, 1, 1]), y, x)

    shape = x.shape
    rows = tf.range(tf.shape(x)[0])
    skip = len(adjust)  # the part of the examples left unchanged
    for i in range(4):
        part = order[:, i] if applied is None else tf.where(applied, order[:, i], skip)
        images = tf.dynamic_partition(x, part, skip + 1)
        their_factors = tf.dynamic_partition(factors, part, skip + 1)
        indices = tf.dynamic_partition(rows, part, skip + 1)
        done = [fn(images[k], their_factors[k]) for k, fn in enumerate(adjust)] + [images[skip]]
        x = tf.dynamic_stitch(indices, done)
    x.set_shape(shape)  # dynamic_stitch leaves the batch dimension unknown
    return x


def gaussian_blur_batch(x: tf.Tensor, sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """``gaussian_blur`` of images [B, H, W, C] with a per-example σ [B] (reflect padding, separable).

    The batch is folded into the channels so that one depthwise convolution applies every example's own
    kernel.
    """
    if kernel_size % 2 != 1 or kernel_size < 1:
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
    if kernel_size == 1:
        return x
    pad = (kernel_size - 1) // 2
    half = (kernel_size - 1) / 2.0
    t = tf.linspace(-half, half, kernel_size)
    pdf = tf.exp(-0.5 * tf.square(t[tf.newaxis, :] / tf.reshape(tf.cast(sigma, tf.float32), [-1, 1])))
    kernel = pdf / tf.reduce_sum(pdf, axis=1, keepdims=True)  # [B, k]
    shape = tf.shape(x)
    b, c = shape[0], x.shape[-1]
    padded = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    folded = tf.transpose(padded, [1, 2, 0, 3])  # [H', W', B, C]
    folded = tf.reshape(folded, [1, shape[1] + 2 * pad, shape[2] + 2 * pad, b * c])
    per_channel = tf.reshape(tf.repeat(kernel, c, axis=0), [b * c, kernel_size])  # channel b*C + ch
    ky = tf.reshape(tf.transpose(per_channel), [kernel_size, 1, b * c, 1])
    kx = tf.reshape(tf.transpose(per_channel), [1, kernel_size, b * c, 1])
    out = tf.nn.depthwise_conv2d(folded, ky, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.nn.depthwise_conv2d(out, kx, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.reshape(out, [shape[1], shape[2], b, c])
    return tf.transpose(out, [2, 0, 1, 3])


def gaussian_kernel1d(sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """Normalised 1-D Gaussian exp(-t^2 / (2 sigma^2)) on t = -(k-1)/2 .. (k-1)/2, as torchvision."""
    half = (kernel_size - 1) / 2.0
    t = tf.linspace(-half, half, kernel_size)
    pdf = tf.exp(-0.5 * tf.square(t / tf.cast(sigma, tf.float32)))
    return pdf / tf.reduce_sum(pdf)


def gaussian_blur(x: tf.Tensor, sigma: tf.Tensor, kernel_size: int) -> tf.Tensor:
    """Separable Gaussian blur with reflect padding (torchvision's gaussian_blur).

    TF has no Gaussian blur op (tensorflow-addons is gone), hence a depthwise convolution.

    Args:
      x: float32 [H, W, C] with H, W > (kernel_size - 1) / 2.
      sigma: scalar standard deviation in pixels.
      kernel_size: odd kernel size k; k = 1 is the identity.
    """
    if kernel_size % 2 != 1 or kernel_size < 1:
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
    if kernel_size == 1:
        return x
    pad = (kernel_size - 1) // 2
    channels = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    kernel = gaussian_kernel1d(sigma, kernel_size)
    ky = tf.tile(tf.reshape(kernel, [kernel_size, 1, 1, 1]), [1, 1, channels, 1])
    kx = tf.tile(tf.reshape(kernel, [1, kernel_size, 1, 1]), [1, 1, channels, 1])
    padded = tf.pad(x[tf.newaxis], [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    out = tf.nn.depthwise_conv2d(padded, ky, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.nn.depthwise_conv2d(out, kx, strides=[1, 1, 1, 1], padding="VALID")
    return out[0]


def solarize(x: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """x >= threshold -> 1 - x, else x (the paper's definition).

    TF has no solarize op. Note threshold = 1 (the "not applied" ω) still maps pixels equal to exactly
    1.0 to 0; the pipeline therefore skips the op instead of calling it with threshold 1.
    """
    return tf.where(x >= threshold, 1.0 - x, x)
