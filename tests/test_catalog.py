"""The dataset catalog (augself_tf.data.catalog): its facts, their readers, and FC100 as a data source."""

from __future__ import annotations

import os
import re

import eval_fakes
import numpy as np
import pytest
from PIL import Image

from augself_tf.data import catalog
from augself_tf.data.catalog import CATALOG, canonical_key, linear_metric, lookup, spec_key, val_fraction
from augself_tf.data.fc100 import FC100_TEST_CLASSES
from augself_tf.data.sources import load_source, source_info
from augself_tf.evaluation import paper_results
from augself_tf.evaluation.context import EvalContext, EvalSettings, ProbeOptions
from augself_tf.evaluation.datasets import DataAccess, fewshot_split, linear_splits
from augself_tf.evaluation.estimators import logreg
from augself_tf.evaluation.loading import load_model
from augself_tf.evaluation.protocols import run_protocol

PAPER_TEX = [os.environ.get("AUGSELF_PAPER_TEX", ""), "/work/shared/paper/augself-neurips2021.tex",
             os.path.join(os.path.dirname(__file__), "..", "..", "shared", "paper", "augself-neurips2021.tex")]


def test_spec_keys_aliases_and_metrics():
    assert spec_key("folder:/data/MIT67/") == "mit67"
    assert spec_key("tfds:cifar10:3.0.2") == "cifar10"
    assert spec_key("imagenet2012_subset/10pct") == "imagenet2012_subset"
    assert canonical_key("folder:/x/CUB200") == "caltech_birds2011"
    assert canonical_key("folder:/data/pets") == "oxford_iiit_pet" == canonical_key("oxford_iiit_pet:3.2.0")
    assert canonical_key("folder:/data/something_else") == "something_else" and lookup("something_else") is None
    assert linear_metric("oxford_iiit_pet") == linear_metric("folder:/data/pets") == "mean_per_class"
    assert linear_metric("folder:/data/aircraft") == linear_metric("folder:/d/fgvc_aircraft") == "mean_per_class"
    assert linear_metric("oxford_iiit_pet:3.2.0") == "mean_per_class"  # a versioned tfds name is still Pets
    assert linear_metric("cifar10") == linear_metric("folder:/data/unknown") == "top1"
    assert linear_metric("cifar10", "mean_per_class") == "mean_per_class"
    with pytest.raises(ValueError, match="unknown linear metric"):
        linear_metric("cifar10", "top5")
    assert set(catalog.METRICS) == set(logreg.METRICS)
    assert val_fraction("cifar10") == pytest.approx(0.1)
    assert val_fraction("oxford_iiit_pet") == val_fraction("folder:/data/pets") == pytest.approx(740 / 3680)
    assert val_fraction("folder:/data/unknown") == catalog.DEFAULT_VAL_FRACTION


def test_every_name_names_one_dataset_and_paper_keys_are_catalog_keys():
    names = [n for f in CATALOG.values() for n in (f.key, *f.aliases)]
    assert len(names) == len(set(names))
    assert all(n == n.lower() for n in names)
    paper = {e.dataset for e in paper_results.ENTRIES if e.dataset is not None}
    assert paper <= set(CATALOG)
    for facts in CATALOG.values():
        assert facts.metric in catalog.METRICS
        assert facts.val_split is None or facts.val_split in facts.splits
        assert facts.test_split in facts.splits or facts.fewshot  # few-shot pools have no test split


def _dataset_table() -> dict[str, tuple[int, int, str]]:
    """The paper's dataset table (b): name -> (training, validation, metric), parsed from the .tex."""
    path = next((p for p in PAPER_TEX if p and os.path.exists(p)), None)
    if path is None:
        pytest.skip("paper .tex not available")
    tex = open(path, encoding="utf-8").read()
    body = tex[tex.index(r"\label{table:dataset_info}") :]
    body = body[body.index("(b) Linear evaluation") : body.index("(c) Few-shot")]
    table = {}
    for line in body.split(r"\\"):
        cells = [c.strip() for c in line.split("&")]
        if len(cells) < 6:
            continue
        name = re.sub(r"\s*\\citep\{[^}]*\}", "", cells[-6]).strip()
        train, val = int(cells[-4]), int(cells[-3])
        table[name] = (train, val, "mean_per_class" if "per-class" in cells[-1].lower() else "top1")
    return table


def test_catalog_matches_the_papers_dataset_table():
    table = _dataset_table()
    assert len(table) == 12
    by_title = {f.title: f for f in CATALOG.values()}
    for title, (train, val, metric) in table.items():
        facts = by_title[title]
        assert facts.metric == metric, title
        if facts.paper_val is not None:  # the hold-out from train: (validation, train + validation)
            assert facts.paper_val == (val, train + val), title
        else:  # the dataset has a validation split of its own
            assert facts.val_split is not None, title


