"""Two-view pretraining input: per-example pairs (view1, view2, ω1, ω2), batched and replayable.

Every random draw of an example's two views comes from a seed derived from (global seed, epoch, example
index), and the per-epoch shuffle is seeded from (global seed, epoch). Epoch e therefore yields the same
batches whenever it is produced, which is what makes a resumed run continue exactly: the loop rebuilds the
stream at the resumed epoch and skips the examples already consumed, before decoding or augmenting them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import tensorflow as tf

from augself_tf.augment import PHOTOMETRIC_MODES, AugmentConfig
from augself_tf.augment.pipeline import augment_views
from augself_tf.augment.views import TWO_VIEWS, ViewPlan, check_pair_batch

_SHUFFLE_SALT = 0x5EED
_VIEW_SALT = 0xA11


def example_seed(seed: int, epoch: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """Stateless seed [2] for one example of one epoch."""
    base = tf.constant([seed, _VIEW_SALT], tf.int64)
    s = tf.random.experimental.stateless_fold_in(base, tf.cast(epoch, tf.int64))
    return tf.random.experimental.stateless_fold_in(s, tf.cast(index, tf.int64))


def _order_key(seed: int, epoch: tf.Tensor) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(tf.constant([seed, _SHUFFLE_SALT], tf.int64),
                                                   tf.cast(epoch, tf.int64))


def epoch_order(seed: int, epoch: tf.Tensor, n: int) -> tf.Tensor:
    """Epoch ``epoch``'s order of ``n`` examples: a uniform random permutation of [0, n) (int64 [n]), a pure
    function of (seed, epoch), as the reference's fresh ``RandomSampler`` permutation every epoch."""
    return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=_order_key(seed, epoch))


def buffer_seed(seed: int, epoch: tf.Tensor) -> tf.Tensor:
    """The shuffle buffer's seed of epoch ``epoch`` (int64 scalar), drawn from the (seed, epoch) key. The key's
    first entry alone, used before, is the same for every epoch (fold_in keeps it): one order for all epochs."""
    return tf.random.stateless_uniform([], _order_key(seed, epoch), minval=0, maxval=2**62, dtype=tf.int64)


class EpochReader(Protocol):
    """A source the pair stream reads one epoch at a time, as cheap records (file names, array rows, encoded
    examples) that it decodes only after a resume's skip: what `make_pair_dataset` takes besides a dataset.

    ``pads``: whether ``epoch`` repeats its examples up to ``take`` when it has fewer (a worker's share of
    files may hold a few examples less than its share of the epoch's batches).
    """

    pads: bool

    def size(self, shard: tuple[int, int] | None) -> int | None:
        """Examples of one epoch of ``shard`` (None: not known without reading)."""
        ...

    def epoch(self, seed: int, epoch: tf.Tensor, shard: tuple[int, int] | None, skip: tf.Tensor,
              take: tf.Tensor | None, shuffle_buffer: int) -> tf.data.Dataset:
        """(index, record) of epoch ``epoch`` for ``shard`` in its order, a function of (seed, epoch), after its
        first ``skip`` (int64) left out unread or at least undecoded; ``index`` is the example's identity, the
        same whoever reads it and whenever."""
        ...

    def decode(self, record: Any) -> dict:
        """The example ``{"image", "label"[, ...]}`` of a record."""
        ...


class _Records:
    """Equal-length arrays (file names, in-memory images) and the function making one row an example: every
    epoch a full permutation (`epoch_order`) of the rows, this shard's every k-th of it, sliced past a skip."""

    pads = False

    def __init__(self, records: dict, decode: Callable[[dict], dict]):
        self.records = {k: tf.constant(v) for k, v in records.items()}
        self.n = int(next(iter(self.records.values())).shape[0])
        self.decode = decode

    def size(self, shard: tuple[int, int] | None) -> int:
        index, count = shard if shard is not None else (0, 1)
        return len(range(index, self.n, count))

    def epoch(self, seed: int, epoch: tf.Tensor, shard: tuple[int, int] | None, skip: tf.Tensor,
              take: tf.Tensor | None, shuffle_buffer: int) -> tf.data.Dataset:
        order = epoch_order(seed, epoch, self.n)
        if shard is not None and shard[1] > 1:
            order = order[shard[0]::shard[1]]
        order = order[skip:]  # a resume's skipped rows are never read
        return tf.data.Dataset.from_tensor_slices(order).map(
            lambda i: (i, {k: tf.gather(v, i) for k, v in self.records.items()}))


