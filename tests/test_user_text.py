"""No tracker numbers in what users read: users have no issue tracker, so "issue 29", "issues 20 and 33", "(#33)"
or an anchor like ``#faults-a-long-run-survives-issue-29`` tells them nothing; the text names the work instead
("the main reproduction", "the LooC comparison", "the fault-tolerance work").

What is scanned, all without importing TensorFlow:

- README.md and every other markdown file outside tests/ (docs/*.md, reproduce/ledger/README.md);
- the programs' help: ``train_main.py --helpfull`` and ``eval_main.py --helpfull`` through their snapshots
  (tests/snapshots/*_helpfull.txt, which tests/test_settings.py holds equal to the programs' output byte for
  byte), and the ``--help`` of reproduce/'s scripts, rendered in-process (none of them loads TensorFlow to parse
  its arguments);
- every source and data file outside tests/ (``.py``, ``.cfg``, ``.json``, ``.toml``, ``.txt``, ...): the flags'
  help strings, the scripts' docstrings (bench/'s ``--help`` is its module docstring and help strings, and its
  scripts load TensorFlow on import), log and error lines, comments, and the ledger's entries that the reports
  print.

Markdown links with an anchor (``[text](file.md#anchor)``, ``[text](#anchor)``) must also name a heading of the
target, so an anchor renamed with its heading cannot leave a link behind.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re

import pytest
from repo_files import repo_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A tracker reference: "issue 29", "Issue #29", "issues 20 and 33", "issue-29" (an anchor), "issue_29"; and a
# bare "#29" after a space, a bracket or a line start ("(#33)", "see #33"). Not matched: in-page anchors of
# numbered sections ("#5-cpu-step", a hyphen follows), colours ("#1f77b4", "#000000": letters or six digits),
# "#1" inside a word or path ("a#1", "x/#1").
TRACKER = re.compile(r"\bissues?[\s_-]+#?\d+|(?:^|(?<=[\s(\[]))#\d{1,5}(?![\w-])", re.IGNORECASE | re.MULTILINE)
TEXT_EXTENSIONS = (".py", ".md", ".cfg", ".json", ".toml", ".txt", ".csv", ".sh", ".yml", ".yaml", ".ini", ".tex")
REPRODUCE_SCRIPTS = ("reproduce_small", "sweep", "probe_vs_head", "plot_monitors")


def tracker_references(text: str, where: str) -> list[str]:
    """``where:line: match`` for every tracker reference in ``text``."""
    return [f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in TRACKER.finditer(text)]


def read(path: str) -> str:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def markdown_files() -> list[str]:
    """README.md first, then every other markdown file outside tests/."""
    others = [f for f in repo_files() if f.endswith(".md") and f != "README.md" and not f.startswith("tests/")]
    return ["README.md", *others]


@pytest.mark.parametrize("text, found", [
    ("as issue 29 found", ["issue 29"]),
    ("Issue #33's arms", ["Issue #33"]),
    ("issues 20 and 33", ["issues 20"]),
    ("see\nissue\n  25", ["issue\n  25"]),
    ("(docs/distributed.md#faults-a-long-run-survives-issue-29)", ["issue-29"]),
    ("the LooC table (#33)", ["#33"]),
    ("#33 at a line start", ["#33"]),
    ("the [section](#5-cpu-step-padding) and colours #1f77b4, #000000", []),
    ("tissue 3, issued 2 keys, reissue 4, a#1, x/#2", []),
])
def test_the_pattern_finds_tracker_references_and_nothing_else(text, found):
    assert [m.group(0) for m in TRACKER.finditer(text)] == found


def test_readme_names_no_tracker_numbers():
    """README.md, on its own: it is rewritten separately, and a failure here lists the lines to fix."""
    hits = tracker_references(read("README.md"), "README.md")
    assert not hits, "tracker numbers in README.md:\n" + "\n".join(hits)


def test_docs_name_no_tracker_numbers():
    hits = [h for path in markdown_files()[1:] for h in tracker_references(read(path), path)]
    assert not hits, "tracker numbers in the docs:\n" + "\n".join(hits)


def script_help(name: str) -> str:
    """``reproduce/<name>.py --help``, in-process (argparse prints it and exits 0)."""
    import importlib

    module = importlib.import_module(f"reproduce.{name}")
    entry = getattr(module, "parse_args", None) or module.main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        entry(["--help"])
    assert exit_info.value.code == 0, f"{name} --help exited {exit_info.value.code}"
    return out.getvalue()


def test_program_help_names_no_tracker_numbers():
    """train_main/eval_main ``--helpfull`` (their snapshots) and reproduce/'s scripts' ``--help``."""
    texts = {f"tests/snapshots/{name}_helpfull.txt": read(f"tests/snapshots/{name}_helpfull.txt")
             for name in ("train_main", "eval_main")}
    texts |= {f"reproduce/{name}.py --help": script_help(name) for name in REPRODUCE_SCRIPTS}
    assert all(len(t) > 200 for t in texts.values()), {k: len(t) for k, t in texts.items()}
    hits = [h for where, text in texts.items() for h in tracker_references(text, where)]
    assert not hits, "tracker numbers in the programs' help:\n" + "\n".join(hits)


def test_sources_name_no_tracker_numbers():
    """Every text file outside tests/ that is not markdown: help strings, docstrings, log and error lines,
    comments, flagfiles and ledger entries."""
    paths = [f for f in repo_files() if f.endswith(TEXT_EXTENSIONS) and not f.endswith(".md")
             and not f.startswith("tests/")]
    assert any(p.startswith("augself_tf/") for p in paths) and any(p.startswith("bench/") for p in paths)
    hits = [h for path in paths for h in tracker_references(read(path), path)]
    assert not hits, "tracker numbers in the sources:\n" + "\n".join(hits)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (word characters, hyphens and spaces
    kept, so inline code's backticks go), each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.cache
def anchors_of(path: str) -> frozenset[str]:
    """The anchors of a markdown file's headings (outside fenced code), a repeated one with GitHub's -1, -2..."""
    repeats: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in read(path).splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            anchor = github_anchor(m.group(1))
            repeats[anchor] = repeats.get(anchor, -1) + 1
            anchors.add(f"{anchor}-{repeats[anchor]}" if repeats[anchor] else anchor)
    return frozenset(anchors)


def test_anchor_slugs_follow_github():
    assert github_anchor("Low-shot linear evaluation — `--protocol=lowshot`") == \
        "low-shot-linear-evaluation----protocollowshot"
    assert github_anchor("LooC (`table:looc_comparison`)") == "looc-tablelooc_comparison"
    assert github_anchor("5. CPU step: padding, bfloat16, PyTorch, end to end") == \
        "5-cpu-step-padding-bfloat16-pytorch-end-to-end"


def test_markdown_links_to_anchors_name_a_heading():
    """``[text](file.md#anchor)`` and ``[text](#anchor)`` in the markdown files: the anchor is one of the target's
    headings (a link to an anchor renamed with its heading fails here, README.md's as well)."""
    broken = []
    for path in markdown_files():
        for n, line in enumerate(read(path).splitlines(), 1):
            for target, anchor in re.findall(r"\]\(([^()\s#]*)#([^()\s]+)\)", line):
                if "://" in target or not (target == "" or target.endswith(".md")):
                    continue
                doc = os.path.normpath(os.path.join(os.path.dirname(path), target)).replace(os.sep, "/") \
                    if target else path
                if not os.path.isfile(os.path.join(REPO, doc)) or anchor not in anchors_of(doc):
                    broken.append(f"{path}:{n}: {target}#{anchor}")
    assert not broken, "links to anchors no heading has:\n" + "\n".join(broken)
