"""The paper's numbers in ``paper_results`` equal the tables of the LaTeX source (when it is on hand)."""

from __future__ import annotations

import os

import pytest

from augself_tf.evaluation import paper_results as pr

_CANDIDATES = [
    os.environ.get("AUGSELF_PAPER_TEX", ""),
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "paper", "augself-neurips2021.tex"),
    "/work/shared/paper/augself-neurips2021.tex",
]


@pytest.fixture(scope="module")
def tables():
    path = next((p for p in _CANDIDATES if p and os.path.exists(p)), None)
    if path is None:
        pytest.skip("paper .tex not available")
    with open(path, encoding="utf-8") as f:
        return pr.parse_tex(f.read())


def test_linear_transfer_table(tables):
    rows = tables["transfer_linear"]
    assert [tuple(r) for r in rows] == [tuple(v) for v in pr.LINEAR_TRANSFER.values()]


def test_fewshot_table(tables):
    rows = tables["transfer_fewshot"]
    ours = [tuple(x for pair in v for x in pair) for v in pr.FEWSHOT.values()]
    assert [tuple(r) for r in rows] == ours


def test_small_tables(tables):
    assert [r[0] for r in tables["bird_local"]] == list(pr.LOCALIZATION.values())
    assert [tuple(r) for r in tables["pretext"]] == list(pr.PRETEXT.values())
    inv = tables["invariance"]
    names = ["SimSiam", "BYOL", "SimCLR", "MoCo v2"]
    for row, suffix in zip(inv, ["", "+AugSelf"], strict=True):
        for i, name in enumerate(names):
            assert pr.INVARIANCE[name + suffix] == (row[2 * i], row[2 * i + 1])


def test_ablation_tables(tables):
    single = tables["single_task"][:5]  # the last row repeats SimSiam
    combination = tables["combination"]
    framework = tables["framework"]
    ours = list(pr.ABLATION_LINEAR.values())
    assert [tuple(r) for r in single + combination + framework] == ours


def test_lookup_and_aliases():
    cub = pr.lookup("fewshot_5way_1shot", "folder:/data/CUB200")
    assert {e.method for e in cub} >= {"SimSiam", "SimSiam+AugSelf"} and all(e.ci95 for e in cub)
    assert pr.lookup("localization", "caltech_birds2011")[1].value == 0.00335
    rot = pr.lookup("rotation", "shapes")  # probe dataset not stated: matches any
    assert [e.value for e in rot] == [59.11, 64.61]
    stl = {(e.method, e.table) for e in pr.lookup("linear", "stl10")}
    assert ("SimSiam", "combination") in stl and ("BYOL+AugSelf", "framework") in stl
    assert not pr.lookup("linear", "shapes")


def test_looc_table(tables):
    rows = tables["looc_comparison"]
    ours = [(a, b, *c, *d) for a, b, c, d in pr.LOOC.values()]
    assert [tuple(r) for r in rows] == ours
    five = [e for e in pr.ENTRIES if e.table == "looc_comparison" and e.protocol == "lowshot_5shot"]
    assert len(five) == 8 and all(e.std is not None and e.ci95 is None for e in five)
