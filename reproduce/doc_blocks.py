"""The generated blocks of a document: the part of docs/results.md between a suite's two markers.

Each suite's report owns its markers (``main_report.BEGIN``/``END``, ``looc_report.BEGIN``/``END``) and rewrites
only its own block, so the hand-written reading around the blocks is kept.
"""

from __future__ import annotations

import os


def replace_block(text: str, block: str, begin: str, end: str) -> str:
    """``text`` with the part between the markers replaced by ``block`` (markers appended if absent)."""
    if begin not in text or end not in text:
        text = text.rstrip("\n") + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    return f"{head}{begin}\n{block}\n{end}{tail}"


def current_block(text: str, begin: str, end: str) -> str | None:
    """The generated block of a document, or None without markers."""
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write_block(path: str, block: str, begin: str, end: str) -> None:
    """Puts ``block`` between the markers of the document at ``path`` (created if missing); the file is rewritten
    only when its text changes."""
    text = open(path).read() if os.path.exists(path) else ""
    new = replace_block(text, block, begin, end)
    if new != text:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(new)


def relative_link(target: str, document: str) -> str:
    """``target``'s path relative to the document's folder, '/'-separated: a markdown link that works from it."""
    return os.path.relpath(os.path.abspath(target), os.path.dirname(os.path.abspath(document))).replace(os.sep, "/")
