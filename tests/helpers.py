"""Shared test helpers: tiny models, random batches, running train steps on 1 or 2 replicas, NumPy pieces
of the reference computations, and what TensorBoard's HParams dashboard shows for a log directory.

A two-layer conv backbone stands in for the ResNet where the test does not need one: the methods only see
pooled features, and tracing a ResNet step on 2 replicas costs minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os

import keras
import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig
from augself_tf.methods import AugSelfModel, build_method
from augself_tf.methods.model_config import ModelConfig
from augself_tf.models.resnet import batch_norm, build_backbone
from augself_tf.objectives import objective_options
from augself_tf.training.optim import build_optimizer
from augself_tf.training.train_config import TrainConfig

#: default image size of the test batches.
S = 8
#: head sizes small enough for CPU tests; each method takes the entries its constructor accepts.
SMALL = {
    "projector_hidden": 16,
    "projector_dim": 8,
    "predictor_hidden": 12,
    "num_prototypes": 5,
    "num_classes": 3,
}


def tiny_backbone(sync: bool = False) -> keras.Model:
    """Conv 3×3/2 (6 channels) – BN – ReLU – global average pooling: 6-d features."""
    x = keras.Input([None, None, 3])
    # Named like every layer of the library's own models: checkpoint keys are layer names, not creation order.
    y = keras.layers.Conv2D(6, 3, strides=2, padding="same", use_bias=False, name="tiny_conv")(x)
    y = batch_norm(sync, name="tiny_bn")(y)  # the library's BN, as its models use
    y = keras.layers.ReLU()(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, y, name="tiny")


def make_model(method: str, augself=("crop", "color"), *, sync: bool = False, seed: int = 1, resnet: bool = False,
               image_size: int = S, **options) -> AugSelfModel:
    """A built method model on the tiny backbone (or a 1/8-width ResNet-18), `SMALL` heads unless overridden; the
    objectives' options among ``options`` are its ``objective_options``."""
    keras.utils.set_random_seed(seed)
    backbone = build_backbone("resnet18_cifar", 0.125, synchronized_bn=sync) if resnet else tiny_backbone(sync)
    objective = {k: options.pop(k) for k in list(options) if k in objective_options()}  # each its own record
    model = build_method(method, backbone, options={**SMALL, **options}, objective_options=objective,
                         augself=augself, synchronized_bn=sync)
    model.build_all(image_size)
    return model


def with_conditioning(settings: dict) -> dict:
    """``settings`` for `build_method` with their ``condition*`` entries (`ModelConfig`'s field names) made the one
    `Conditioning` a model is handed, built as `ModelConfig` builds it."""
    flags = {k: v for k, v in settings.items() if k.startswith("condition") and k != "conditioning"}
    rest = {k: v for k, v in settings.items() if k not in flags}
    return {**rest, "conditioning": ModelConfig(**flags).conditioning()} if flags else rest