def test_tfds_datasets_have_the_catalogs_splits_and_label_key():
    tfds_source = pytest.importorskip("augself_tf.data.tfds_source")
    for facts in CATALOG.values():
        if not facts.in_tfds:
            continue
        builder = tfds_source._builder(facts.key, None)
        assert set(tfds_source.declared_splits(builder)) == set(facts.splits), facts.key
        supervised = builder.info.supervised_keys  # tfds' own (image, class label), when it declares one
        assert (supervised[1] if supervised else "label") == facts.label_key, facts.key
        assert tfds_source._keys(builder)[1] == facts.label_key, facts.key


class _Splits(DataAccess):
    def __init__(self, names):
        super().__init__()
        self.names = names

    def splits(self, spec):
        return self.names


def test_linear_splits_read_the_catalog():
    food = linear_splits(_Splits(("train", "validation")), "food101")
    assert (food.val, food.test) == (None, "validation")  # tfds food101's validation is the paper's test set
    assert food.val_fraction == pytest.approx(7575 / 75750)
    flowers = linear_splits(_Splits(("train", "validation", "test")), "oxford_flowers102")
    assert (flowers.val, flowers.test) == ("validation", "test")
    pets = linear_splits(_Splits(("all", "test", "train")), "folder:/data/pets")
    assert pets.val is None and pets.val_fraction == pytest.approx(740 / 3680)


def _image_tree(root, n_train: int, n_test: int, classes: int = 3) -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for i in range(n):
            path = os.path.join(root, split, f"c{i % classes}", f"{i}.png")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(path)


@pytest.mark.parametrize(("name", "fraction"), [("pets", 740 / 3680), ("oxford_iiit_pet", 740 / 3680),
                                                ("plants", 0.1)])
def test_folder_named_like_a_paper_dataset_gets_its_hold_out(tmp_path, name, fraction):
    n_train = 120
    _image_tree(str(tmp_path / name), n_train, 30)
    model = load_model(eval_fakes.save_random_conv_model(str(tmp_path / "m" / "saved_model"), channels=4))
    settings = EvalSettings(image_size=12, batch_size=64, output_dir=str(tmp_path), probe=ProbeOptions(regs=2))
    context = EvalContext(settings, DataAccess(), log=None)
    (record,) = run_protocol(context, model, "linear", f"folder:{tmp_path / name}")
    assert record["settings"]["n_val"] == round(fraction * n_train)  # 24 of 120 for Pets, 12 for others
    assert record["n_train"] == n_train
    expected_metric = "mean_per_class" if name != "plants" else "top1"
    assert record["metric"] == f"{expected_metric}_%"


def test_fc100_is_a_source_of_the_20_meta_test_classes_of_cifar100():
    tfds = pytest.importorskip("tensorflow_datasets")

    assert len(FC100_TEST_CLASSES) == 20
    order = sorted(FC100_TEST_CLASSES)
    with tfds.testing.mock_data(num_examples=300):
        assert fewshot_split(DataAccess(), "fc100") == "all"
        for split, base in (("all", "train+test"), ("train", "train"), ("test", "test")):
            raw = [int(e["label"]) for e in load_source("cifar100", base)]
            fc = [int(e["label"]) for e in load_source("fc100", split)]
            assert fc == [order.index(y) for y in raw if y in FC100_TEST_CLASSES], split
        info = source_info("fc100", "train")
    assert info.num_classes == 20 and info.class_names[0] == FC100_TEST_CLASSES[order[0]]
    assert set(info.splits) == set(CATALOG["fc100"].splits)
    with pytest.raises(ValueError, match="unknown split"):
        source_info("fc100", "validation")


def test_fc100_from_a_cifar100_folder_matches_classes_by_name(tmp_path):
    def save(tree: str, split: str, name: str, count: int) -> None:
        for i in range(count):
            path = tmp_path / tree / split / name / f"{i}.png"
            os.makedirs(path.parent, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)

    rng = np.random.default_rng(0)
    for tree in ("partial", "full"):
        for split in ("train", "test"):
            for name in ("apple", "beaver", "woman"):
                save(tree, split, name, 2)
    for name in set(FC100_TEST_CLASSES.values()) - {"beaver", "woman"}:
        save("full", "train", name, 1)
    with pytest.raises(ValueError, match="18 class name"):  # the folder lacks most of the 20 classes
        source_info(f"fc100:folder:{tmp_path / 'partial'}", "all")
    spec = f"fc100:folder:{tmp_path / 'full'}"
    assert source_info(spec, "all").num_examples == 2 * 2 + 2 * 2 + 18  # apple is not an FC100 class
    order = sorted(FC100_TEST_CLASSES)
    beaver, woman = order.index(4), order.index(98)  # CIFAR-100 fine ids of beaver and woman
    assert sorted(int(e["label"]) for e in load_source(spec, "test")) == [beaver, beaver, woman, woman]
