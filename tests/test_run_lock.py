"""The run lock of a --model_dir (augself_tf/runtime/run_lock.py): one holder, refused in one line naming it,
taken over from a dead process or a silent heartbeat, released on exit; the tf.io.gfile path on ram://."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from augself_tf.runtime import run_lock
from augself_tf.runtime.run_lock import LOCK_NAME, RunDirBusyError, RunLock, RunLockLostError


def _record(model_dir, **changes) -> dict:
    """Rewrites the lock file's fields (a holder elsewhere, a dead pid, an old heartbeat) and returns them."""
    path = os.path.join(model_dir, LOCK_NAME)
    with open(path) as f:
        held = json.load(f)
    held.update(changes)
    with open(path + ".test", "w") as f:
        json.dump(held, f)
    os.replace(path + ".test", path)  # atomic, as the lock's own writes: the heartbeat thread may be reading
    return held


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_acquire_refuse_naming_the_holder_then_release(tmp_path):
    first = RunLock(str(tmp_path))
    first.acquire()
    with open(tmp_path / LOCK_NAME) as f:
        held = json.load(f)
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
    with pytest.raises(RunDirBusyError) as err:
        RunLock(str(tmp_path)).acquire()
    line = str(err.value)
    assert "\n" not in line and "in use by another run" in line
    assert f"host {socket.gethostname()}, pid {os.getpid()}, since 20" in line and "--model_dir" in line
    first.release()
    assert not os.path.exists(tmp_path / LOCK_NAME)
    with RunLock(str(tmp_path)):  # free again
        assert os.path.exists(tmp_path / LOCK_NAME)
    assert os.listdir(tmp_path) == []  # no private files left behind


def test_a_dead_processs_lock_is_taken_over_in_one_line(tmp_path):
    killed = RunLock(str(tmp_path))
    killed.acquire()
    killed._stop.set()  # what a kill -9 leaves: the file, no heartbeat, no process
    _record(str(tmp_path), pid=_dead_pid())
    lines: list[str] = []
    with RunLock(str(tmp_path), log=lines.append):
        assert len(lines) == 1 and "Took over" in lines[0] and "its process is gone" in lines[0]
        assert f"pid {os.getpid()}" not in lines[0]  # names the dead holder


def test_a_reused_pid_is_not_a_live_holder(tmp_path):
    RunLock(str(tmp_path)).acquire()
    _record(str(tmp_path), start="1")  # this pid, but a process started at another time
    lines: list[str] = []
    with RunLock(str(tmp_path), log=lines.append):
        assert "its pid now belongs to another process" in lines[0]


def test_another_hosts_lock_is_held_while_its_heartbeat_is_fresh_and_taken_over_when_stale(tmp_path):
    RunLock(str(tmp_path)).acquire()
    # A holder on another node: its pid means nothing here, only its heartbeat does.
    _record(str(tmp_path), host="gpu-node-7", boot_id="other", pid=_dead_pid(), heartbeat=time.time() - 10)
    with pytest.raises(RunDirBusyError, match=r"host gpu-node-7, pid \d+, since .*heartbeat 10 s ago"):
        RunLock(str(tmp_path), heartbeat_seconds=30, stale_intervals=4).acquire()
    _record(str(tmp_path), heartbeat=time.time() - 121)
    lines: list[str] = []
    with RunLock(str(tmp_path), log=lines.append, heartbeat_seconds=30, stale_intervals=4):
        assert len(lines) == 1 and "gpu-node-7" in lines[0] and "heartbeat stopped 121 s ago" in lines[0]