def omega(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Random ω of every predictable augmentation for `n` views."""
    return {
        "crop": rng.uniform(0, 1, [n, 4]).astype("float32"),
        "flip": (rng.uniform(size=[n, 1]) > 0.5).astype("float32"),
        "color": rng.uniform(0, 1, [n, 4]).astype("float32"),
        "blur": rng.uniform(0, 1, [n, 1]).astype("float32"),
        "rotation": rng.integers(0, 4, [n, 1]).astype("float32"),
        "solarize": rng.uniform(0, 1, [n, 1]).astype("float32"),
    }


def batch(seed: int = 0, n: int = 8, size: int = S, views: int = 2) -> dict:
    """Random views, ω and labels of ``n`` examples at ``size`` px (``views`` views each: view1, view2, ...)."""
    rng = np.random.default_rng(seed)
    out = {
        "view1": rng.uniform(0, 1, [n, size, size, 3]).astype("float32"),
        "view2": rng.uniform(0, 1, [n, size, size, 3]).astype("float32"),
        "omega1": omega(rng, n),
        "omega2": omega(rng, n),
        "label": rng.integers(0, 3, [n]).astype("int64"),
    }
    for j in range(3, views + 1):  # drawn after the first two, so two-view batches stay what they were
        out[f"view{j}"] = rng.uniform(0, 1, [n, size, size, 3]).astype("float32")
        out[f"omega{j}"] = omega(rng, n)
    return out


def half(tree, i: int):
    """Replica `i`'s half (first or second) of every array in a (nested) batch."""
    if isinstance(tree, dict):
        return {k: half(v, i) for k, v in tree.items()}
    n = len(tree) // 2
    return tree[i * n:(i + 1) * n]


def compile_model(model: AugSelfModel, strategy: tf.distribute.Strategy | None = None, lr: float = 0.05,
                  total_steps: int = 100) -> None:
    """SGD with the training loop's schedule and coupled L2 5e-4, built on the optimized variables, as train()
    does."""
    with strategy.scope() if strategy else contextlib.nullcontext():
        model.compile(optimizer=build_optimizer(lr, 256, total_steps, weight_decay=5e-4,
                                                constant_lr_variables=model.constant_lr_variables()))
        model.optimizer.build(model.optimized_variables())


def run_steps(model: AugSelfModel, batches: list[dict], strategy: tf.distribute.Strategy | None = None) -> list[dict]:
    """Per-step logs (mean over replicas) of `model.train_step` on full batches split over 2 replicas."""
    if strategy is None:
        step = tf.function(model.train_step)
        return [{k: float(v) for k, v in step(b).items()} for b in batches]

    replica_step = model.train_step
    if not strategy.extended._use_merge_call():
        # As a GPU runs an XLA-compiled replica function: each replica calls its own traced function, so a
        # merge_call anywhere in the step raises ("merge_call called while defining a new graph"). Called from
        # a lambda: strategy.run given a tf.function on CPUs would trace all replicas into one function instead.
        replica_function = tf.function(model.train_step)

        def replica_step(values):
            return replica_function(values)

    @tf.function
    def dist_step(values):
        out = strategy.run(replica_step, args=(values,))
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in out.items()}

    logs = []
    for b in batches:
        parts = [half(b, i) for i in range(2)]
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx, p=parts: p[ctx.replica_id_in_sync_group])
        logs.append({k: float(v) for k, v in dist_step(values).items()})
    return logs


def eager_steps(model: AugSelfModel, batches: list[dict]) -> list[dict]:
    """Per-step logs of `model.train_step` run eagerly on one device, op by op: for tests of a step's arithmetic
    (two models' steps compared, an update rule checked, the one-device reference of a 2 replicas = 1 device
    test), where the trace and graph instantiation `run_steps` pays would be most of the cost: a tiny model's
    step ran in 0.2-0.4 CPU s eagerly and 1.0-2.1 s traced (SimSiam, LooC; 2-4 s for a first trace). Tests that
    a step traces keep `run_steps`."""
    return [{k: float(v) for k, v in model.train_step(tf.nest.map_structure(tf.convert_to_tensor, b)).items()}
            for b in batches]


def replica_values(var) -> list[np.ndarray]:
    """Values of a Keras variable on every replica (one entry when not mirrored)."""
    tf_var = getattr(var, "value", var)
    return [np.asarray(v) for v in getattr(tf_var, "values", [tf_var])]


def one_device_and_two_replicas(build, b: dict, reduction: str = "one_device"):
    """The model ``build()`` returns, built twice from the same seed and stepped once on batch ``b``: on one device,
    untraced (`eager_steps`, the reference's arithmetic), and traced on 2 CPU replicas (`conftest.mirrored_cpus`
    with ``reduction``), each half of ``b`` on one replica. Returns (single, double, one, two): the two models
    and their step logs, as `assert_replicas_equal_one_device` takes them."""
    from conftest import mirrored_cpus

    single = build()
    compile_model(single)
    one = eager_steps(single, [b])[0]
    strategy = mirrored_cpus(reduction)
    with strategy.scope():
        double = build()
    compile_model(double, strategy)
    two = run_steps(double, [b], strategy)[0]
    return single, double, one, two


def assert_replicas_equal_one_device(single, double, one: dict, two: dict) -> None:
    """A 2-replica run (`double`, its logs `two`) matches the one-device run of the same batch (`single`, `one`):
    the method's loss, and every replica's copy of every weight, to round-off.

    The loss's absolute tolerance, 1e-6 (8 float32 steps at 1): a loss such as SimSiam's −cos averages terms of
    size 1 to a value that may be near 0, where a relative tolerance alone would ask for more than float32 gives.
    One device runs BN through the fused kernel and the replicas through their all-reduces (another summation
    order): SimSiam's 0.03737 differed by 5.4e-7. BN statistics per replica instead of global moved a tiny SimSiam's
    loss by 0.07."""
    np.testing.assert_allclose(two["loss/method"], one["loss/method"], rtol=1e-5, atol=1e-6)
    for a, w in zip(single.weights, double.weights, strict=True):
        for value in replica_values(w):
            np.testing.assert_allclose(a.numpy(), value, rtol=1e-4, atol=1e-5, err_msg=a.path)


