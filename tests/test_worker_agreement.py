"""Workers of a multi-worker run agree on the step to stop at and on the checkpoint to resume from.

Two worker processes on localhost (TF_CONFIG, as tests/test_multiworker.py sets them up). A scheduler may
signal one node only: SIGTERM to one worker must stop both at one step, with the chief's checkpoint at that
step, and the same commands must resume from it. Workers that chose different checkpoints must stop with one
line naming the steps, not hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from test_multiworker import _free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 400  # seconds per launch, as in tests/test_multiworker.py (a loaded 2-core machine)
STEPS = 20
TINY = ["--strategy=multi_worker", "--method=simclr", "--augself=crop,color", "--dataset=shapes",
        "--width=0.0625", "--image_size=16", "--batch_size=16", f"--max_steps={STEPS}", "--log_every=1",
        "--checkpoint_every=1000", "--monitor=none", "--noexport"]


def _env(cluster: dict, index: int, scratch: str) -> dict:
    return dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TMPDIR=scratch)


def _start(cmds: list[list[str]], log_dir: str, tag: str) -> list[tuple[subprocess.Popen, str]]:
    """Starts one process per command line as worker 0, 1, ...; each one's output goes to LOG_DIR/TAG<i>.log."""
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(len(cmds))]}
    procs = []
    for i, cmd in enumerate(cmds):
        scratch = os.path.join(log_dir, f"tmp{i}")
        os.makedirs(scratch, exist_ok=True)
        path = os.path.join(log_dir, f"{tag}{i}.log")
        with open(path, "w") as log:
            procs.append((subprocess.Popen(cmd, cwd=ROOT, env=_env(cluster, i, scratch), stdout=log,
                                           stderr=subprocess.STDOUT), path))
    return procs


def _finish(procs: list[tuple[subprocess.Popen, str]]) -> list[tuple[int | None, str]]:
    """[(exit code or None after TIMEOUT, output)] per worker; a worker still running is killed."""
    results = []
    try:
        for proc, path in procs:
            try:
                code = proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
            with open(path) as f:
                results.append((code, f.read()))
    finally:
        for proc, _ in procs:  # a worker whose peer stopped alone waits for ever in a collective
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _stop_line(out: str) -> str:
    lines = [x for x in out.splitlines() if x.startswith("stopped by ")]
    assert len(lines) == 1, out[-3000:]
    return lines[0]


def _wait_until_both_train(procs: list[tuple[subprocess.Popen, str]]) -> None:
    """Returns once the chief prints its progress line (a step is a collective, so both workers are in the loop),
    a worker exits, or TIMEOUT passes."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and all(p.poll() is None for p, _ in procs):
        with open(procs[0][1]) as f:
            if "pretrain " in f.read():
                return
        time.sleep(0.05)


def _agreed_stop(first: list[tuple[int | None, str]], steps: int) -> tuple[int, list[str]]:
    """The one step every worker stopped at after a SIGTERM (0 < step < steps), and each worker's stop line: each
    exited as a pre-emption, with no traceback."""
    for i, (code, out) in enumerate(first):  # neither hangs; the one not signalled stops as a pre-emption too
        assert code == 128 + signal.SIGTERM, f"worker {i} exit {code}:\n{out[-3000:]}"
        assert "Traceback" not in out, out[-3000:]
    lines = [_stop_line(out) for _, out in first]
    stopped = {int(x.split("after step ")[1].split("/")[0]) for x in lines}
    assert len(stopped) == 1, lines  # one agreed step
    step = stopped.pop()
    assert 0 < step < steps, lines
    return step, lines


def _resume_to_the_end(cmds: list[list[str]], logs: str, ckpts: str, saved: str, steps: int) -> None:
    """The same commands again: every worker resumes from SAVED and the run ends with the checkpoint of STEPS."""
    for i, (code, out) in enumerate(_finish(_start(cmds, logs, "second"))):
        assert code == 0, f"worker {i} exit {code}:\n{out[-3000:]}"
        assert f"Resumed from {saved}" in out
    assert tf.train.latest_checkpoint(ckpts) == os.path.join(ckpts, f"ckpt-{steps}")


@pytest.mark.slow
@pytest.mark.parametrize("signalled", [1, 0], ids=["non_chief", "chief"])
def test_sigterm_to_one_worker_stops_both_at_one_saved_step_and_resumes(tmp_path, signalled):
    model_dir = str(tmp_path / "run")
    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={model_dir}"]
    procs = _start([cmd, cmd], logs, "first")
    _wait_until_both_train(procs)
    procs[signalled][0].send_signal(signal.SIGTERM)
    step, lines = _agreed_stop(_finish(procs), STEPS)
    assert lines[signalled].startswith("stopped by SIGTERM after step ")
    assert lines[1 - signalled].startswith("stopped by SIGTERM (sent to another worker) after step ")
    ckpts = os.path.join(model_dir, "checkpoints")
    saved = os.path.join(ckpts, f"ckpt-{step}")
    for x in lines:
        assert f"saved {saved};" in x and "resumes" in x
    assert tf.train.latest_checkpoint(ckpts) == saved
    reader = tf.train.load_checkpoint(saved)
    assert int(reader.get_tensor("state/optimizer.Storch_sgd.Siteration/.ATTRIBUTES/VARIABLE_VALUE")) == step
    assert not [d for d in os.listdir(os.path.join(logs, "tmp1")) if d.startswith("augself_worker_")]

    _resume_to_the_end([cmd, cmd], logs, ckpts, saved, STEPS)


_AGREE = r"""
import sys
import tensorflow as tf
from augself_tf.training.agreement import agree_on_resume
from augself_tf.training.checkpoint_files import CheckpointFileError

strategy = tf.distribute.MultiWorkerMirroredStrategy()
agree_on_resume(strategy, "/run/checkpoints/ckpt-40", "/run/checkpoints")  # the same choice: nothing to say
try:
    agree_on_resume(strategy, sys.argv[1] or None, "/run/checkpoints")
except CheckpointFileError as err:
    print(f"error: {err}")
    sys.exit(1)
print("agreed")
"""


@pytest.mark.slow
@pytest.mark.parametrize("choices", [("ckpt-40", "ckpt-35"), ("ckpt-40", "")])
def test_workers_that_chose_different_checkpoints_stop_with_one_line(tmp_path, choices):
    """Two workers, each with its own choice (as a worker reading a stale or a per-machine --model_dir makes):
    both stop with the line naming both steps, where they used to start at different steps and hang."""
    cmds = [[sys.executable, "-c", _AGREE, f"/run/checkpoints/{c}" if c else ""] for c in choices]
    results = _finish(_start(cmds, str(tmp_path), "agree"))  # each first agrees on ckpt-40 (no error)
    other = "35" if choices[1] else "0 (no checkpoint)"
    low, high = sorted([other, "40"], key=lambda s: int(s.split()[0]))
    for i, (code, out) in enumerate(results):
        assert code == 1, (code, out[-3000:])
        line = [x for x in out.splitlines() if x.startswith("error: ")]
        assert line == [f"error: workers disagree on the checkpoint to resume from: steps {low} and {high} (worker {i} "
                        f"chose {['40', other][i]}, reading /run/checkpoints); every worker must read the chief's "
                        "checkpoints in one shared --model_dir: check that it is the same folder on every machine, "
                        "then start all workers again"], out[-3000:]
