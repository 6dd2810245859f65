"""A tfds split as the pair stream reads it: encoded records, files in a per-epoch order, decoded last.

A prepared split is a list of record files (tfds' file instructions). Every epoch permutes the files with a
seed of (seed, epoch), gives each input pipeline every k-th file of that permutation (workers read disjoint
files, and no worker reads another's), interleaves the pipeline's files and shuffles their records in a buffer
seeded by (seed, epoch): tfds' own file shuffling plus interleave, as a function of (seed, epoch). The records
are parsed without decoding the image (``tfds.decode.SkipDecoding``), so a class filter (ImageNet-100 keeps
9.9% of imagenet2012) and a resume's skip come before any image is decoded.

Written here rather than through ``builder.as_dataset(read_config=tfds.ReadConfig(shuffle_seed=...,
input_context=...))``: tfds takes its shuffle seed as a Python int when the dataset is built, while an epoch's
order must be a tensor function of the epoch inside the pair stream (and its file sharding is the same every
epoch). Without files (``tfds.testing.mock_data``, other file formats) the split is read through
``as_dataset`` in its stored order, its records sharded one in k, then filtered, shuffled and skipped alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from augself_tf.data.classes import class_lookup
from augself_tf.data.pretrain import buffer_seed

_FILE_SALT = 0xF11E
_CYCLE = 16  # files read at once per pipeline (tfds' default interleave cycle length)
_RECORD_BITS = 32  # an example's index: file number << 32 | its position in the file


class TfdsRecords:
    """The :class:`~augself_tf.data.pretrain.EpochReader` of a tfds split (see the module docstring).

    Args:
      files: (path, first record, records) of every file of the split (tfds' file instructions), or None to
        read ``stream``.
      stream: the split as a dataset of parsed, undecoded examples (used when ``files`` is None).
      parse: serialized record -> example dict with the image still encoded.
      image_key / label_key: the example's image and label features (label None: every label is -1).
      decode_image: encoded image -> uint8 [H, W, 3].
      classes: keep only these labels, relabelled to their position here (None: keep every example).
      extra: further keys copied from the parsed example (e.g. ``bbox``).
    """

    pads = True  # an epoch cut to `take` examples repeats its own examples when its files hold fewer

    def __init__(self, *, files: Sequence[tuple[str, int, int]] | None, stream: tf.data.Dataset | None,
                 parse: Callable[[tf.Tensor], dict], image_key: str, label_key: str | None,
                 decode_image: Callable[[tf.Tensor], tf.Tensor], classes: Sequence[int] | None = None,
                 extra: Sequence[str] = ()):
        if files is None and stream is None:
            raise ValueError("TfdsRecords needs record files or a stream")
        self.files = list(files) if files is not None else None
        self._stream, self._parse = stream, parse
        self._image_key, self._label_key, self._extra = image_key, label_key, tuple(extra)
        self._decode_image = decode_image
        self._relabel = class_lookup(classes) if classes is not None else None

    def size(self, shard: tuple[int, int] | None) -> int | None:
        """Unknown without reading: a worker's share of files, or of a class subset, varies."""
        return None

    def _record_stream(self, seed: int, epoch: tf.Tensor, shard: tuple[int, int] | None) -> tf.data.Dataset:
        """(index, parsed example) of this pipeline's files in the epoch's file order, interleaved."""
        if self.files is None:
            ds = self._stream.enumerate()
            return ds.shard(shard[1], shard[0]) if shard is not None and shard[1] > 1 else ds
        paths = tf.constant([f[0] for f in self.files])
        starts = tf.constant([f[1] for f in self.files], tf.int64)
        counts = tf.constant([f[2] for f in self.files], tf.int64)
        key = tf.random.experimental.stateless_fold_in(tf.constant([seed, _FILE_SALT], tf.int64),
                                                       tf.cast(epoch, tf.int64))
        order = tf.random.experimental.stateless_shuffle(tf.range(len(self.files), dtype=tf.int64), seed=key)
        if shard is not None and shard[1] > 1:
            order = order[shard[0]::shard[1]]

        def one_file(f: tf.Tensor) -> tf.data.Dataset:
            records = tf.data.TFRecordDataset(paths[f]).skip(starts[f]).take(counts[f])
            return records.enumerate(start=starts[f]).map(
                lambda r, serialized: (tf.bitwise.left_shift(f, _RECORD_BITS) + r, serialized))

        ds = tf.data.Dataset.from_tensor_slices(order).interleave(
            one_file, cycle_length=min(_CYCLE, len(self.files)), block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.map(lambda i, serialized: (i, self._parse(serialized)), num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=True)

    def _keep(self, ex: dict) -> dict:
        label = tf.cast(ex[self._label_key], tf.int64) if self._label_key else tf.constant(-1, tf.int64)
        out = {"image": ex[self._image_key], "label": label if self._relabel is None else self._relabel(label)}
        out.update({k: ex[k] for k in self._extra})
        return out

    def epoch(self, seed: int, epoch: tf.Tensor, shard: tuple[int, int] | None, skip: tf.Tensor,
              take: tf.Tensor | None, shuffle_buffer: int) -> tf.data.Dataset:
        """(index, example with its image encoded) of epoch ``epoch`` for ``shard``, filtered, shuffled, past
        ``skip``; repeated up to ``take`` examples when given."""
        ds = self._record_stream(seed, epoch, shard).map(lambda i, ex: (i, self._keep(ex)))
        if self._relabel is not None:  # on the label alone, before any image is decoded
            ds = ds.filter(lambda i, ex: ex["label"] >= 0)
        ds = ds.shuffle(shuffle_buffer, seed=buffer_seed(seed, epoch), reshuffle_each_iteration=False)
        if take is not None:
            ds = ds.repeat()  # an empty stream stays empty: tf.data ends a repeat whose pass yields nothing
        ds = ds.skip(skip)
        return ds if take is None else ds.take(take)

    def decode(self, record: dict) -> dict:
        """The example of a record: its image decoded to uint8 RGB."""
        return {**record, "image": self._decode_image(record["image"])}
