"""`--steps_per_execution=K`: K steps per `tf.function` call change nothing a run computes. Under `--deterministic`
the checkpoints of K = 3 are bit for bit those of K = 1, on 1 and on 2 replicas; a K = 10 run stopped by SIGTERM
and resumed with the same command ends on the bits of an uninterrupted K = 1 run, and exports. Under
`--jit_compile` (the replica function compiled on one device, XLA clusters on two CPU replicas) calls of 3 steps
give the losses and weights of one step per call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import batch, compile_model, make_model, replica_values

from augself_tf.runtime.strategy import CLUSTERS, REPLICA_FUNCTION, accelerated, compile_mode
from augself_tf.training.distributed_step import DistributedSteps, steps_in_call
from augself_tf.training.train_config import TrainConfig, parse_steps_per_execution, resolve_steps_per_execution

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


class _Replicas:
    """A strategy as `accelerated` sees it: only its replicas' devices."""

    def __init__(self, *devices: str) -> None:
        self.extended = type("Extended", (), {"worker_devices": devices})()


def test_auto_steps_per_call_is_log_every_on_accelerators_and_one_on_cpus():
    gpus = _Replicas("/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1")
    tpu = _Replicas("/job:worker/replica:0/task:0/device:TPU:0")
    cpus = _Replicas("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")
    assert [resolve_steps_per_execution("auto", accelerated(s), 10) for s in (gpus, tpu, cpus)] == [10, 10, 1]
    assert resolve_steps_per_execution("auto", accelerated(tf.distribute.OneDeviceStrategy("/cpu:0")), 25) == 1
    assert resolve_steps_per_execution(4, True, 10) == 4 and resolve_steps_per_execution("3", False, 10) == 3
    assert TrainConfig().steps_per_execution == "auto"
    for bad in ("0", "-2", "ten", "2.5"):
        with pytest.raises(ValueError, match=r"^--steps_per_execution must be 'auto' or a positive integer"):
            parse_steps_per_execution(bad)


def test_steps_per_call_is_parsed_when_the_config_is_made_and_the_step_holds_the_resolved_value():
    """Flags or Python, the config holds a positive int or ``auto`` from the start; the run resolves it once and
    its DistributedSteps sizes every call from that one value."""
    assert TrainConfig(steps_per_execution="3").steps_per_execution == 3
    assert TrainConfig(steps_per_execution=None).steps_per_execution == "auto"
    with pytest.raises(ValueError, match=r"^--steps_per_execution must be 'auto' or a positive integer"):
        TrainConfig(steps_per_execution="ten")
    model = type("Model", (), {"train_step": lambda self, batch: {}})()
    run = DistributedSteps(tf.distribute.OneDeviceStrategy("/cpu:0"), model, steps_per_execution=10)
    assert [run.call_size(step, 21, (5, 4, 0, 62)) for step in (0, 4, 5, 20)] == [4, 1, 3, 1]


def _jit_calls(replicas: int, k: int, steps: int = 5) -> tuple[dict[int, dict], list, list[int]]:
    """A tiny MoCo + AugSelf trained ``steps`` steps under --jit_compile in calls of up to ``k`` steps, fed by a
    distributed iterator as in a run: the logs of each call's last step by step, the weights, the call sizes."""
    strategy = mirrored_cpus() if replicas == 2 else tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = make_model("moco", sync=replicas == 2, queue_size=16)
    compile_model(model, strategy, total_steps=steps)
    mode = compile_mode(strategy)
    assert mode == (CLUSTERS if replicas == 2 else REPLICA_FUNCTION)
    batches = [batch(seed) for seed in range(steps)]
    rows = tf.nest.map_structure(lambda *xs: np.concatenate(xs), *batches)
    data = tf.data.Dataset.from_tensor_slices(rows).batch(len(batches[0]["label"]))  # global batches, in order
    iterator = iter(strategy.experimental_distribute_dataset(data))
    with strategy.scope():
        nonfinite = tf.Variable(0, dtype=tf.int64, trainable=False)
    run = DistributedSteps(strategy, model, mode, nonfinite)
    logs, sizes, step = {}, [], 0
    while step < steps:
        out, ran = run(iterator, steps_in_call(step, k, steps, (0,)))
        step += ran
        sizes.append(ran)
        logs[step] = out.fetch()
    assert int(nonfinite.numpy()) == 0
    return logs, [replica_values(w) for w in model.weights], sizes


@pytest.mark.slow  # XLA compiles the step and the loop around it: 1-7 min on a loaded 2-core machine
@pytest.mark.usefixtures("production_graph_optimizer")  # XLA's clusters as a run compiles them (tests/conftest.py)
@pytest.mark.parametrize("replicas", [1, 2], ids=["replica_function", "clusters_2_replicas"])
def test_jit_compiled_calls_of_three_steps_equal_one_step_per_call(replicas):
    """5 steps: K = 1 runs 5 calls; K = 3 runs the first step alone, then a call of 3 (the in-graph loop around
    the compiled step), then 1. The logs of the steps both end a call on, and the weights, are K = 1's: to 1e-5
    on one device (one compiled replica function, called from the loop); to round-off on two CPU replicas, whose
    XLA clusters are formed in the loop's body, so their fusions may add in another order (the tolerance of the
    clustered step against the plain one, tests/test_accelerator_path.py)."""
    rtol, atol = (1e-5, 1e-6) if replicas == 1 else (1e-4, 1e-5)
    one, one_weights, one_sizes = _jit_calls(replicas, 1)
    three, three_weights, three_sizes = _jit_calls(replicas, 3)
    assert one_sizes == [1] * 5 and three_sizes == [1, 3, 1]
    for step, logs in three.items():
        assert logs.keys() == one[step].keys()
        for key, value in logs.items():
            np.testing.assert_allclose(value, one[step][key], rtol=rtol, atol=atol, err_msg=f"{key} at step {step}")
    for a, b in zip(one_weights, three_weights, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(y, x, rtol=rtol, atol=atol)
    assert np.isfinite(three[5]["loss/total"])


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


@pytest.mark.slow
def test_two_workers_with_k5_stop_at_one_step_on_a_sigterm_to_one_and_resume(tmp_path, monkeypatch):
    """Two workers on localhost running calls of 5 steps (logs every 10): a SIGTERM to the non-chief stops both
    after one call, at one step, saved in the chief's --model_dir; the same commands resume there and finish."""
    import test_worker_agreement
    from test_worker_agreement import TINY, _agreed_stop, _finish, _resume_to_the_end, _start, _wait_until_both_train

    # Each launch traces the one-step function and the loop function on both workers: over 5 minutes a launch
    # on a loaded 2-core machine (measured), past the two-worker tests' 400 s.
    monkeypatch.setattr(test_worker_agreement, "TIMEOUT", 900)

    steps = 40
    flags = [f for f in TINY if not f.startswith(("--max_steps=", "--log_every="))]
    model_dir = str(tmp_path / "run")
    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), *flags, f"--max_steps={steps}", "--log_every=10",
           "--steps_per_execution=5", f"--model_dir={model_dir}"]
    procs = _start([cmd, cmd], logs, "first")
    _wait_until_both_train(procs)
    procs[1][0].send_signal(signal.SIGTERM)
    step, _ = _agreed_stop(_finish(procs), steps)
    ckpts = os.path.join(model_dir, "checkpoints")
    saved = os.path.join(ckpts, f"ckpt-{step}")
    assert tf.train.latest_checkpoint(ckpts) == saved
    _resume_to_the_end([cmd, cmd], logs, ckpts, saved, steps)
