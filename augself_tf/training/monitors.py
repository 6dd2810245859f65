"""Online monitors: transfer measured on the backbone while it trains (``--monitor``, docs/monitors.md).

Each monitor is a weighted kNN top-1 accuracy (:mod:`augself_tf.training.knn`) of the backbone's features:
a labelled *bank* split classifies a *query* split. ``knn`` predicts the class label, ``knn:KEY`` an extra
label of the source (``knn:color`` on ``shapes``), and ``colorperm`` which of the 6 RGB channel orders was
applied to an image (bank and queries each get one order, balanced, from a fixed seed): how much colour
information the features keep, without fitting anything.

The images are read and preprocessed once per run (eval preprocessing at the run's image size, kept as
uint8); every evaluation runs ``backbone(images, training=False)`` under the run's strategy, so it reads
the weights and writes nothing: no batch-norm statistics, no random draws, no optimizer state.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import keras
import numpy as np
import tensorflow as tf

from augself_tf.data import catalog
from augself_tf.data.eval_view import CHANNEL_PERMUTATIONS, preprocess
from augself_tf.data.sources import SourceInfo, load_source, source_info
from augself_tf.training.knn import weighted_knn_accuracy

if TYPE_CHECKING:
    from augself_tf.training.train_config import TrainConfig

QUERY_SPLITS = ("test", "validation", "val")  # the first one a source has is the default query split
PERMUTATION = "permutation"  # the label colorperm predicts: index into CHANNEL_PERMUTATIONS
CHOICES = "auto, none, or a comma list of knn, knn:LABEL, colorperm"


@dataclasses.dataclass(frozen=True)
class Monitor:
    """One monitored quantity.

    Attributes:
      name: TensorBoard tag under ``monitor/`` (``knn``, ``knn_color``, ``colorperm``).
      label: the key of the labels it predicts (``label``, ``color``, ... or :data:`PERMUTATION`).
    """

    name: str
    label: str

    @property
    def permuted(self) -> bool:
        """Whether it reads features of channel-permuted images."""
        return self.label == PERMUTATION


def parse_monitors(text: str, info: SourceInfo) -> tuple[Monitor, ...]:
    """The monitors ``--monitor`` names, checked against the labels of the monitor data ``info``.

    ``auto``: ``knn`` when the data has class labels, plus ``knn:color`` when it has a colour label
    (``shapes``), else ``colorperm``. ``none`` (or empty): no monitors.

    Raises:
      ValueError: an unknown monitor, or a kNN monitor of labels the data does not have.
    """
    names = [n.strip() for n in str(text or "none").split(",") if n.strip()]
    if names in ([], ["none"]):
        return ()
    if names == ["auto"]:
        names = ["knn"] if info.num_classes and info.num_classes > 0 else []
        names.append("knn:color" if "color" in info.extra_labels else "colorperm")
    labels = (["label"] if info.num_classes and info.num_classes > 0 else []) + list(info.extra_labels)
    monitors = []
    for name in names:
        if name == "colorperm":
            monitors.append(Monitor("colorperm", PERMUTATION))
        elif name == "knn" or name.startswith("knn:"):
            key = "label" if name == "knn" else name[len("knn:") :]
            if key not in labels:
                raise ValueError(
                    f"monitor {name!r} needs {key!r} labels, but {info.name}:{info.split} has "
                    f"{'only ' + ', '.join(labels) if labels else 'no labels'}; point --monitor_dataset/"
                    "--monitor_splits at labelled data or use --monitor=colorperm"
                )
            monitors.append(Monitor("knn" if key == "label" else f"knn_{key}", key))
        else:
            raise ValueError(f"unknown monitor {name!r}; choose {CHOICES}")
    if len({m.name for m in monitors}) != len(monitors):
        raise ValueError(f"--monitor={text} names a monitor twice")
    return tuple(monitors)


def monitor_splits(text: str | None, spec: str, data_dir: str | None) -> tuple[str, str]:
    """(bank split, query split): ``BANK,QUERY`` as given, or by default ``train`` and the first the source has
    of the dataset's test split (the catalog's: tfds ``food101`` tests on ``validation``) and :data:`QUERY_SPLITS`."""
    if text:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"--monitor_splits must be BANK,QUERY (e.g. train,test), got {text!r}")
        return parts[0], parts[1]
    have = source_info(spec, "train", data_dir=data_dir).splits
    facts = catalog.lookup(spec)
    query = next((s for s in ((facts.test_split,) if facts else ()) + QUERY_SPLITS if s in have), None)
    if query is None:
        raise ValueError(f"dataset {spec!r} has no {'/'.join(QUERY_SPLITS)} split to monitor on; "
                         "set --monitor_splits=BANK,QUERY or --monitor=none")
    return "train", query


@dataclasses.dataclass
class MonitorData:
    """One split's monitor examples: eval-preprocessed uint8 images and their labels.

    Attributes:
      images: uint8 [n, S, S, 3].
      labels: key -> int64 [n], including :data:`PERMUTATION` (the channel order each image gets in colorperm).
      num_classes: key -> number of classes.
    """

    images: np.ndarray
    labels: dict[str, np.ndarray]
    num_classes: dict[str, int]


def load_monitor_data(
    spec: str, info: SourceInfo, keys: list[str], image_size: int, limit: int, seed: int, data_dir: str | None
) -> MonitorData:
    """The first ``limit`` examples of ``spec``'s split ``info.split`` with the label ``keys`` (read once per run).

    The first examples rather than a shuffled draw: shapes, folder and tfds sources are already stored in
    a fixed pseudo-random order, and reading only ``limit`` images keeps the cost bounded on large splits.

    Raises:
      ValueError: the split is empty or a wanted label is missing (-1) on some of its examples.
    """
    split = info.split

    def prepare(ex: dict) -> dict:
        image = tf.cast(tf.round(preprocess(ex["image"], image_size) * 255.0), tf.uint8)
        return {"image": image, **{k: tf.cast(ex[k], tf.int64) for k in keys}}

    ds = load_source(spec, split, data_dir=data_dir).take(limit)
    ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE).batch(256)
    parts: dict[str, list[np.ndarray]] = {"image": [], **{k: [] for k in keys}}
    for batch in ds.as_numpy_iterator():
        for k, v in batch.items():
            parts[k].append(v)
    if not parts["image"]:
        raise ValueError(f"monitor split {spec}:{split} has no examples")
    images = np.concatenate(parts["image"])
    labels = {k: np.concatenate(parts[k]) for k in keys}
    num_classes = {}
    for k in keys:
        if (labels[k] < 0).any():
            raise ValueError(f"monitor split {spec}:{split} has examples without {k!r} labels; "
                             "set --monitor_splits to labelled splits")
        known = info.num_classes if k == "label" else len(info.extra_labels.get(k, []))
        num_classes[k] = max(int(known or 0), int(labels[k].max()) + 1)
    # Each image gets one channel order; balanced over the 6 orders, fixed by the seed.
    order = np.arange(len(images)) % len(CHANNEL_PERMUTATIONS)
    labels[PERMUTATION] = np.random.default_rng(seed).permutation(order).astype(np.int64)
    num_classes[PERMUTATION] = len(CHANNEL_PERMUTATIONS)
    return MonitorData(images, labels, num_classes)


class DistributedFeatures:
    """Backbone features of host images computed on every replica of a strategy and gathered back.

    The images are padded to whole global batches so every replica (on every worker) gets the same batch
    shape; each row carries its index (-1 for padding), and the gathered rows are put back by index, so
    padding is dropped and every image is counted exactly once whatever order the gather returns.
    """

    def __init__(self, strategy: tf.distribute.Strategy, backbone: keras.Model, global_batch: int) -> None:
        self.strategy = strategy
        replicas = strategy.num_replicas_in_sync
        self.per_replica = max(1, global_batch // replicas)
        self.global_batch = self.per_replica * replicas
        orders = tf.constant(CHANNEL_PERMUTATIONS, tf.int32)

        def replica_features(images: tf.Tensor, perms: tf.Tensor, index: tf.Tensor):
            x = tf.cast(images, tf.float32) / 255.0
            x = tf.gather(x, tf.gather(orders, perms), axis=3, batch_dims=1)  # each image's channel order
            return tf.cast(backbone(x, training=False), tf.float32), index

        @tf.function
        def step(images, perms, index):
            features, idx = strategy.run(replica_features, args=(images, perms, index))
            return strategy.gather(features, axis=0), strategy.gather(idx, axis=0)

        self._step = step

    def __call__(self, images: np.ndarray, perms: np.ndarray | None = None) -> np.ndarray:
        """float32 [n, d] features of uint8 ``images`` [n, S, S, 3], each under channel order ``perms[i]``."""
        n = len(images)
        steps = -(-n // self.global_batch)
        pad = steps * self.global_batch - n
        images = np.concatenate([images, np.zeros((pad, *images.shape[1:]), images.dtype)])
        perms = np.concatenate([np.zeros(n, np.int32) if perms is None else perms.astype(np.int32),
                                np.zeros(pad, np.int32)])
        index = np.concatenate([np.arange(n, dtype=np.int64), np.full(pad, -1, np.int64)])
        b = self.per_replica
        out: np.ndarray | None = None
        counts = np.zeros(n, np.int64)
        for s in range(steps):
            def rows(array: np.ndarray, s: int = s) -> tf.Tensor:
                def value_fn(ctx: tf.distribute.ValueContext) -> np.ndarray:
                    start = s * self.global_batch + ctx.replica_id_in_sync_group * b
                    return array[start : start + b]

                return self.strategy.experimental_distribute_values_from_function(value_fn)

            features, idx = self._step(rows(images), rows(perms), rows(index))
            features, idx = np.asarray(features), np.asarray(idx)  # numpy already when run eagerly
            if out is None:
                out = np.zeros((n, features.shape[1]), np.float32)
            real = idx >= 0
            out[idx[real]] = features[real]
            counts += np.bincount(idx[real], minlength=n)
        if not (counts == 1).all():  # would mean a sharding bug: examples lost or counted twice
            raise RuntimeError(f"monitor features: {int((counts != 1).sum())} of {n} images not gathered once")
        return out


class OnlineMonitors:
    """Runs the monitors at chosen steps: TensorBoard scalars ``monitor/*``, one stdout line, last values."""

    def __init__(
        self,
        monitors: tuple[Monitor, ...],
        bank: MonitorData,
        queries: MonitorData,
        features: DistributedFeatures,
        *,
        k: int,
        temperature: float,
        writer: tf.summary.SummaryWriter | None,
        log: Callable[[str], None],
    ) -> None:
        self.monitors = monitors
        self.bank, self.queries = bank, queries
        self.features = features
        self.k, self.temperature = k, temperature
        self.writer = writer
        self.log = log
        self.seconds_total = 0.0
        self.last: dict[str, float] = {}

    def run(self, step: int, epoch: float) -> dict[str, float]:
        """Evaluates every monitor on the current weights (a collective: every worker must call it)."""
        start = time.perf_counter()
        values: dict[str, float] = {}
        for permuted in sorted({m.permuted for m in self.monitors}):
            bank = self.features(self.bank.images, self.bank.labels[PERMUTATION] if permuted else None)
            queries = self.features(self.queries.images, self.queries.labels[PERMUTATION] if permuted else None)
            for m in self.monitors:
                if m.permuted == permuted:
                    values[m.name] = weighted_knn_accuracy(
                        bank, self.bank.labels[m.label], queries, self.queries.labels[m.label],
                        max(self.bank.num_classes[m.label], self.queries.num_classes[m.label]),
                        self.k, self.temperature,
                    )
        values = {m.name: values[m.name] for m in self.monitors}  # in the order asked for
        values["seconds"] = time.perf_counter() - start
        self.seconds_total += values["seconds"]
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in values.items():
                    tf.summary.scalar(f"monitor/{name}", value)
            self.writer.flush()
        shown = "  ".join(f"{name} {value:.3f}" for name, value in values.items() if name != "seconds")
        self.log(f"monitor  step {step}  epoch {epoch:.3g}  {shown}  ({values['seconds']:.1f} s)")
        self.last = {**values, "seconds_total": self.seconds_total}
        return values


@dataclasses.dataclass(frozen=True)
class MonitorPlan:
    """What the monitors read: the first ``bank_size`` of ``spec``'s ``bank_split`` classify the first
    ``query_size`` of its ``query_split``."""

    monitors: tuple[Monitor, ...]
    spec: str
    bank_split: str
    query_split: str
    bank_info: SourceInfo
    query_info: SourceInfo
    bank_size: int
    query_size: int


# Default subset sizes as fractions of the pretraining split, capped: on small data (shapes: 5000 images,
# 10 epochs) the monitors stay within ~5% of the run; large data gets the usual 5000-image kNN bank.
BANK_FRACTION, BANK_CAP = 0.2, 5000
QUERY_FRACTION, QUERY_CAP = 0.1, 1000


def plan_monitors(cfg: TrainConfig, pretrain_examples: int) -> MonitorPlan | None:
    """Checks the monitor settings without reading images (so bad flags fail before the model is built).

    Returns None for ``--monitor=none``.

    Raises:
      ValueError: a bad monitor flag, or monitor data without the labels a monitor needs.
    """
    for name in ("monitor_every", "monitor_bank_size", "monitor_query_size", "monitor_k"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be at least 1, got {value}")
    if not cfg.monitor_temperature > 0:
        raise ValueError(f"--monitor_temperature must be positive, got {cfg.monitor_temperature}")
    if str(cfg.monitor or "none").strip() in ("", "none"):
        return None
    spec = cfg.monitor_dataset or cfg.dataset
    bank_split, query_split = monitor_splits(cfg.monitor_splits, spec, cfg.data_dir)
    bank_info = source_info(spec, bank_split, data_dir=cfg.data_dir)
    query_info = source_info(spec, query_split, data_dir=cfg.data_dir)
    monitors = parse_monitors(cfg.monitor, bank_info)
    parse_monitors(cfg.monitor, query_info)  # the same labels
    if not monitors:
        return None
    bank_size = cfg.monitor_bank_size or min(BANK_CAP, max(1, int(BANK_FRACTION * pretrain_examples)))
    query_size = cfg.monitor_query_size or min(QUERY_CAP, max(1, int(QUERY_FRACTION * pretrain_examples)))
    return MonitorPlan(monitors, spec, bank_split, query_split, bank_info, query_info, bank_size, query_size)


def build_monitors(
    plan: MonitorPlan,
    cfg: TrainConfig,
    strategy: tf.distribute.Strategy,
    backbone: keras.Model,
    writer: tf.summary.SummaryWriter | None,
    log: Callable[[str], None],
) -> OnlineMonitors:
    """The run's monitors with their data read and preprocessed at the run's image size."""
    start = time.perf_counter()
    keys = sorted({m.label for m in plan.monitors if not m.permuted})
    size, spec = cfg.augment.image_size, plan.spec
    bank = load_monitor_data(spec, plan.bank_info, keys, size, plan.bank_size, cfg.seed, cfg.data_dir)
    queries = load_monitor_data(spec, plan.query_info, keys, size, plan.query_size, cfg.seed + 1, cfg.data_dir)
    log(f"Monitors {', '.join(m.name for m in plan.monitors)} every {cfg.monitor_every} epoch(s): kNN of "
        f"{len(queries.images)} {spec}:{plan.query_split} on {len(bank.images)} {spec}:{plan.bank_split} images "
        f"(read in {time.perf_counter() - start:.1f} s)")
    # Inference keeps no activations for a backward pass: twice the training batch fits where training does.
    monitors = OnlineMonitors(
        plan.monitors, bank, queries, DistributedFeatures(strategy, backbone, 2 * cfg.batch_size),
        k=cfg.monitor_k, temperature=cfg.monitor_temperature, writer=writer, log=log,
    )
    monitors.seconds_total = time.perf_counter() - start  # reading the data is part of the monitors' cost
    return monitors
