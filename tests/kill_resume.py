"""The kill -9 resume protocol every exact-resume test runs: two copies of one train_main command on 2 replicas under
--deterministic, one killed by SIGKILL after a mid-run checkpoint and rerun with the same command; the caller
compares the two final checkpoints."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(model_dir: str, log_path: str, args: tuple[str, ...]) -> subprocess.Popen:
    """train_main with ``args`` on 2 CPU replicas, --deterministic, its output in ``log_path``."""
    cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), "--deterministic", "--cpu_replicas=2", *args,
           f"--model_dir={model_dir}"]
    log = open(log_path, "w")  # noqa: SIM115 (closed by the child's exit)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def checkpoint_values(model_dir: str) -> dict:
    """Every tensor of the run's newest checkpoint by key (the save counter left out)."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "save_counter" not in k}


def wait_ok(proc: subprocess.Popen, log_path: str, timeout: float = 600) -> None:
    """Waits for ``proc``; fails with the end of its log unless it exited 0."""
    code = proc.wait(timeout=timeout)
    with open(log_path) as f:
        assert code == 0, f.read()[-3000:]


def _step(prefix: str) -> int:
    """The step of checkpoint ``prefix`` (``.../ckpt-N``)."""
    return int(prefix.rsplit("-", 1)[1])


def kill_mid_run(model_dir: str, log_path: str, args: tuple[str, ...], kill_after: int, steps: int) -> str | None:
    """Launches ``args`` into ``model_dir`` and kills it by SIGKILL once checkpoint ``kill_after`` exists; returns
    the checkpoint the kill left, or None when the run outran the kill (it saved its last checkpoint, or ended,
    before the signal landed: a lost race, not a failure of the resume under test)."""
    victim = launch(model_dir, log_path, args)
    try:
        ckpts = os.path.join(model_dir, "checkpoints")
        deadline = time.time() + 900
        latest = None
        while time.time() < deadline and victim.poll() is None:
            # The checkpoint's own files come before the manifest naming it: wait for the manifest, or a kill in
            # between leaves no checkpoint to resume from (the resumed run would rightly start from scratch).
            latest = tf.train.latest_checkpoint(ckpts) if os.path.exists(ckpts) else None
            if latest is not None and _step(latest) >= kill_after:
                break
            time.sleep(0.02)
        if victim.poll() is not None:  # ended before the poll saw checkpoint kill_after: fine only if it succeeded
            wait_ok(victim, log_path)
            return None
        assert latest is not None and _step(latest) >= kill_after, \
            f"no checkpoint {kill_after} within 900 s (latest: {latest})"
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    finally:  # a failed check leaves no training running behind the test
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    left = tf.train.latest_checkpoint(ckpts)
    return left if _step(left) < steps else None


def kill_9_then_resume(tmp_path, args: tuple[str, ...], kill_after: int, steps: int,
                       attempts: int = 3) -> tuple[dict, dict]:
    """Runs ``args`` whole and, beside it, killed by SIGKILL once checkpoint ``kill_after`` exists and rerun; asserts
    the rerun resumed from the checkpoint the kill left (before step ``steps``) and returns both runs' final
    checkpoint values (uninterrupted, resumed).

    The kill is raced against the run: at toy sizes a step takes milliseconds, so ``args`` must checkpoint at least
    twice between ``kill_after`` and ``steps``. On a loaded host the run can still save its last checkpoint before
    the signal lands; that attempt tested nothing, so the killed run starts again from an empty directory, up to
    ``attempts`` times."""
    every = int(next((a.split("=", 1)[1] for a in args if a.startswith("--checkpoint_every=")), steps))
    assert len(range(kill_after + every, steps, every)) >= 2, "leave the kill at least two checkpoints before the end"
    full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
    reference = launch(full, str(tmp_path / "full.log"), args)
    resumed = None
    try:
        left = None
        for attempt in range(attempts):
            shutil.rmtree(killed, ignore_errors=True)
            left = kill_mid_run(killed, str(tmp_path / f"killed-{attempt}.log"), args, kill_after, steps)
            if left is not None:
                break
        assert left is not None, f"in {attempts} attempts the run saved its last checkpoint before the kill landed"
        resumed = launch(killed, str(tmp_path / "resumed.log"), args)
        wait_ok(reference, str(tmp_path / "full.log"), timeout=900)
        wait_ok(resumed, str(tmp_path / "resumed.log"), timeout=900)
    finally:  # a failed check leaves no training running behind the test
        for proc in (reference, resumed):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    with open(tmp_path / "resumed.log") as f:
        assert f"Resumed from {left}" in f.read()
    return checkpoint_values(full), checkpoint_values(killed)


def assert_bit_identical(a: dict, b: dict) -> None:
    """The two runs' checkpoints hold the same keys and the same bits."""
    assert a.keys() == b.keys()
    different = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not different, f"{len(different)} of {len(a)} tensors differ, e.g. {different[:3]}"
