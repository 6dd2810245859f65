"""Tests of augself_tf.data sources: shapes, folder:PATH, tfds (mocked / prepared offline)."""

from __future__ import annotations

import logging
import os
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from package_source import imported_modules, modules
from PIL import Image

from augself_tf.data import shapes, tfds_source
from augself_tf.data.sources import (
    SOURCE_HELP,
    DatasetNotPreparedError,
    SourceInfo,
    class_ids_from_names,
    filter_classes,
    load_source,
    source_info,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = "/work/shared/data"
UNKNOWN_MSG = "unknown dataset 'nope': use a tfds name (stl10, cifar10, ...), 'folder:PATH' or 'shapes'"


def _take(ds: tf.data.Dataset, n: int | None = None) -> list[dict]:
    if n is not None:
        ds = ds.take(n)
    return list(ds.as_numpy_iterator())


# ----------------------------------------------------------------------------------------- shapes


def test_shapes_deterministic_and_cached():
    a = _take(load_source("shapes", "test"), 50)
    b = _take(load_source("shapes", "test"), 50)
    fresh = shapes.generate.__wrapped__("test")  # bypass the per-process cache
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for k in ("image", "label", "color", "bbox"):
            np.testing.assert_array_equal(x[k], y[k])
            np.testing.assert_array_equal(x[k], fresh[k][i])
    assert shapes.generate("test") is shapes.generate("test")


def test_shapes_specs_and_info():
    ds = load_source("shapes", "train")
    spec = ds.element_spec
    assert spec["image"].shape == (64, 64, 3) and spec["image"].dtype == tf.uint8
    assert spec["label"].dtype == tf.int64 and spec["color"].dtype == tf.int64
    assert spec["bbox"].shape == (4,) and spec["bbox"].dtype == tf.float32
    assert int(ds.cardinality()) == 5000
    info = source_info("shapes", "train")
    assert isinstance(info, SourceInfo)
    assert (info.num_examples, info.num_classes, info.has_bbox, info.image_size) == (5000, 5, True, (64, 64))
    assert info.class_names == list(shapes.SHAPE_NAMES)
    assert info.extra_labels == {"color": list(shapes.COLOR_NAMES)} and info.extra_label_keys == ["color"]
    assert source_info("shapes", "test").num_examples == 1000
    assert source_info("shapes", "train+test").num_examples == 6000
    assert int(load_source("shapes", "train+test").cardinality()) == 6000


def test_shapes_balanced_and_independent():
    d = shapes.generate("train")
    n_s, n_c = len(shapes.SHAPE_NAMES), len(shapes.COLOR_NAMES)
    assert np.bincount(d["label"], minlength=n_s).tolist() == [1000] * n_s
    colors = np.bincount(d["color"], minlength=n_c)
    assert colors.max() - colors.min() <= 5
    joint = np.bincount(d["label"] * n_c + d["color"], minlength=n_s * n_c)
    assert joint.max() - joint.min() <= 1


def test_shapes_boxes_tight_and_colours_right():
    d = shapes.generate("test")
    img = d["image"].astype(np.int32)
    spread = img.max(-1) - img.min(-1)
    assert spread.max() <= 255
    obj = spread >= shapes.OBJECT_MIN_SPREAD
    # Background and object are separated by their channel spread, with nothing in between.
    assert not ((spread > shapes.BACKGROUND_MAX_SPREAD) & ~obj).any()
    s = shapes.IMAGE_SIZE
    for i in range(len(img)):
        ys, xs = np.nonzero(obj[i])
        assert len(ys) > 0
        tight = np.array([ys.min(), xs.min(), ys.max() + 1, xs.max() + 1]) / s
        np.testing.assert_allclose(d["bbox"][i], tight, atol=1e-6)  # edges touch the object
        # The object is one flat colour whose hue is the colour class.
        pix = img[i][obj[i]]
        assert (pix == pix[0]).all()
        hue = (pix[0] > pix[0].min() + 50).astype(int)  # which channels are "on"
        want = (shapes._PALETTE[d["color"][i]] > 128).astype(int)
        np.testing.assert_array_equal(hue, want)
    side = (d["bbox"][:, 2:] - d["bbox"][:, :2]).max(axis=1)
    assert side.min() >= 0.15 and side.max() <= 0.65
    assert (d["bbox"] >= 0).all() and (d["bbox"] <= 1).all()


def test_shapes_train_test_differ():
    tr, te = shapes.generate("train"), shapes.generate("test")
    assert not np.array_equal(tr["image"][:1000], te["image"])
    assert not any(np.array_equal(tr["image"][i], te["image"][0]) for i in range(len(tr["image"])))


# ----------------------------------------------------------------------------------------- folder


def _save(path: str, array: np.ndarray, fmt: str | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array).save(path, format=fmt)


def _rgb(rng: np.random.Generator, h: int = 12, w: int = 10) -> np.ndarray:
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture
def pool_tree(tmp_path):
    """tmp/pool/{cat,dog,zebra}: 10 images each, incl. grayscale JPEG, RGBA PNG, BMP, one corrupt file."""
    rng = np.random.default_rng(0)
    root = tmp_path / "pool"
    for c in ("zebra", "cat", "dog"):
        for i in range(10):
            _save(str(root / c / f"{i:02d}.jpg"), _rgb(rng))
    _save(str(root / "cat" / "gray.JPG"), rng.integers(0, 256, (9, 7), dtype=np.uint8))
    _save(str(root / "dog" / "alpha.png"), rng.integers(0, 256, (8, 6, 4), dtype=np.uint8))
    _save(str(root / "dog" / "nested" / "deep.bmp"), _rgb(rng))
    (root / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    (root / "cat" / "notes.txt").write_text("not an image")
    return root


def test_folder_pool_rgb_and_skips_broken(pool_tree, caplog):
    spec = f"folder:{pool_tree}"
    with caplog.at_level(logging.WARNING):
        info = source_info(spec, "all")
        exs = _take(load_source(spec, "all"))
    assert info.class_names == ["cat", "dog", "zebra"] and info.num_classes == 3
    assert info.num_examples == len(exs) == 33  # 30 + gray + alpha + nested bmp; broken skipped
    assert not info.has_bbox and "bbox" not in exs[0]
    for ex in exs:
        assert ex["image"].dtype == np.uint8 and ex["image"].ndim == 3 and ex["image"].shape[2] == 3
        assert ex["label"].dtype == np.int64
    assert np.bincount([ex["label"] for ex in exs]).tolist() == [11, 12, 10]
    shapes_seen = {ex["image"].shape for ex in exs}
    assert (9, 7, 3) in shapes_seen and (8, 6, 3) in shapes_seen  # grayscale and RGBA became RGB
    warnings = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "skipped 1 unreadable" in warnings[0] and "broken.jpg" in warnings[0]


def test_folder_pool_partition(pool_tree):
    spec = f"folder:{pool_tree}"
    parts = {s: _take(load_source(spec, s)) for s in ("train", "val", "test", "all")}
    keys = {s: {ex["image"].tobytes() for ex in exs} for s, exs in parts.items()}
    assert keys["train"] | keys["val"] | keys["test"] == keys["all"]
    assert not (keys["train"] & keys["val"]) and not (keys["train"] & keys["test"])
    assert not (keys["val"] & keys["test"])
    # Stratified 70/10/20 of each class's candidate files (11 cat incl. the broken one, 12 dog, 10 zebra).
    train_counts = np.bincount([ex["label"] for ex in parts["train"]], minlength=3).tolist()
    test_counts = np.bincount([ex["label"] for ex in parts["test"]], minlength=3)
    assert train_counts[1:] == [8, 7] and train_counts[0] in (7, 8)
    assert test_counts[1:].tolist() == [3, 2]
    again = _take(load_source(spec, "train"))
    assert [ex["image"].tobytes() for ex in again] == [ex["image"].tobytes() for ex in parts["train"]]
    info = source_info(spec, "val")
    assert info.splits == ("all", "train", "val", "test") and "70/10/20" in info.notes
    assert source_info(spec, "validation").num_examples == info.num_examples  # alias
    with pytest.raises(
        ValueError, match=r"unknown split 'unlabeled'.*valid splits are all, train, val, test"
    ):
        load_source(spec, "unlabeled")


def test_folder_split_layout_labels_shared(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "splits"
    for split, classes in (("train", "abc"), ("test", "ac")):
        for c in classes:
            for i in range(3):
                _save(str(root / split / c / f"{i}.png"), _rgb(rng))
    os.makedirs(root / "extras")  # a non-split folder next to the split folders: ignored
    spec = f"folder:{root}"
    info = source_info(spec, "test")
    assert info.class_names == ["a", "b", "c"] and info.num_examples == 6
    assert sorted(info.splits) == ["all", "test", "train"]
    assert sorted(ex["label"] for ex in _take(load_source(spec, "test"))) == [0, 0, 0, 2, 2, 2]
    assert sorted(ex["label"] for ex in _take(load_source(spec, "train"))) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert source_info(spec, "train+test").num_examples == 15 == source_info(spec, "all").num_examples
    with pytest.raises(ValueError, match=r"unknown split 'val' .*valid splits are all, test, train"):
        source_info(spec, "val")


def test_folder_single_wrapper_dir_and_relative_path(tmp_path):
    rng = np.random.default_rng(2)
    for c in ("x", "y"):
        for i in range(2):
            _save(str(tmp_path / "wrapped" / "images" / c / f"{i}.jpeg"), _rgb(rng))
    info = source_info("folder:wrapped", "all", data_dir=str(tmp_path))
    assert info.class_names == ["x", "y"] and info.num_examples == 4


def test_folder_boxes_csv(tmp_path, caplog):
    rng = np.random.default_rng(3)
    root = tmp_path / "boxed"
    _save(str(root / "images" / "a" / "0.png"), _rgb(rng, 40, 20))  # H=40, W=20
    _save(str(root / "images" / "b" / "1.png"), _rgb(rng, 10, 50))
    _save(str(root / "images" / "b" / "2.png"), _rgb(rng, 10, 10))  # no row -> NaN
    (root / "boxes.csv").write_text(
        "filename,label,xmin,ymin,xmax,ymax\nimages/a/0.png,a,0,10,19,29\nimages/b/1.png,b,5,0,24,9\n"
    )
    spec = f"folder:{root}"
    assert source_info(spec, "all").has_bbox
    with caplog.at_level(logging.WARNING):
        exs = {ex["image"].shape: ex for ex in _take(load_source(spec, "all"))}
    np.testing.assert_allclose(exs[(40, 20, 3)]["bbox"], [10 / 40, 0 / 20, 30 / 40, 20 / 20])
    np.testing.assert_allclose(exs[(10, 50, 3)]["bbox"], [0 / 10, 5 / 50, 10 / 10, 25 / 50])
    assert np.isnan(exs[(10, 10, 3)]["bbox"]).all()
    assert exs[(40, 20, 3)]["bbox"].dtype == np.float32
    assert "1 image(s) have no row in boxes.csv" in caplog.text


def test_folder_empty_and_missing(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_source(f"folder:{tmp_path / 'missing'}", "all")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no images"):
        source_info(f"folder:{tmp_path / 'empty'}", "all")
    (tmp_path / "classes_only" / "a").mkdir(parents=True)
    (tmp_path / "classes_only" / "a" / "readme.txt").write_text("x")
    with pytest.raises(ValueError, match="holds no images"):
        load_source(f"folder:{tmp_path / 'classes_only'}", "train")
    with pytest.raises(ValueError, match="needs a path"):
        load_source("folder:", "train")


@pytest.mark.skipif(not os.path.isdir(f"{SHARED}/cifar10-mini"), reason="shared cifar10-mini absent")
def test_real_cifar10_mini():
    spec = f"folder:{SHARED}/cifar10-mini"
    info = source_info(spec, "test")
    assert info.num_examples == 1000 and info.num_classes == 10 and info.class_names[0] == "airplane"
    batch = next(iter(load_source(spec, "test").batch(100)))
    assert batch["image"].shape == (100, 32, 32, 3) and batch["image"].dtype == tf.uint8
    assert len(set(batch["label"].numpy().tolist())) > 3  # fixed shuffled order mixes classes


@pytest.mark.skipif(
    not os.path.isdir(f"{SHARED}/tiny-imagenet-mini"), reason="shared tiny-imagenet-mini absent"
)
def test_real_tiny_imagenet_mini():
    spec = f"folder:{SHARED}/tiny-imagenet-mini"
    info = source_info(spec, "val")
    assert info.num_classes == 100 and info.has_bbox and info.class_names[0] == "n01443537"
    assert info.num_examples == 500  # 10% of 50 per class
    batch = next(iter(load_source(spec, "val").batch(500)))
    assert batch["image"].shape[1:] == (64, 64, 3)
    box = batch["bbox"].numpy()
    assert np.isfinite(box).all() and (box >= 0).all() and (box <= 1).all()
    assert (box[:, 2] > box[:, 0]).all() and (box[:, 3] > box[:, 1]).all()


# ------------------------------------------------------------------------------------------- tfds


class AugselfTestGray(tfds.core.GeneratorBasedBuilder):
    """A tiny registered tfds dataset (grayscale, 3 classes) prepared offline by the tests."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(8, 8, 1)),
                    "label": tfds.features.ClassLabel(names=["u", "v", "w"]),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(6), "test": self._generate_examples(3)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": np.full((8, 8, 1), 10 * i, np.uint8), "label": i % 3}


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    AugselfTestGray(data_dir=data_dir).download_and_prepare()
    return data_dir


def test_tfds_prepared_dataset(prepared_dir):
    info = source_info("augself_test_gray", "train", data_dir=prepared_dir)
    assert (info.num_examples, info.num_classes, info.class_names) == (6, 3, ["u", "v", "w"])
    assert info.image_size == (8, 8) and not info.has_bbox and info.splits == ("test", "train")
    assert source_info("augself_test_gray", "train[:50%]+test", data_dir=prepared_dir).num_examples == 6
    exs = sorted(
        _take(load_source("augself_test_gray", "test", data_dir=prepared_dir)), key=lambda e: e["label"]
    )
    assert [ex["label"] for ex in exs] == [0, 1, 2]
    for ex in exs:  # grayscale replicated to RGB: example i has label i and pixels 10 * i
        assert ex["image"].dtype == np.uint8
        np.testing.assert_array_equal(ex["image"], np.full((8, 8, 3), 10 * ex["label"], np.uint8))
    with pytest.raises(
        ValueError, match=r"unknown split 'val' for dataset 'augself_test_gray': valid splits are test, train"
    ):
        load_source("augself_test_gray", "val", data_dir=prepared_dir)


def test_tfds_not_prepared_is_one_clear_error(tmp_path):
    for call in (load_source, source_info):  # train_main and eval_main reach both
        with pytest.raises(
            FileNotFoundError, match=r"tfds dataset 'augself_test_gray' is not prepared in .*tfds build"
        ) as e:
            call("augself_test_gray", "train", data_dir=str(tmp_path))
        msg = str(e.value)
        # One line, short enough beside a short path: eval_main cuts error lines at 300 characters.
        assert "\n" not in msg and len(msg) - len(str(tmp_path)) < 240
        assert f"is not prepared in {tmp_path}:" in msg  # the directory searched
        assert "`tfds build augself_test_gray --data_dir DIR`" in msg
        assert "--data_dir=DIR" in msg and "--dataset=folder:PATH" in msg
        assert "downloads/manual" not in msg  # only for manual-download datasets
        assert isinstance(e.value, DatasetNotPreparedError)
        assert (e.value.name, e.value.data_dir) == ("augself_test_gray", str(tmp_path))
    # Without the check the split is still described from code-level metadata, size unknown.
    offline = tfds_source.info("augself_test_gray", "train", data_dir=str(tmp_path), require_prepared=False)
    assert offline.num_examples is None


def test_tfds_not_prepared_names_the_resolved_default_dir():
    # data_dir=None: tfds searches $TFDS_DATA_DIR or ~/tensorflow_datasets; the message names the one it used.
    default = os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")
    with pytest.raises(DatasetNotPreparedError) as e:
        source_info("augself_test_gray", "test")
    assert f"is not prepared in {default} (the default data_dir):" in str(e.value)
    assert e.value.data_dir == default


def test_tfds_manual_download_dataset_says_where_archives_go(tmp_path):
    with pytest.raises(DatasetNotPreparedError, match=r"archives in DIR/downloads/manual"):
        load_source("tfds:imagenet2012_subset/10pct", "validation", data_dir=str(tmp_path))


# train_main on an unprepared tfds dataset: tests/test_training.py (one import for all of train_main's bad inputs).


def test_tfds_mock_cifar10():
    with tfds.testing.mock_data(num_examples=5):
        ds = load_source("cifar10", "train")
        info = source_info("cifar10", "train")
        exs = _take(ds)
    assert info.num_classes == 10 and info.image_size == (32, 32) and not info.has_bbox
    assert set(ds.element_spec) == {"image", "label"}
    assert len(exs) == 5
    for ex in exs:
        assert ex["image"].shape == (32, 32, 3) and ex["image"].dtype == np.uint8
        assert ex["label"].dtype == np.int64 and 0 <= ex["label"] < 10


def test_tfds_mock_caltech_birds_bbox_and_stl10_expression():
    with tfds.testing.mock_data(num_examples=3):
        birds = _take(load_source("caltech_birds2011", "test"))
        info = source_info("caltech_birds2011", "test")
        stl = _take(load_source("stl10", "train+unlabelled"))
        stl_info = source_info("stl10", "train+unlabelled")
    # The statistics a model pretrained on each normalises with: the paper's STL10 values, ImageNet's elsewhere.
    assert (stl_info.mean, stl_info.std) == ((0.43, 0.42, 0.39), (0.27, 0.26, 0.27))
    assert (info.mean, info.std) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert info.has_bbox and info.num_classes == 200
    assert set(birds[0]) == {"image", "label", "bbox"}
    assert birds[0]["bbox"].shape == (4,) and birds[0]["bbox"].dtype == np.float32
    assert birds[0]["image"].ndim == 3 and birds[0]["image"].shape[2] == 3
    assert stl and stl[0]["image"].shape == (96, 96, 3)


# ------------------------------------------------------------------------------------------ errors


def test_unknown_dataset_and_split_messages():
    with pytest.raises(ValueError) as e:
        load_source("nope", "train")
    assert str(e.value) == UNKNOWN_MSG
    with pytest.raises(ValueError) as e:
        source_info("nope", "train")
    assert str(e.value) == UNKNOWN_MSG
    with pytest.raises(
        ValueError, match=r"^unknown split 'val' for dataset 'shapes': valid splits are train, test$"
    ):
        load_source("shapes", "val")
    with pytest.raises(ValueError, match="unknown split"):
        source_info("shapes", "train+bogus")
    assert "folder:PATH" in SOURCE_HELP and "stl10" in SOURCE_HELP


def test_filter_classes_relabels():
    ds = tf.data.Dataset.from_tensor_slices(
        {"label": tf.constant([0, 5, 3, 5, 7, -1, 2], tf.int64), "x": tf.range(7)}
    )
    out = _take(filter_classes(ds, [5, 2]))
    assert [(ex["x"], ex["label"]) for ex in out] == [(1, 0), (3, 0), (6, 1)]
    info = SourceInfo(name="t", split="train", num_examples=None, num_classes=3, class_names=["a", "b", "c"])
    assert class_ids_from_names(info, ["c", "a"]) == [2, 0]
    with pytest.raises(ValueError, match="not in"):
        class_ids_from_names(info, ["z"])
    with pytest.raises(ValueError):
        filter_classes(ds, [1, 1])


@pytest.mark.parametrize(
    "name, splits",
    [
        ("stl10", ("test", "train", "unlabelled")),
        ("cifar10", ("test", "train")),
        ("oxford_flowers102", ("test", "train", "validation")),
        ("imagenet2012", ("test", "train", "validation")),
        ("caltech_birds2011", ("test", "train")),
    ],
)
def test_tfds_declared_splits_known_without_data(name, splits, tmp_path):
    info = tfds_source.info(name, "train", data_dir=str(tmp_path), require_prepared=False)
    assert info.num_examples is None and info.splits == splits
    with pytest.raises(DatasetNotPreparedError, match=f"'{name}' is not prepared"):  # the split was valid
        source_info(name, "train", data_dir=str(tmp_path))


def test_tfds_misspelt_split_rejected_before_reading_even_under_mock_data(tmp_path):
    with pytest.raises(ValueError, match=r"unknown split 'train\+unlabeled'.*test, train, unlabelled"):
        source_info("stl10", "train+unlabeled", data_dir=str(tmp_path))
    with tfds.testing.mock_data(num_examples=2):  # mock_data alone would accept any name
        with pytest.raises(ValueError, match="valid splits are test, train, unlabelled"):
            load_source("stl10", "unlabeled")
        assert len(_take(load_source("stl10", "train[:50%]+unlabelled"))) > 0
    with pytest.raises(ValueError, match="unknown split 'val'.*train, validation"):
        source_info("imagenet100", "val", data_dir=str(tmp_path))


# ---------------------------------------------------------------------------------------- registry


def _doc_source(name: str) -> types.ModuleType:
    """The example source module quoted in docs/architecture.md ("Data sources"), run as written."""
    with open(os.path.join(REPO, "docs", "architecture.md")) as f:
        doc = f.read()
    code = doc.split(f"`augself_tf/data/{name}.py`:\n\n```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType(f"augself_tf.data.{name}")
    exec(compile(code, f"docs/architecture.md:{name}.py", "exec"), module.__dict__)
    return module


def test_a_source_is_one_module_plus_one_registry_line(monkeypatch):
    from augself_tf.data import sources

    solid = _doc_source("solid")
    monkeypatch.setitem(sources.SOURCES, "solid", solid)  # the one registry line
    info = source_info("solid:3", "train")
    assert (info.name, info.num_examples, info.num_classes, info.splits) == ("solid:3", 3, 3, ("train",))
    exs = _take(load_source("solid:3", "train"))
    assert [int(ex["label"]) for ex in exs] == [0, 1, 2]
    assert [int(ex["image"][0, 0, 0]) for ex in exs] == [0, 10, 20]
    assert all(ex["image"].shape == (8, 8, 3) and ex["image"].dtype == np.uint8 for ex in exs)
    assert source_info("solid", "train").num_examples == 4  # bare NAME: arg ""
    with pytest.raises(ValueError, match=r"unknown split 'test' for dataset 'solid:3': valid splits are train"):
        load_source("solid:3", "test")
    # imagenet100 reads any registered base source through the same registry.
    assert sources.resolve("imagenet100:solid:5")[::2] == ("imagenet100", "solid:5")


def test_spec_resolution():
    from augself_tf.data import folder, sources

    assert sources.resolve(" shapes ") == ("shapes", shapes, "")
    assert sources.resolve("folder:/a:b") == ("folder", folder, "/a:b")
    assert sources.resolve("tfds:cifar10:3.0.2") == ("tfds", tfds_source, "cifar10:3.0.2")
    assert sources.resolve("cifar10:3.0.2") == ("tfds", tfds_source, "cifar10:3.0.2")  # unregistered: whole spec
    assert sources.resolve("imagenet100")[::2] == ("imagenet100", "")
    for bad in ("", "  ", None):
        with pytest.raises(ValueError, match="unknown dataset"):
            sources.resolve(bad)
    with pytest.raises(ValueError, match=r"^unknown dataset 'shapes:big'"):
        source_info("shapes:big", "train")
    for spec in ("tfds", "tfds:"):
        with pytest.raises(ValueError, match=r"^unknown dataset 'tfds:'"):
            load_source(spec, "train")
    with pytest.raises(ValueError, match="needs a path"):
        source_info("folder", "train")


def test_no_backend_imports_the_registry():
    # sources.py imports every backend; a backend importing sources.py back would make a cycle.
    backends = {m: path for m, path in modules().items()
                if m.startswith("augself_tf.data.") and m != "augself_tf.data.sources"}
    assert {f"augself_tf.data.{m}" for m in ("source_base", "shapes", "folder", "tfds_source", "imagenet100")} \
        <= set(backends)
    for module, path in backends.items():
        assert "augself_tf.data.sources" not in imported_modules(module, path), module


def test_eval_data_access_reports_unprepared_tfds(tmp_path):
    from augself_tf.evaluation.datasets import DataAccess
    from augself_tf.evaluation.estimators.errors import EvalError

    with pytest.raises(EvalError, match=rf"^dataset 'cifar10': tfds dataset 'cifar10' is not prepared in {tmp_path}:"):
        DataAccess(str(tmp_path)).splits("cifar10")
    with pytest.raises(DatasetNotPreparedError, match="tfds build cifar10"):
        DataAccess(str(tmp_path)).load("cifar10", "test")
