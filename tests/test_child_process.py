"""The reproduction's child processes: a stop of the runner stops its child, whenever the stop comes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from reproduce import child_process
from reproduce.reproduce_small import _terminate
from reproduce.run_directory import Context

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _ctx(tmp_path) -> Context:
    return Context(root=str(tmp_path), data_dir=str(tmp_path), out_dir=str(tmp_path), ledger_dir=str(tmp_path),
                   poll_seconds=0.2)


@pytest.fixture(autouse=True)
def python_sigint():
    """SIGINT handled as in a Python process started in a terminal (KeyboardInterrupt).

    A shell without job control starts a background command with SIGINT ignored, and Python keeps it ignored: a
    test run started that way (``pytest ... &`` in a script) saw its own Ctrl-C ignored and the sleeping child run
    its 120 s out. The stop must also reach this thread (the main one, with the signal unblocked)."""
    assert threading.current_thread() is threading.main_thread(), "signal tests must run in the main thread"
    assert not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, []), "stop signals blocked"
    yield from _handled(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def runner_sigterm():
    """SIGTERM handled as the reproduction's command handles it (a KeyboardInterrupt)."""
    yield from _handled(signal.SIGTERM, _terminate)


def _handled(signum: int, handler):
    """Installs ``handler`` for ``signum`` for one test, then puts the previous one back."""
    saved = signal.signal(signum, handler)
    yield
    if saved is not None:  # None: a handler installed outside Python, which cannot be put back
        signal.signal(signum, saved)


def _run_stopped(tmp_path, monkeypatch, stop) -> int | None:
    """run_logged of a sleeping child, with ``stop(child)`` called once the child exists; the child's exit status
    when run_logged has returned (None: still running)."""
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen_then_stop(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        stop(started[0])
        return started[0]

    monkeypatch.setattr(child_process.subprocess, "Popen", popen_then_stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            child_process.run_logged(SLEEPER, str(tmp_path / "log.txt"), _ctx(tmp_path))
        return started[0].poll()
    finally:
        for proc in started:
            if proc.poll() is None:  # the defect this file tests for: do not leave it sleeping
                proc.kill()
                proc.wait()


def test_a_sigterm_that_lands_while_the_child_starts_stops_the_child(tmp_path, monkeypatch, runner_sigterm):
    # The signal arrives inside Popen, after the fork: the moment a scheduler's pre-emption at an arm boundary hits.
    status = _run_stopped(tmp_path, monkeypatch, lambda _: signal.raise_signal(signal.SIGTERM))
    assert status is not None  # stopped by the runner, not orphaned
    assert signal.getsignal(signal.SIGTERM) is _terminate  # the runner's own handler is back


def test_ctrl_c_while_the_child_starts_stops_the_child(tmp_path, monkeypatch):
    assert _run_stopped(tmp_path, monkeypatch, lambda _: signal.raise_signal(signal.SIGINT)) is not None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_stop_while_the_child_runs_stops_it_as_before(tmp_path, monkeypatch, runner_sigterm):
    def stop_later(_):
        # After Popen has returned: the usual path, a KeyboardInterrupt in the wait loop.
        threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGTERM)).start()

    assert _run_stopped(tmp_path, monkeypatch, stop_later) is not None
