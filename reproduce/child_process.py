"""train_main and eval_main as child processes: their output into the run's log, interruptions passed on.

A child stopped by a signal (killed by hand, the OOM killer, a job scheduler) raises :class:`ChildKilledError`,
so the runner stops before the next arm; a child that exits with an error status is only a failed arm.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from reproduce.run_directory import Context

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def _stops_deferred():
    """Holds SIGINT and SIGTERM back while a child starts; yields the list of those that came.

    Popen forks, execs and then waits for the child's exec to succeed. A stop raised inside it (KeyboardInterrupt
    from SIGINT, or from the runner's SIGTERM handler) would leave the new child running with nobody to stop it:
    seen once, a 120-epoch arm training on, orphaned, after the suite was stopped at an arm boundary. Python runs
    signal handlers in the main thread only, so outside it nothing is deferred.
    """
    deferred: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield deferred
        return
    # A handler installed outside Python (getsignal gives None) could not be put back: that signal is not deferred.
    saved = {s: signal.signal(s, lambda signum, frame: deferred.append(signum)) for s in STOP_SIGNALS
             if signal.getsignal(s) is not None}
    try:
        yield deferred
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def run_logged(cmd: list[str], log_path: str, ctx: Context, on_poll: Callable[[], None] | None = None) -> int:
    """Runs ``cmd`` in the repository with its output appended to ``log_path``; returns its exit status.

    An interruption of this process (Ctrl-C, SIGTERM turned into KeyboardInterrupt) stops the child with
    SIGINT first, so train_main's checkpoints stay whole, and is then raised again.
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        # A command started in the background by a shell inherits SIGINT ignored, and so would the child:
        # give it Python's default handling back, so that SIGINT below stops it between two steps.
        with _stops_deferred() as deferred:
            proc = subprocess.Popen(cmd, cwd=ctx.root, stdout=f, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=_default_sigint)
        try:
            for signum in deferred:  # a stop that came while the child started: handled now, as any other
                signal.raise_signal(signum)
            while True:
                try:
                    return proc.wait(timeout=ctx.poll_seconds)
                except subprocess.TimeoutExpired:
                    if on_poll is not None:
                        on_poll()
        except BaseException:
            for stop in (lambda: proc.send_signal(signal.SIGINT), proc.terminate, proc.kill):
                if proc.poll() is not None:
                    break
                stop()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            raise


class ChildKilledError(RuntimeError):
    """A train_main or eval_main child ended by a signal (killed by hand, the OOM killer, a job scheduler)."""


def check_not_killed(status: int, what: str) -> None:
    """Raises :class:`ChildKilledError` when ``status`` (a Popen return code) says the child died of a signal.

    Whoever killed it meant the experiment to stop, or the machine is failing; either way the next arm
    should not start.
    """
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        raise ChildKilledError(f"{what} was killed by {name}")

