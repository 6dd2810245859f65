"""The pair stream as an accelerator sees it: known cardinality and a static batch (no end-of-data check per step
under multi-worker input), tfds read file by file and filtered before decoding, and a resume that skips before
decoding and augmenting and then yields the uninterrupted run's pairs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from conftest import mirrored_cpus
from PIL import Image
from tensorflow.python.distribute import input_lib

from augself_tf.augment import AugmentConfig
from augself_tf.data import folder, pretrain, tfds_source
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source, pair_records
from augself_tf.training.loop import TrainConfig, distributed_pairs
from augself_tf.training.train_config import resolve_photometric

CONFIG = AugmentConfig(image_size=8)
_DECODES = ("DecodeImage", "DecodeJpeg", "DecodePng", "DecodeBmp", "DecodeGif")


class AugselfTestShards(tfds.core.GeneratorBasedBuilder):
    """A tiny tfds dataset in several record files: 48 RGB images of 4 classes, pixel value = 5 * index."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 3)),
            "label": tfds.features.ClassLabel(names=["a", "b", "c", "d"])}), supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(48)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": np.full((8, 8, 3), 5 * i, np.uint8), "label": i % 4}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    AugselfTestShards(data_dir=data_dir).download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=4))
    return data_dir


@pytest.fixture(scope="module")
def folder_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    for i in range(40):
        d = root / f"c{i % 4}"
        d.mkdir(exist_ok=True)
        Image.fromarray(np.full((10, 12, 3), 6 * i, np.uint8)).save(d / f"{i}.png")
    return str(root)


def _sources(kind: str, tfds_dir: str, folder_dir: str):
    if kind == "folder":
        return folder.records(folder_dir, "all")
    if kind == "in-memory":
        rows = {"image": np.random.default_rng(0).integers(0, 255, (40, 8, 8, 3), np.uint8),
                "label": np.arange(40, dtype=np.int64)}
        return rows, lambda example: example
    if kind == "tfds":
        return tfds_source.records("augself_test_shards", "train", data_dir=tfds_dir)
    return load_source("shapes", "test").take(40)  # a tf.data source, shuffled in a buffer


def _batches(ds) -> list:
    return [b["view1"].numpy() for b in ds]


# ----------------------------------------------------------------------------------------- resume skips
# Every source with one shard count in the fast tier, the other in the slow one.
@pytest.mark.parametrize(("kind", "shards"), [
    (kind, shards) if fast else pytest.param(kind, shards, marks=pytest.mark.slow)
    for kind, fast_shards in (("folder", 1), ("in-memory", 2), ("tfds", 2), ("dataset", 1))
    for shards, fast in ((1, fast_shards == 1), (2, fast_shards == 2))])
def test_a_resume_yields_the_uninterrupted_pairs_bit_for_bit_and_augments_nothing_it_skips(
        kind, shards, tfds_dir, folder_dir, monkeypatch):
    calls = []
    real = pretrain.two_views

    def counted(example, seed, *args, **kwargs):
        tick = tf.py_function(lambda: calls.append(1) or 0, [], tf.int32)  # once per augmented example
        with tf.control_dependencies([tick]):
            return real({**example, "image": tf.identity(example["image"])}, seed, *args, **kwargs)

    monkeypatch.setattr(pretrain, "two_views", counted)
    source = _sources(kind, tfds_dir, folder_dir)
    bpe = 5 if kind == "tfds" else None  # tfds pads a worker's epoch up to its cut (the loop always cuts)
    for shard in [(shards - 1, shards)]:  # the second of two shards: its indices are not its positions
        kwargs = dict(seed=7, batch_size=4, shuffle_buffer=64, shard=shard, batches_per_epoch=bpe)
        full = _batches(make_pair_dataset(source, CONFIG, start_epoch=1, num_epochs=3, **kwargs))
        per_epoch = len(full) // 2
        assert per_epoch >= 5 and len(full) == 2 * per_epoch
        for skip in (per_epoch - 2, per_epoch + 1):  # mid-epoch, and a count that lands in the next epoch
            calls.clear()
            resumed = _batches(make_pair_dataset(source, CONFIG, start_epoch=1, num_epochs=3, skip_batches=skip,
                                                 **kwargs))
            assert len(resumed) == len(full) - skip
            for a, b in zip(resumed, full[skip:], strict=True):
                np.testing.assert_array_equal(a, b)
            # Every shard here holds whole batches: exactly the examples of the batches yielded were augmented
            # (the stream before this change augmented all of the skipped ones too).
            assert len(calls) == 4 * len(resumed)


