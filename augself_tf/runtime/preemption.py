"""SIGTERM / SIGINT: finish the current step, save, say where to resume, exit 128 + signal.

A scheduler pre-empting a job sends SIGTERM and, after a grace period, SIGKILL; a user stops a run with
Ctrl-C (SIGINT). :class:`StopSignals` only records the signal; the training loop asks :attr:`signum` at every
step boundary, saves a checkpoint at that step (the same verified save as any other, so the resume is as
exact as a resume from a periodic checkpoint) and raises :class:`Preempted`, whose one-line message the
program prints before exiting with :attr:`Preempted.exit_code`: 128 + the signal's number (143 for SIGTERM,
130 for SIGINT), the shell's convention for "ended by a signal", so that a requeue wrapper tells a stop from
a finished run (0) and from bad input (2).

Why not ``tf.distribute.experimental.PreemptionCheckpointHandler``: it saves through its own
``CheckpointManager`` numbered by its own run counter (our resume derives the input position from the
checkpoint's step and verifies each save), watches SIGTERM only (not Ctrl-C), and exits with its own code
(42 outside Google Cloud) from inside ``run``, past our cleanup. The loop's own step boundary is the natural
save point, and the handler here costs one attribute read per step. A second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):  # noqa: N818 (not an error: a requested stop)
    """The run stopped on a signal after saving; ``exit_code`` is 128 + the signal's number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class StopSignals:
    """Records SIGTERM/SIGINT while installed (a context manager); the previous handlers come back on exit.

    Outside the main thread (where Python cannot install handlers) it records nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        #: Called before a second signal's immediate exit, which skips every ``finally`` (the run lock's release).
        self.before_exit_now: list[Callable[[], None]] = []

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            return
        # A second signal (a hung step, an impatient Ctrl-C): stop now. A save cut short leaves only a
        # ckpt-N_temp folder, removed at the next start; the last complete checkpoint is untouched.
        sys.stderr.write(f"\nstopped at once by a second {signal.Signals(signum).name}; the same command resumes "
                         "from the last saved checkpoint\n")
        sys.stderr.flush()
        for release in self.before_exit_now:
            try:
                release()
            except Exception:  # noqa: BLE001 (exiting anyway: a stale lock is taken over by the next run)
                pass
        os._exit(128 + signum)

    @property
    def name(self) -> str:
        """The recorded signal's name (SIGTERM, SIGINT)."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def reinstall(self) -> None:
        """Installs the handlers again (when installed at all). Call it after building a multi-worker strategy:
        TensorFlow's coordination service then takes SIGTERM over at the C level for its own pre-emption
        notifier, which Python does not see (``signal.getsignal`` still names ours) and which never stops the
        loop: measured, a SIGTERM to such a worker was swallowed and the run went on to its last step."""
        for sig in self._previous:
            signal.signal(sig, self._record)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