class _Buffered:
    """A dataset of decoded examples, enumerated before sharding (an index is global, not per worker), shuffled
    in a buffer seeded by (seed, epoch); a resume's skip comes after the shuffle, before any augmentation."""

    pads = False

    def __init__(self, source: tf.data.Dataset, shard: tuple[int, int] | None, cache: bool):
        base = source.enumerate()
        if shard is not None and shard[1] > 1:
            base = base.shard(shard[1], shard[0])
        self.base = base.cache() if cache else base
        n = tf.get_static_value(self.base.cardinality())  # None when built inside a graph
        self.n = int(n) if n is not None and n >= 0 else None

    def size(self, shard: tuple[int, int] | None) -> int | None:
        return self.n

    def epoch(self, seed: int, epoch: tf.Tensor, shard: tuple[int, int] | None, skip: tf.Tensor,
              take: tf.Tensor | None, shuffle_buffer: int) -> tf.data.Dataset:
        ds = self.base.shuffle(shuffle_buffer, seed=buffer_seed(seed, epoch), reshuffle_each_iteration=False)
        return ds.skip(skip)

    @staticmethod
    def decode(example: dict) -> dict:
        return example


def two_views(example: dict, seed: tf.Tensor, config: AugmentConfig, photometric: str = "host",
              views: ViewPlan = TWO_VIEWS, pair_seed: tf.Tensor | None = None) -> dict:
    """Maps one source example to {view1, view2, omega1, omega2[, label]} from a seed [2] (and view3, omega3,
    ... for a plan of more views; ``augself_tf.augment.views``).

    With ``photometric="device"`` the views are uint8 with only the geometric steps applied, and the
    photometric steps' draws ride along as ``device1`` / ``device2`` / ... for ``finish_views``.
    ``pair_seed``: the seed of the example's partner, for a plan with aligned steps.
    """
    out = augment_views(example["image"], seed, config, views, photometric, pair_seed)
    if "label" in example:
        out["label"] = tf.cast(example["label"], tf.int64)
    return out


def _with_partner(previous: tf.Tensor, element: tuple) -> tuple:
    """scan step over (index, record): the partner of an example is the index of the pair's first example.

    The state is the pair's first index after it, -1 after a pair's second example; an epoch's stream starts at a
    batch boundary, so its even positions start the pairs."""
    index, record = element
    partner = tf.where(previous < 0, index, previous)
    return tf.where(previous < 0, index, tf.constant(-1, tf.int64)), (index, partner, record)


