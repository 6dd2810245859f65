"""bench_cpu_step.py part 1, ``padding``: a plain ResNet-18 step under three paddings, made by patching
``augself_tf.models.resnet`` inside this process, with a check that (b) and (c) compute the same function."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from unittest import mock

import keras
import tensorflow as tf

import augself_tf.models.resnet as resnet
from bench import common
from bench.cpu_step_stats import merge_rounds, paired, print_step_table, step_summary

# ------------------------------------------------------------------------------------------------ 1. padding


def _conv_same(filters: int, kernel: int, stride: int, name: str):
    """(a) Keras' `same` everywhere: at stride 2 it pads bottom/right only (not torchvision's function)."""
    return keras.layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                               kernel_initializer=resnet.torch_default_kernel(), name=name)


def _conv_explicit_all(filters: int, kernel: int, stride: int, name: str):
    """(b) The earlier code: ZeroPadding2D(k//2) + `valid` on every k>1 conv."""
    conv = keras.layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=False,
                               kernel_initializer=resnet.torch_default_kernel(), name=name)
    if kernel == 1:
        return conv
    pad = keras.layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")
    return lambda x: conv(pad(x))


class _SameMaxPoolLayers:
    """`keras.layers` as resnet.py sees it, except that the stem max-pool is `same` without its padding layer."""

    def __getattr__(self, name: str):
        return getattr(keras.layers, name)

    @staticmethod
    def ZeroPadding2D(padding, name=None, **kwargs):  # noqa: N802  (mirrors the Keras name it replaces)
        if name == "stem_pool_pad":
            return lambda x: x
        return keras.layers.ZeroPadding2D(padding, name=name, **kwargs)

    @staticmethod
    def MaxPooling2D(pool_size, strides=None, padding="valid", **kwargs):  # noqa: N802
        return keras.layers.MaxPooling2D(pool_size, strides, padding="same", **kwargs)


@contextlib.contextmanager
def padding_variant(variant: str) -> Iterator[None]:
    """Patches resnet.py's module globals for the duration of one build_backbone call."""
    if variant == "same":
        with mock.patch.object(resnet, "_conv", _conv_same), mock.patch.object(resnet, "layers", _SameMaxPoolLayers()):
            yield
    elif variant == "explicit_all":
        with mock.patch.object(resnet, "_conv", _conv_explicit_all):
            yield
    elif variant == "stride2":
        yield
    else:
        raise ValueError(variant)


PADDING_LABELS = {
    "same": "(a) `same` everywhere (conv and max-pool)",
    "explicit_all": "(b) explicit on every k>1 conv (before)",
    "stride2": "(c) explicit on stride-2 convs + max-pool (now)",
}


class BackboneStep:
    """build_backbone under a padding variant; `run()` = one forward+backward+SGD apply of mean(f²)."""

    def __init__(self, variant: str, width: float, image_size: int, batch_size: int) -> None:
        keras.utils.set_random_seed(0)
        with padding_variant(variant):
            self.model = resnet.build_backbone("resnet18", width, model_name=f"resnet18_{variant}")
        self.pads = sum(isinstance(layer, keras.layers.ZeroPadding2D) for layer in self.model.layers)
        self.optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        self.optimizer.build(self.model.trainable_variables)
        self.x = tf.random.stateless_uniform([batch_size, image_size, image_size, 3], seed=[0, 1])
        self.batch_size = batch_size
        self._step = common.mean_square_step(self.model, self.optimizer)

    def run(self) -> common.Timing:
        t0, c0 = time.perf_counter(), time.process_time()
        loss = float(self._step(self.x))
        timing = common.Timing(time.perf_counter() - t0, time.process_time() - c0, self.batch_size)
        if loss != loss:
            raise RuntimeError("NaN loss")
        return timing


def same_function(a: keras.Model, b: keras.Model, image_size: int) -> float:
    """max |a(x) − b(x)| in inference mode after copying a's conv/BN weights into b (layers matched by name)."""
    weights = {layer.name: layer.get_weights() for layer in a.layers if layer.weights}
    for layer in b.layers:
        if layer.weights:
            layer.set_weights(weights[layer.name])
    x = tf.random.stateless_uniform([2, image_size, image_size, 3], seed=[3, 4])
    return float(tf.reduce_max(tf.abs(a(x, training=False) - b(x, training=False))))


def part_padding(args) -> dict:
    steps = {}
    for variant in PADDING_LABELS:
        t0 = time.perf_counter()
        steps[variant] = BackboneStep(variant, args.padding_width, args.image_size, args.padding_batch)
        print(f"# built {PADDING_LABELS[variant]}: {steps[variant].pads} ZeroPadding2D layers, "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
    # At an even size `same` pads a stride-2 conv bottom/right only, so (a) differs there; (b) never may.
    check = {"explicit_all vs stride2": same_function(steps["stride2"].model, steps["explicit_all"].model, 64),
             "same vs stride2": same_function(steps["stride2"].model, steps["same"].model, 64)}
    print(f"# max |difference| of the features from the same weights at 64 px: "
          f"(b) vs (c) {check['explicit_all vs stride2']:.1e} (must be ~0), (a) vs (c) {check['same vs stride2']:.1e}",
          flush=True)
    times = common.interleaved_steps({k: s.run for k, s in steps.items()}, warmup=args.warmup,
                                     repeats=args.repeats, per_round=args.per_round, log=True)
    times = {k: merge_rounds(v, args.per_round) for k, v in times.items()}
    summary = {k: {**v, "zero_padding_layers": steps[k].pads} for k, v in step_summary(times).items()}
    ratios = {"b/c": paired(times, "explicit_all", "stride2"), "a/c": paired(times, "same", "stride2")}
    print_step_table(f"\n1. padding: ResNet-18 w{args.padding_width:g}, {args.image_size}px, batch "
                     f"{args.padding_batch}, forward+backward+SGD (s per step, median [min..max] over "
                     f"{args.repeats} rounds)", summary, ratios, label=PADDING_LABELS.get, width=52, digits=3)
    return {"summary": summary, "ratios": ratios, "function_check": check}
