"""The reference pages say what is true now: no lab diary in them.

A reference page names no session ("measured in session 7"), cites no commit hash (a figure belongs to the
machine and the command that show it, both on the page), and keeps nothing superseded. The dated runs behind a
decision live in ``bench/records/<decision>.json`` (figures, commands, machine, date) or in git's history; each
record names the section of the page it backs, and that section must exist.
"""

from __future__ import annotations

import glob
import json
import os
import re

import pytest
from test_user_text import anchors_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The pages held to a reference's form: every page of docs/.
REFERENCE_PAGES = ("docs/analyses.md", "docs/architecture.md", "docs/benchmarks.md", "docs/development.md",
                   "docs/distributed.md", "docs/evaluation.md", "docs/experiments.md", "docs/monitors.md",
                   "docs/python-api.md", "docs/results.md", "docs/training.md")
RECORDS = sorted(glob.glob(os.path.join(REPO, "bench", "records", "*.json")))

SESSION = re.compile(r"\bsessions?\s+\d+", re.IGNORECASE)
# A commit hash: 7-40 hex characters with at least one letter and one digit (a plain number or word is not one).
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
SUPERSEDED = re.compile(r"supersed", re.IGNORECASE)
DIARY = {"a session number": SESSION, "a commit hash": COMMIT, "something superseded": SUPERSEDED}


# A block that reproduce/ generates from the ledger (its wall-time table names the commit each arm trained at).
GENERATED_BLOCK = re.compile(r"<!-- (\S+):begin -->.*?<!-- \1:end -->", re.DOTALL)


def _read(page: str) -> str:
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        return f.read()


def _written_by_hand(text: str) -> str:
    """``text`` with each generated block's lines blanked (so line numbers still point into the page)."""
    return GENERATED_BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def test_the_patterns_find_what_they_forbid_and_nothing_else():
    for text in ("measured in session 7", "Sessions 6", "at commit f334369", "(0a9be9a)",
                 "3f2c1e9d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e", "kept although superseded"):
        assert any(p.search(text) for p in DIARY.values()), text
    assert _written_by_hand("a\n<!-- x:begin -->\nf79a17f\n<!-- x:end -->\nb").splitlines() == ["a", "", "", "", "b"]
    for text in ("AVX512-VNNI, avx512f", "2026-11-26", "216922457343922113", "bf16_vs_f32", "deadbeef",
                 "the #1f77b4 line", "ram://run_lock_test_ab12cd34ef", "1e8ab77x", "§5.8", "sessions"):
        assert not any(p.search(text) for p in DIARY.values()), text


def test_every_page_of_docs_is_a_reference_page():
    pages = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))}
    assert set(REFERENCE_PAGES) == pages, sorted(pages ^ set(REFERENCE_PAGES))


@pytest.mark.parametrize("page", REFERENCE_PAGES)
def test_a_reference_page_has_no_diary(page):
    found = []
    for number, line in enumerate(_written_by_hand(_read(page)).splitlines(), 1):
        for what, pattern in DIARY.items():
            found += [f"{page}:{number}: {what}: {m.group(0)!r}" for m in pattern.finditer(line)]
    assert not found, "\n".join(found)


def test_every_record_is_complete_and_backs_a_section_that_exists():
    assert len(RECORDS) >= 10
    for path in RECORDS:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        name = os.path.relpath(path, REPO)
        assert record["decision"] and record["default"] and record["runs"], name
        for run in record["runs"]:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"]), name
            assert run["machine"] and (run["tables"] or run["notes"]), name
        page, _, anchor = record["page"].partition("#")
        assert page in REFERENCE_PAGES and anchor in anchors_of(page), (name, record["page"])