def test_the_skip_sits_upstream_of_the_augment_map_in_the_dataset_graph(tfds_dir):
    sources = (tfds_source.records("augself_test_shards", "train", data_dir=tfds_dir),
               load_source("shapes", "test"))
    for source in sources:
        ds = make_pair_dataset(source, CONFIG, seed=0, batch_size=4, skip_batches=2, num_epochs=1,
                               batches_per_epoch=5)
        chain = _flat_map_chain(_graph(ds))  # output first
        augment = [i for i, (op, fn) in enumerate(chain) if "Map" in op and any(o.startswith("StatelessRandom")
                                                                                 for o in fn)]
        assert augment, chain
        assert "SkipDataset" in [op for op, _ in chain[max(augment) + 1:]], chain


# ---------------------------------------------------------------------------------------------- graph
def _graph(ds: tf.data.Dataset):
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(ds._as_serialized_graph().numpy())
    return graph


def _function_ops(graph) -> dict[str, set[str]]:
    """Every library function's ops, those of the functions it calls included."""
    own = {f.signature.name: f for f in graph.library.function}

    def called(f) -> set[str]:
        names = set()
        for node in f.node_def:
            names.add(node.op)
            for attr in node.attr.values():
                if attr.func.name:
                    names.add(attr.func.name)
                names.update(g.name for g in attr.list.func)
        return names

    direct = {name: called(f) for name, f in own.items()}
    out: dict[str, set[str]] = {}

    def closure(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name in out:
            return out[name]
        ops = set()
        for item in direct.get(name, ()):
            ops.add(item)
            if item in direct and item not in seen:
                ops |= closure(item, seen | {name})
        out[name] = ops
        return ops

    for name in own:
        closure(name)
    return out


def _chain(nodes, start, fn_ops) -> list[tuple[str, set[str]]]:
    """(dataset op, its function's ops) from ``start`` back along first inputs."""
    chain, name = [], start
    while name in nodes:
        node = nodes[name]
        fn = node.attr["f"].func.name if "f" in node.attr else (
            node.attr["predicate"].func.name if "predicate" in node.attr else "")
        chain.append((node.op, fn_ops.get(fn, set())))
        if not node.input:
            break
        name = node.input[0].split(":")[0].lstrip("^")
    return chain


def _flat_map_chain(graph) -> list[tuple[str, set[str]]]:
    """The dataset ops of the pair stream's per-epoch function (the FlatMapDataset's), output first."""
    fn_ops = _function_ops(graph)
    nodes = {n.name: n for n in graph.node}
    flat = next(n for n in graph.node if n.op == "FlatMapDataset"  # over the epochs' range (tfds mock: more)
                and nodes[n.input[0].split(":")[0]].op == "RangeDataset")
    epoch_fn = next(f for f in graph.library.function if f.signature.name == flat.attr["f"].func.name)
    nodes = {n.name: n for n in epoch_fn.node_def}
    ret = epoch_fn.ret[epoch_fn.signature.output_arg[0].name].split(":")[0]
    return _chain(nodes, ret, fn_ops)


def _top_chain(ds: tf.data.Dataset) -> list[tuple[str, set[str]]]:
    graph = _graph(ds)
    nodes = {n.name: n for n in graph.node}
    sink = next(n for n in graph.node if n.op == "_Retval" or n.name.startswith("dataset"))
    start = sink.input[0].split(":")[0] if sink.op == "_Retval" else sink.name
    return _chain(nodes, start, _function_ops(graph))


@pytest.fixture
def decoded(monkeypatch) -> list[int]:
    """Grows by one for every image tfds decodes (its Image feature's decode, counted when the graph runs it)."""
    count: list[int] = []
    real = tfds.features.Image.decode_example

    def counting(self, example):
        tick = tf.py_function(lambda: count.append(1) or 0, [], tf.int32)
        with tf.control_dependencies([tick]):
            return real(self, tf.identity(example))

    monkeypatch.setattr(tfds.features.Image, "decode_example", counting)
    return count


def test_imagenet100_of_tfds_filters_on_the_label_before_it_decodes_one_image(decoded):
    with tfds.testing.mock_data(num_examples=400):
        ds = load_source("imagenet100", "train")
        chain = _top_chain(ds)
        used = [int(ex["label"]) for ex in ds.as_numpy_iterator()]
        records = pair_records("imagenet100", "train")
        decoded_load = len(decoded)
        decoded.clear()
        pairs = make_pair_dataset(records, CONFIG, seed=0, batch_size=2, num_epochs=1)
        pair_labels = np.concatenate([b["label"] for b in pairs.as_numpy_iterator()])
        epoch_chain = _flat_map_chain(_graph(pairs))
    assert 0 < len(used) < 100 and all(0 <= label < 100 for label in used)  # about 10% of 400 random labels
    assert decoded_load == len(used)  # one decode per image kept, none for the 90% filtered out
    assert len(decoded) == len(used)  # the pair stream: the same
    assert len(pair_labels) == len(used) // 2 * 2 and set(pair_labels) <= set(used)
    for c in (chain, epoch_chain):
        ops = [op for op, _ in c]
        filt = ops.index("FilterDataset")
        decode_at = [i for i, (_, fn) in enumerate(c) if fn & set(_DECODES)]
        assert decode_at and max(decode_at) < filt, c  # output first: every decode is downstream of the filter


def test_fc100_of_tfds_decodes_only_the_images_of_its_20_classes(decoded):
    with tfds.testing.mock_data(num_examples=300):
        ds = load_source("fc100", "all")
        chain = _top_chain(ds)
        kept = [int(ex["label"]) for ex in ds.as_numpy_iterator()]
    assert 0 < len(kept) < 150 and all(0 <= label < 20 for label in kept)  # about a fifth of the 300 mock images
    assert len(decoded) == len(kept)  # one decode per image kept
    ops = [op for op, _ in chain]
    decode_at = [i for i, (_, fn) in enumerate(chain) if fn & set(_DECODES)]
    assert decode_at and max(decode_at) < ops.index("FilterDataset"), chain


def _record_indices(records, shard, epoch=0) -> list[int]:
    ds = records.epoch(0, tf.constant(epoch, tf.int64), shard, tf.constant(0, tf.int64), None, 64)
    return [int(i) for i, _ in ds.as_numpy_iterator()]


def test_workers_read_disjoint_files_and_examples_and_each_epoch_its_own_file_order(tfds_dir):
    records = tfds_source.records("augself_test_shards", "train", data_dir=tfds_dir)
    assert len(records.files) == 4
    for epoch in (0, 1):
        a, b = (_record_indices(records, (w, 2), epoch) for w in (0, 1))
        assert not set(a) & set(b) and len(set(a) | set(b)) == 48 == len(a) + len(b)
        assert not {i >> 32 for i in a} & {i >> 32 for i in b}  # by file: no file is read by both
    orders = [[i >> 32 for i in _record_indices(records, None, e)] for e in range(4)]
    assert len({tuple(dict.fromkeys(o)) for o in orders}) > 1  # the files come in another order in another epoch
    assert _record_indices(records, None, 1) == _record_indices(records, None, 1)  # a function of (seed, epoch)


def test_workers_read_disjoint_examples_of_mocked_tfds():
    with tfds.testing.mock_data(num_examples=30):
        records = tfds_source.records("cifar10", "train")
        a, b = (_record_indices(records, (w, 2)) for w in (0, 1))
    assert not set(a) & set(b) and sorted(a + b) == list(range(30))


# ------------------------------------------------------------------------------------- cardinality
def test_the_stream_has_a_known_cardinality_and_a_static_batch(folder_dir):
    infinite = make_pair_dataset(load_source("shapes", "test"), CONFIG, seed=0, batch_size=4)
    assert int(infinite.cardinality()) == tf.data.INFINITE_CARDINALITY
    assert all(spec.shape[0] == 4 for spec in tf.nest.flatten(infinite.element_spec))
    finite = make_pair_dataset(folder.records(folder_dir, "all"), CONFIG, seed=0, batch_size=4, start_epoch=1,
                               num_epochs=3, skip_batches=3, shard=(1, 2))
    assert int(finite.cardinality()) == 2 * (20 // 4) - 3 == len(list(finite))


def test_distributed_input_does_not_take_the_get_next_as_optional_path(monkeypatch):
    strategy = mirrored_cpus()
    cfg = TrainConfig(dataset="shapes", split="test", batch_size=16, augment=CONFIG, shuffle_buffer=100,
                      photometric=resolve_photometric("auto"))  # resolved, as a run's
    dist = distributed_pairs(strategy, cfg, 1000 // 16, step=5)
    pipeline = dist._datasets[0]
    assert dist._cardinality == tf.data.INFINITE_CARDINALITY
    assert all(spec.shape[0] == 8 for spec in tf.nest.flatten(pipeline.element_spec))  # per replica, static
    # TF's choice (input_lib._enable_get_next_as_optional) as a multi-worker strategy makes it: the flag such
    # strategies set, and multi-worker mode. A stream of unknown cardinality takes the optional path there.
    monkeypatch.setattr(strategy.extended, "experimental_enable_get_next_as_optional", True, raising=False)
    monkeypatch.setattr(strategy.extended, "_in_multi_worker_mode", lambda: True)
    assert not input_lib._enable_get_next_as_optional(strategy, pipeline, dist._cardinality)
    unknown = tf.data.Dataset.range(2).flat_map(lambda e: tf.data.Dataset.range(8)).batch(8, drop_remainder=True)
    assert input_lib._enable_get_next_as_optional(strategy, unknown, int(unknown.cardinality()))
    rebuilt = strategy.distribute_datasets_from_function(lambda ctx: pipeline)
    assert not rebuilt._enable_get_next_as_optional
