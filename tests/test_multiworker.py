"""Two worker processes on localhost train with MultiWorkerMirroredStrategy (TF_CONFIG), then resume.

Each worker runs train_main.py as a user would. The chief (worker 0) writes checkpoints, TensorBoard and the
SavedModel into --model_dir; worker 1 writes its checkpoints to scratch space but must resume from the
chief's. SimCLR is used because its loss gathers the projections of both workers (a cross-worker collective
inside the step, on top of the gradient all-reduce and synchronized batch norm).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from augself_tf.runtime.tensorboard import read_scalars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 400  # seconds per launch; ~1 min on an idle 2-core machine, several times that under load
TINY = ["--strategy=multi_worker", "--method=simclr", "--augself=crop,color", "--dataset=shapes",
        "--width=0.0625", "--image_size=16", "--batch_size=16", "--epochs=1", "--log_every=1",
        "--photometric=device",  # the path multi-GPU workers take: uint8 views, photometric ops in the step
        "--monitor=auto", "--monitor_bank_size=200", "--monitor_query_size=100"]  # features gathered across workers


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("localhost", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch(model_dir: str, log_dir: str, extra: list[str]) -> list[tuple[int, str]]:
    """Runs 2 workers to completion; returns [(exit code, output)] for worker 0 (chief) and worker 1.
    Worker i's temporary files go to LOG_DIR/tmp{i}."""
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    for i in range(2):
        scratch = os.path.join(log_dir, f"tmp{i}")
        os.makedirs(scratch, exist_ok=True)
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                   TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TMPDIR=scratch)
        log = open(os.path.join(log_dir, f"worker{i}.log"), "w")  # closed below
        cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={model_dir}", *extra]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    results = []
    try:
        for proc, log in procs:
            try:
                code = proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
            log.close()
            with open(log.name) as f:
                results.append((code, f.read()))
    finally:
        for proc, _ in procs:  # a worker whose peer died waits forever on collectives: end it
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _check(results: list[tuple[int, str]], log_dir: str) -> None:
    for i, (code, out) in enumerate(results):
        assert code == 0, f"worker {i} exit {code}:\n{out[-3000:]}"
    # The non-chief's scratch checkpoints are removed at the end of its run.
    leftovers = [d for d in os.listdir(os.path.join(log_dir, "tmp1")) if d.startswith("augself_worker_")]
    assert not leftovers, leftovers


@pytest.mark.slow
def test_two_workers_train_checkpoint_export_and_resume(tmp_path):
    model_dir = str(tmp_path / "run")
    logs = tmp_path / "logs"
    logs.mkdir()
    first = launch(model_dir, str(logs), ["--max_steps=3"])
    _check(first, str(logs))
    for _, out in first:
        assert "on 2 replica(s)" in out
    ckpts = os.path.join(model_dir, "checkpoints")
    assert os.path.exists(os.path.join(ckpts, "ckpt-3.index")), os.listdir(model_dir)
    assert os.path.exists(os.path.join(model_dir, "saved_model", "saved_model.pb"))
    assert os.listdir(os.path.join(model_dir, "tensorboard"))
    # Only the chief writes into model_dir.
    assert sorted(os.listdir(ckpts)) == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"]

    second = launch(model_dir, str(logs), ["--max_steps=4"])
    _check(second, str(logs))
    for code_out in second:  # both workers resume from the chief's checkpoint and take 1 more step
        assert f"Resumed from {os.path.join(ckpts, 'ckpt-3')}" in code_out[1]
    assert os.path.exists(os.path.join(ckpts, "ckpt-4.index"))
    # The monitors ran on both workers (collectives) and only the chief wrote them: before the first step, at
    # the end of the first launch and at the end of the resumed one (a resumed run has no "before" point).
    assert _monitor_steps(os.path.join(model_dir, "tensorboard")) == {"monitor/knn": [0, 3, 4],
                                                                      "monitor/knn_color": [0, 3, 4]}
    for _, out in first:
        assert "monitor  step 3 " in out


def _monitor_steps(tb_dir: str) -> dict[str, list[int]]:
    events = read_scalars(tb_dir, ("monitor/knn", "monitor/knn_color"))
    return {tag: sorted(e.step for e in points) for tag, points in events.items()}  # a step written twice shows
