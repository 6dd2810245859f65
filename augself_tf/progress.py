"""Progress output for people and for log files.

On a terminal a bar is redrawn in place; when the stream is a file or a pipe (cluster logs, `nohup`,
`| tee`) each update is one ordinary line, written only every ``line_every`` units, so a log holds a few
dozen readable lines instead of thousands of carriage-return redraws. Keras' Progbar cannot do the latter:
it treats every POSIX process as a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TextIO

BAR_WIDTH = 24
MAX_LINE_LINES = 50  # auto line_every: at most about this many lines per task in a log file


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is an interactive terminal (an in-place bar is readable there)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed stream
        return False


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _format_value(value: float) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


class Progress:
    """A progress indicator over ``total`` units (steps, images, episodes).

    Args:
      total: units in the whole task (None when unknown: no bar, no ETA).
      label: what is being done, first on every line ("pretrain", "features cifar10:test").
      unit: name of one unit, used in the rate ("step/s").
      stream: where to write (default sys.stdout at construction time).
      enabled: False writes nothing (``--quiet``, non-chief workers).
      line_every: in a log file, one line every this many units (default: ``total / 50`` rounded up to a
        multiple of ``line_multiple``); the last unit always gets a line. Ignored on a terminal, where the
        bar is redrawn at most every ``redraw_seconds``.
      line_multiple: see ``line_every`` (the training loop's log interval, so each line shows fresh losses).
      terminal: force terminal (True) or log-file (False) behaviour; default asks the stream.
    """

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        unit: str = "step",
        stream: TextIO | None = None,
        enabled: bool = True,
        line_every: int | None = None,
        line_multiple: int = 1,
        redraw_seconds: float = 0.5,
        terminal: bool | None = None,
    ) -> None:
        self.total = total
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = enabled
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        default_every = -(-max(1, -(-(total or 0) // MAX_LINE_LINES)) // line_multiple) * line_multiple
        self.line_every = line_every or default_every
        self.redraw_seconds = redraw_seconds
        self.start_time = time.perf_counter()
        self.done = 0
        self._start_done: int | None = None
        self._last_draw = 0.0
        self._last_line_at = 0
        self._values: dict[str, float] = {}
        self._width = 0

    def update(self, done: int, values: Mapping[str, float] | None = None) -> None:
        """Records that ``done`` units (cumulative) are finished; ``values`` are shown beside the count."""
        if self._start_done is None:  # a resumed task's rate counts only this process's work
            self._start_done = done
            self.start_time = time.perf_counter()
        self.done = done
        if values:
            self._values.update(values)
        if not self.enabled:
            return
        final = self.total is not None and done >= self.total
        if self.terminal:
            now = time.perf_counter()
            if final or now - self._last_draw >= self.redraw_seconds:
                self._last_draw = now
                text = self._text(with_bar=True)
                pad = " " * max(0, self._width - len(text))
                self._width = len(text)
                self.stream.write("\r" + text + pad + ("\n" if final else ""))
                self.stream.flush()
        elif final or done - self._last_line_at >= self.line_every:
            self._last_line_at = done
            self.stream.write(self._text(with_bar=False) + "\n")
            self.stream.flush()

    def advance(self, units: int = 1, values: Mapping[str, float] | None = None) -> None:
        """``update(done + units)``."""
        self.update(self.done + units, values)

    def close(self) -> None:
        """Ends a terminal bar's line if the task stopped before ``total``."""
        if self.enabled and self.terminal and self._width and not (self.total and self.done >= self.total):
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _text(self, with_bar: bool) -> str:
        elapsed = time.perf_counter() - self.start_time
        progressed = self.done - (self._start_done or 0)
        rate = progressed / elapsed if elapsed > 0 else 0.0
        parts = [self.label]
        if self.total:
            frac = min(1.0, self.done / self.total)
            if with_bar:
                filled = int(BAR_WIDTH * frac)
                parts.append("[" + "=" * filled + "." * (BAR_WIDTH - filled) + "]")
            width = len(str(self.total))
            parts.append(f"{self.done:>{width}}/{self.total} ({100 * frac:.0f}%)")
        else:
            parts.append(f"{self.done}")
        parts.append(f"{_duration(elapsed)}")
        if rate > 0:
            parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 else f"{1 / rate:.3g} s/{self.unit}")
            if self.total and self.done < self.total:
                parts.append(f"ETA {_duration((self.total - self.done) / rate)}")
        parts.extend(f"{k} {_format_value(v)}" for k, v in self._values.items())
        return "  ".join(parts)
