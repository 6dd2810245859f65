"""The one exception type the evaluation code raises for bad input (shown to users as one line)."""

from __future__ import annotations


class EvalError(Exception):
    """A user-facing evaluation error: bad SavedModel, dataset unfit for a protocol, bad flag value.

    ``eval_main`` prints ``str(error)`` as a single line on stderr and exits with status 2.
    """


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message, shortened to ``limit`` characters."""
    text = str(error).strip() or type(error).__name__
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text)
    return line if len(line) <= limit else line[: limit - 3] + "..."