def unit(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """`x` scaled to unit ℓ2 norm along `axis`."""
    return x / np.linalg.norm(x, axis=axis, keepdims=True)


def np_log_softmax(x: np.ndarray) -> np.ndarray:
    """log softmax over the last axis."""
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def hparams_dashboard_rows(logdir: str) -> dict[str, tuple[dict, dict]]:
    """What the HParams dashboard shows for ``tensorboard --logdir LOGDIR``: {session: (hparams, metrics)}."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    tb = base_plugin.TBContext(logdir=logdir, multiplexer=mux, data_provider=provider)
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=100, allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS])
    groups = list_session_groups.Handler(
        context.RequestContext(), backend_context.Context(tb), "", request).run().session_groups
    rows = {}
    for g in groups:
        hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in g.hparams.items()}
        metrics = {(m.name.group, m.name.tag): m.value for m in g.metric_values}
        rows[g.name] = (hparams, metrics)
    return rows


def replace_config(cfg: TrainConfig, **overrides) -> TrainConfig:
    """``cfg`` with ``overrides``, each applied where it lives: `ModelConfig`'s fields to ``cfg.model``."""
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    model = {k: overrides.pop(k) for k in list(overrides) if k in model_fields}
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model), **overrides)


def make_config(**settings) -> TrainConfig:
    """A `TrainConfig` from flat settings, as the flags write them (model settings among the others)."""
    return replace_config(TrainConfig(), **settings)


def tiny_run(model_dir: str, **overrides) -> TrainConfig:
    """A pretraining run of a few seconds: MoCo + AugSelf at width 1/16, 16 px, batch 16, 6 steps."""
    base = make_config(
        method="moco",
        augself=("crop", "color"),
        dataset="shapes",
        backbone="resnet18_cifar",
        width=0.0625,
        augment=AugmentConfig(image_size=16),
        batch_size=16,
        epochs=1,
        max_steps=6,
        lr=0.05,
        model_dir=model_dir,
        method_options={"queue_size": 64, "projector_hidden": 32, "projector_dim": 16},
        checkpoint_every=3,
        verbose=0,
        shuffle_buffer=256,
        monitor="none",  # tests/test_monitors.py turns them on
    )
    return replace_config(base, **overrides)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The real images of ../shared/data (tests may read them; the project never needs them): shared/ sits beside
#: the checkout (CI's clone and the work tree); /work/shared is where it lives here.
DATA = next((d for d in (os.path.join(ROOT, "..", "shared", "data"), "/work/shared/data") if os.path.isdir(d)),
            os.path.join(ROOT, "..", "shared", "data"))


def real_images(tiny: tuple[int, int], cifar: tuple[int, int]) -> list[tf.Tensor]:
    """Square real images, decoded: every ``tiny[0]``-th Tiny-ImageNet JPEG (64 px, some grayscale) up to
    ``tiny[1]`` of them, then every ``cifar[0]``-th CIFAR-10 JPEG (32 px) up to ``cifar[1]``."""
    found = []
    for pattern, (every, count) in ((("tiny-imagenet-mini", "images", "*", "*.JPEG"), tiny),
                                    (("cifar10-mini", "train", "*", "*.jpg"), cifar)):
        files = sorted(glob.glob(os.path.join(DATA, *pattern)))[::every][:count]
        assert len(files) == count, f"real images not found under {DATA}"
        found += files
    return [tf.io.decode_image(tf.io.read_file(f), expand_animations=False) for f in found]


def assert_export_is_the_backbone(result, image_size: int = 16,
                                  signatures: tuple[str, ...] = ("serving_default",)) -> tf.Module:
    """A run's SavedModel holds the backbone alone (its ``signatures``: one, plus a ViT's ``patch_tokens``; the
    backbone's weights, none of the heads') and gives the trained backbone's features; returns the loaded model."""
    loaded = tf.saved_model.load(result.saved_model_dir)
    assert sorted(loaded.signatures) == sorted(signatures)
    assert len(loaded.trainable_weights) == len(result.model.evaluated_backbone.trainable_variables)
    images = np.random.default_rng(0).uniform(size=[2, image_size, image_size, 3]).astype("float32")
    features = loaded.signatures["serving_default"](images=tf.constant(images))["features"].numpy()
    evaluated = result.model.evaluated_backbone(images, training=False).numpy()  # DINO: the teacher
    np.testing.assert_allclose(features, evaluated, rtol=1e-4, atol=1e-5)
    return loaded