class _Clock:
    """A clock that moves on by one second per reading: each heartbeat writes a time of its own."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _held(model_dir: str) -> dict:
    return json.loads(run_lock._Files(model_dir.rstrip("/") + "/" + LOCK_NAME).read())


def _quiet_lock(model_dir: str, **kwargs) -> RunLock:
    """A held lock whose daemon thread never beats during a test (an hour's interval): the test calls beat()."""
    lock = RunLock(model_dir, heartbeat_seconds=3600, clock=_Clock(), **kwargs)
    lock.acquire()
    return lock


def test_the_heartbeat_refreshes_and_a_taken_over_lock_is_noticed(tmp_path):
    lock = _quiet_lock(str(tmp_path))
    first = _held(str(tmp_path))["heartbeat"]
    assert lock.beat() is True
    assert _held(str(tmp_path))["heartbeat"] == first + 1.0
    lock.check()
    _record(str(tmp_path), host="gpu-node-7", token="theirs")  # another run took it over
    assert lock.beat() is False
    assert _held(str(tmp_path))["token"] == "theirs"  # the beat wrote nothing over it
    with pytest.raises(RunLockLostError, match="another run took over .*gpu-node-7"):
        lock.check()
    lock.release()
    assert os.path.exists(tmp_path / LOCK_NAME)  # not ours any more: left to its holder
    assert os.listdir(tmp_path) == [LOCK_NAME]  # and no guard or private file left behind


@pytest.mark.parametrize("where", ["local", "gfile"])
def test_a_takeover_landing_between_the_heartbeats_read_and_its_write_is_not_written_over(tmp_path, where,
                                                                                          monkeypatch):
    """The takeover lands after the beat has read its own token, as a taker that does not take the guard would
    (a tf.io.gfile path has none): the look just before the replace sees it, and the file keeps the taker's."""
    monkeypatch.setattr(run_lock, "SETTLE_SECONDS", 0.01)
    model_dir = str(tmp_path) if where == "local" else f"ram://run_lock_race_{uuid.uuid4().hex}"
    lock = _quiet_lock(model_dir)
    theirs = dataclasses.replace(lock.holder, host="gpu-node-7", token="theirs").text()
    files, reads = lock.files, []
    real_read = files.read

    def read_then_taken_over(path=None):
        text = real_read(path)
        reads.append(text)
        if len(reads) == 1:  # the beat's first read: its own token; the takeover lands now
            run_lock._Files(lock.path).write(theirs)
        return text

    monkeypatch.setattr(files, "read", read_then_taken_over)
    assert lock.beat() is False
    assert len(reads) == 2 and json.loads(reads[0])["token"] == lock.holder.token
    assert real_read() == theirs
    with pytest.raises(RunLockLostError, match="gpu-node-7"):
        lock.check()
    monkeypatch.setattr(files, "read", real_read)
    lock.release()
    assert real_read() == theirs  # released without removing the taker's lock


def test_heartbeats_on_a_gfile_url_leave_one_holders_lock_that_the_release_removes(monkeypatch):
    """TensorFlow's ram:// appends a write to an existing file: a heartbeat that wrote in place would leave two
    holders' texts, which no later run could read."""
    monkeypatch.setattr(run_lock, "SETTLE_SECONDS", 0.01)
    ticks = iter(range(1000, 2000))
    lock = RunLock(f"ram://run_lock_beats_{uuid.uuid4().hex}", clock=lambda: float(next(ticks)))
    lock.acquire()
    try:
        for _ in range(3):
            assert lock.beat() is True
        held = json.loads(lock.files.read())
        assert held["token"] == lock.holder.token and held["heartbeat"] == lock.holder.heartbeat > held["since"]
    finally:
        lock.release()
    assert lock.files.read() is None
    again = RunLock(lock.model_dir)  # the next run takes it at once
    again.acquire()
    again.release()


def test_a_takeover_cannot_start_while_a_heartbeat_holds_the_guard_and_sees_its_outcome(tmp_path, monkeypatch):
    lock = _quiet_lock(str(tmp_path))
    # The holder looks like another node's with a silent heartbeat: a second run may take it over...
    _record(str(tmp_path), host="gpu-node-7", boot_id="other", heartbeat=time.time() - 1000)
    refused: list[str] = []
    real_read = lock.files.read

    def read_while_a_taker_tries(path=None):
        text = real_read(path)
        if not refused:  # ...but not between the beat's read and its write
            with pytest.raises(RunDirBusyError) as err:
                RunLock(str(tmp_path), heartbeat_seconds=30).acquire()
            refused.append(str(err.value))
        return text

    monkeypatch.setattr(lock.files, "read", read_while_a_taker_tries)
    assert lock.beat() is True
    assert "taking over or refreshing" in refused[0]
    monkeypatch.setattr(lock.files, "read", real_read)
    assert _held(str(tmp_path)) == dataclasses.asdict(lock.holder)  # the beat's write, whole
    # Once the beat is done a takeover can go ahead (the holder silent again), and the holder's next beat sees it.
    _record(str(tmp_path), host="gpu-node-7", boot_id="other", heartbeat=time.time() - 1000)
    lines: list[str] = []
    with RunLock(str(tmp_path), log=lines.append, heartbeat_seconds=30):
        assert len(lines) == 1 and "heartbeat stopped" in lines[0]
        assert lock.beat() is False
        with pytest.raises(RunLockLostError):
            lock.check()
    lock.release()
    assert os.listdir(tmp_path) == []


def test_a_guard_left_by_a_killed_process_is_cleared_and_a_live_one_is_waited_for(tmp_path):
    lock = _quiet_lock(str(tmp_path))
    guard = tmp_path / (LOCK_NAME + ".takeover")
    guard.write_text("{}")  # a taker mid-takeover: this beat leaves the file to it
    before = _held(str(tmp_path))
    assert lock.beat() is True and _held(str(tmp_path)) == before and guard.exists()
    old = time.time() - run_lock._GUARD_STALE_SECONDS - 5
    os.utime(guard, (old, old))  # left by a process killed while holding it
    assert lock.beat() is True
    assert _held(str(tmp_path))["heartbeat"] > before["heartbeat"] and not guard.exists()
    lock.release()
    assert os.listdir(tmp_path) == []


def test_the_daemon_thread_beats_and_stops_once_the_lock_is_lost(tmp_path, monkeypatch):
    """The thread itself, without sleeping: the test waits for beats to happen (the timeouts only bound a hang)."""
    lock = RunLock(str(tmp_path), heartbeat_seconds=0.01, clock=_Clock())
    beats, three = [], threading.Event()
    real_beat = lock.beat

    def counted_beat() -> bool:
        beats.append(real_beat())
        if len(beats) >= 3:
            three.set()
        return beats[-1]

    monkeypatch.setattr(lock, "beat", counted_beat)
    lock.acquire()
    assert three.wait(timeout=120)
    assert _held(str(tmp_path))["heartbeat"] > lock._new_holder().since - 1000  # refreshed by the beats
    _record(str(tmp_path), host="gpu-node-7", token="theirs")
    lock._thread.join(timeout=120)
    assert not lock._thread.is_alive() and beats[-1] is False
    with pytest.raises(RunLockLostError, match="gpu-node-7"):
        lock.check()
    lock.release()


def test_gfile_paths_write_read_back_and_refuse(monkeypatch):
    monkeypatch.setattr(run_lock, "SETTLE_SECONDS", 0.01)
    model_dir = f"ram://run_lock_test_{uuid.uuid4().hex}"
    with RunLock(model_dir):
        with pytest.raises(RunDirBusyError, match=f"pid {os.getpid()}"):
            RunLock(model_dir).acquire()
    with RunLock(model_dir):  # released
        pass


# End to end: train_main.py processes on one --model_dir (a tiny MoCo + AugSelf run, as tests/test_faults.py's).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ("--method=moco", "--augself=crop,color", "--dataset=shapes", "--width=0.0625", "--image_size=16",
        "--batch_size=16", "--queue_size=64", "--projector_hidden=32", "--projector_dim=16", "--monitor=none",
        "--noexport", "--log_every=1")
_ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def _start(model_dir: str, log, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={model_dir}",
                             *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_ENV)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the first run ended before the scenario could start"


@pytest.mark.slow
def test_a_second_run_on_a_live_runs_model_dir_is_refused_and_the_first_is_undisturbed(tmp_path):
    from augself_tf.training.checkpoint_files import problem

    run, log = str(tmp_path / "run"), tmp_path / "first.log"
    with open(log, "w") as out:
        first = _start(run, out, "--max_steps=30", "--checkpoint_every=10")
        _wait_for(lambda: "pretrain " in log.read_text(), first)  # its loop runs: it holds the lock
        # Paused, the first run is alive but cannot move on: the second one meets it wherever it stands.
        first.send_signal(signal.SIGSTOP)
        try:
            second = subprocess.run([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY,
                                     f"--model_dir={run}", "--max_steps=30", "--checkpoint_every=10"],
                                    capture_output=True, text=True, cwd=ROOT, env=_ENV, timeout=300)
        finally:
            first.send_signal(signal.SIGCONT)
        code = first.wait(timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    lines = [x for x in (second.stdout + second.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in second.stderr, lines
    assert lines[0].startswith(f"error: --model_dir {run} is in use by another run (host {socket.gethostname()}, "
                               f"pid {first.pid}, since "), lines[0]
    assert code == 0, log.read_text()[-3000:]
    ckpts = os.path.join(run, "checkpoints")
    assert sorted(n for n in os.listdir(ckpts) if n.endswith(".index")) == [f"ckpt-{s}.index" for s in (10, 20, 30)]
    assert all(problem(os.path.join(ckpts, f"ckpt-{s}")) is None for s in (10, 20, 30))
    assert len(os.listdir(os.path.join(run, "tensorboard"))) == 1  # one run's events
    assert not os.path.exists(os.path.join(run, LOCK_NAME))  # released at the end


@pytest.mark.slow
def test_a_kill_9d_runs_lock_is_taken_over_by_the_rerun_in_one_line(tmp_path):
    run, log = str(tmp_path / "run"), tmp_path / "killed.log"
    ckpts = os.path.join(run, "checkpoints")
    with open(log, "w") as out:
        victim = _start(run, out, "--max_steps=200", "--checkpoint_every=3")
        _wait_for(lambda: os.path.exists(os.path.join(ckpts, "checkpoint")), victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    assert json.loads((tmp_path / "run" / LOCK_NAME).read_text())["pid"] == victim.pid  # left behind
    saved = int(open(os.path.join(ckpts, "checkpoint")).readline().split("ckpt-")[1].rstrip('"\n'))
    rerun = subprocess.run([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={run}",
                            f"--max_steps={saved + 2}", "--checkpoint_every=3"],
                           capture_output=True, text=True, cwd=ROOT, env=_ENV, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    took = [x for x in rerun.stdout.splitlines() if "Took over" in x]
    assert len(took) == 1 and f"pid {victim.pid}" in took[0] and "its process is gone" in took[0], rerun.stdout
    assert f"Resumed from {os.path.join(ckpts, f'ckpt-{saved}')}" in rerun.stdout
    assert not os.path.exists(os.path.join(run, LOCK_NAME))
