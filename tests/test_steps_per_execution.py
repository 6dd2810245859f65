"""`--steps_per_execution=K`: K steps per `tf.function` call change nothing a run computes. Under `--deterministic`
the checkpoints of K = 3 are bit for bit those of K = 1, on 1 and on 2 replicas; a K = 10 run stopped by SIGTERM
and resumed with the same command ends on the bits of an uninterrupted K = 1 run, and exports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from augself_tf.training.distributed_step import steps_in_call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
# Tiny MoCo + AugSelf (the queue and the key encoder are state a call must carry like a step does).
TINY = ("--deterministic", "--method=moco", "--augself=crop,color", "--dataset=shapes", "--split=test",
        "--width=0.0625", "--image_size=16", "--batch_size=16", "--queue_size=32", "--projector_hidden=32",
        "--projector_dim=16", "--monitor=none", "--seed=3")


def test_a_call_stops_short_of_every_cadence_point():
    # log 5, checkpoint 4, no monitors, epoch 62: from step 0 with K = 10, calls end at 4, 5, 8, 10, 12, ...
    ends, step = [], 0
    while step < 21:
        step += steps_in_call(step, 10, 21, (5, 4, 0, 62))
        ends.append(step)
    assert ends == [4, 5, 8, 10, 12, 15, 16, 20, 21]
    assert steps_in_call(60, 10, 1000, (100, 0, 0, 62)) == 2  # the epoch boundary
    assert steps_in_call(7, 1, 1000, (10, 10, 0, 62)) == 1


def _launch(model_dir: str, log_path: str, args: tuple[str, ...]) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115 (closed by the child's exit)
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, *args,
                             f"--model_dir={model_dir}"], cwd=ROOT, env=_ENV, stdout=log, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, log_path: str, code: int = 0) -> str:
    got = proc.wait(timeout=900)
    with open(log_path) as f:
        text = f.read()
    assert got == code, text[-3000:]
    return text


def _values(model_dir: str) -> dict:
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "save_counter" not in k}


def _assert_same_bits(a_dir: str, b_dir: str) -> None:
    a, b = _values(a_dir), _values(b_dir)
    assert sorted(a) == sorted(b) and any("queue" in k for k in a) and len(a) > 100
    different = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not different, f"{len(different)} of {len(a)} tensors differ, e.g. {different[:3]}"


@pytest.mark.slow
@pytest.mark.parametrize("replicas", [1, 2])
def test_k3_is_bit_identical_to_k1_under_deterministic(tmp_path, replicas):
    """7 steps, logs every 5: K = 3 runs calls of 1 (the process's first step), 3, 1 and 2 steps."""
    args = ("--max_steps=7", "--log_every=5", "--checkpoint_every=7", "--noexport",
            *((f"--cpu_replicas={replicas}", "--strategy=mirrored") if replicas > 1 else ()))
    # At once: --deterministic runs one thread per op, so two runs share the cores without slowing down.
    procs = {k: _launch(str(tmp_path / f"k{k}"), str(tmp_path / f"k{k}.log"), (*args, f"--steps_per_execution={k}"))
             for k in (1, 3)}
    for k, proc in procs.items():
        _finish(proc, str(tmp_path / f"k{k}.log"))
    _assert_same_bits(str(tmp_path / "k1"), str(tmp_path / "k3"))


@pytest.mark.slow
def test_k10_stopped_by_sigterm_resumes_with_the_same_command_and_exports(tmp_path):
    args = ("--max_steps=60", "--log_every=10", "--checkpoint_every=10")
    reference = _launch(str(tmp_path / "ref"), str(tmp_path / "ref.log"), (*args, "--steps_per_execution=1"))
    k10 = (*args, "--steps_per_execution=10")
    run = str(tmp_path / "k10")
    victim = _launch(run, str(tmp_path / "victim.log"), k10)
    ckpts = os.path.join(run, "checkpoints")
    deadline = time.time() + 600
    while time.time() < deadline and victim.poll() is None:
        latest = tf.train.latest_checkpoint(ckpts) if os.path.exists(ckpts) else None
        if latest is not None:  # ckpt-10 is there: the run is in its calls of 10 steps
            break
        time.sleep(0.02)
    assert victim.poll() is None, "the run ended before it could be stopped mid-run"
    victim.send_signal(signal.SIGTERM)
    text = _finish(victim, str(tmp_path / "victim.log"), code=128 + signal.SIGTERM)
    last = [x for x in text.splitlines() if x.strip()][-1]
    assert last.startswith("stopped by SIGTERM after step "), last
    step = int(last.split("after step ")[1].split("/")[0])
    assert step % 10 == 0 and 10 <= step < 60, last  # after the call under way: calls end on checkpoint points
    resumed = _launch(run, str(tmp_path / "resumed.log"), k10)
    assert f"Resumed from {os.path.join(ckpts, f'ckpt-{step}')}" in _finish(resumed, str(tmp_path / "resumed.log"))
    _finish(reference, str(tmp_path / "ref.log"))
    _assert_same_bits(str(tmp_path / "ref"), run)
    assert os.path.exists(os.path.join(run, "saved_model", "saved_model.pb"))