def make_pair_dataset(
    source: tf.data.Dataset | tuple[dict, Callable[[dict], dict]] | EpochReader,
    config: AugmentConfig,
    *,
    seed: int,
    batch_size: int,
    start_epoch: int = 0,
    num_epochs: int | None = None,
    batches_per_epoch: int | None = None,
    skip_batches: int = 0,
    shuffle_buffer: int = 10_000,
    shard: tuple[int, int] | None = None,
    cache: bool = False,
    deterministic: bool = True,
    photometric: str = "host",
    views: ViewPlan = TWO_VIEWS,
) -> tf.data.Dataset:
    """Batches of two (or ``views.num_views``) augmented views with their ω, epoch after epoch.

    The stream's cardinality is known (infinite without ``num_epochs``) and its batch dimension static, so a
    distributed iterator over it needs no end-of-data check per step (``get_next_as_optional``).

    Args:
      source: dataset of {"image": uint8 [H,W,3], "label": ...} (see `augself_tf.data.sources`), shuffled with
        a ``shuffle_buffer`` of examples; or (records, decode): equal-length arrays (file names, in-memory
        images) and the function making one record an example, fully permuted every epoch (`epoch_order`); or
        an `EpochReader` (tfds: files permuted per epoch, a buffer over their interleaved records).
      config: augmentation settings.
      seed: global seed; with the epoch and the example index it fixes every view.
      batch_size: examples per batch (the per-replica batch under `distribute_datasets_from_function`).
      start_epoch / num_epochs: epochs [start_epoch, num_epochs) (None = forever).
      batches_per_epoch: cut every epoch to this many batches (None: every full batch of the shard).
        Multi-replica training sets it so that an epoch is the loop's epoch whatever the shard's size.
      skip_batches: batches of `start_epoch` already consumed (resume inside an epoch). Their examples are
        skipped before they are decoded or augmented; the examples after keep their index and so their views.
      shard: (index, count) of this input pipeline, for multi-worker input sharding.
      cache: keep the decoded source in memory across epochs (a dataset source only).
      deterministic: keep element order fixed under parallel map (needed for exact resume).
      photometric: "host" applies every augmentation here (float32 views); "device" leaves the photometric
        ones to ``augself_tf.augment.finish_views`` in the training step (uint8 views, same draws and ω).
      views: the views of every example and the draws they share (the method's ``view_plan``; default two
        independent views). A plan with ``aligned`` steps pairs the examples of every batch: example 2i+1
        draws those steps from example 2i's seed (``ViewPlan.slot_seeds``). Pairs are formed in the stream's
        order, which is a function of (seed, epoch, shard) and is cut into batches at even positions (a
        resume skips whole batches), so they stay inside one batch and are the same after a resume.

    Raises:
      ValueError: a non-positive or, for aligned pairs, odd ``batch_size``; an unknown ``photometric``.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if photometric not in PHOTOMETRIC_MODES:
        raise ValueError(f"photometric must be one of {', '.join(PHOTOMETRIC_MODES)}, got {photometric!r}")
    check_pair_batch(views, batch_size)
    if batches_per_epoch is not None and batches_per_epoch <= 0:
        raise ValueError(f"batches_per_epoch must be positive, got {batches_per_epoch}")
    if isinstance(source, tf.data.Dataset):
        reader: EpochReader = _Buffered(source, shard, cache)
    elif isinstance(source, tuple):
        reader = _Records(*source)
    else:
        reader = source
    size = reader.size(shard)
    per_epoch = None if size is None else size // batch_size
    if batches_per_epoch is not None:
        per_epoch = batches_per_epoch if reader.pads or per_epoch is None else min(per_epoch, batches_per_epoch)
        if size is None and not reader.pads:
            per_epoch = None  # an epoch may end before the cut
    if per_epoch:  # a skip of whole epochs starts a later epoch
        start_epoch, skip_batches = start_epoch + skip_batches // per_epoch, skip_batches % per_epoch
    options = tf.data.Options()
    options.deterministic = deterministic

    def epoch_stream(epoch: tf.Tensor) -> tf.data.Dataset:
        # The order must depend on (seed, epoch) alone: ignore a global seed the caller may have set (with
        # global seed 0, tf.data's seed handling would even compare this tensor seed to 0 in Python).
        tf.compat.v1.get_default_graph().seed = None  # this epoch function's own graph only
        skip = tf.where(tf.equal(epoch, start_epoch), tf.constant(skip_batches, tf.int64), tf.constant(0, tf.int64))
        take = None if batches_per_epoch is None else (batches_per_epoch - skip) * batch_size
        ds = reader.epoch(seed, epoch, shard, skip * batch_size, take, shuffle_buffer)
        if views.aligned:
            ds = ds.scan(tf.constant(-1, tf.int64), _with_partner).map(
                lambda i, partner, record: two_views(reader.decode(record), example_seed(seed, epoch, i), config,
                                                     photometric, views, example_seed(seed, epoch, partner)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        else:
            ds = ds.map(
                lambda i, record: two_views(reader.decode(record), example_seed(seed, epoch, i), config, photometric,
                                            views),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        ds = ds.batch(batch_size, drop_remainder=True)
        return ds if batches_per_epoch is None else ds.take(batches_per_epoch - skip)

    stop = num_epochs if num_epochs is not None else 2**62
    ds = tf.data.Dataset.range(start_epoch, stop).flat_map(epoch_stream)
    # flat_map's cardinality is unknown; state it (an infinite stream, or every epoch's batches).
    if num_epochs is None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    elif per_epoch is not None:
        total = max(0, (num_epochs - start_epoch) * per_epoch - (skip_batches if num_epochs > start_epoch else 0))
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)
