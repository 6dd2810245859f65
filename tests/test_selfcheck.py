"""``augself-selfcheck``: its quick form passes on 2 logical CPUs and its JSON holds every section (a whole process:
slow tier); a planted per-replica difference and an op forced onto the host each turn their line to fail and the
exit status non-zero (in-process, small settings); a bad flag is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers import compile_model, make_model
from package_source import imported_modules, modules

from augself_tf.runtime.strategy import make_strategy
from augself_tf.selfcheck import cli, correctness, placement
from augself_tf.selfcheck.harness import Setup
from augself_tf.selfcheck.verdicts import FAIL, PASS, Check, Report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def tiny_model(setup: Setup, strategy: tf.distribute.Strategy):
    """The method on the tests' two-layer backbone (helpers.make_model): the checks' logic without the seconds to
    minutes a ResNet's step takes to trace on 2 replicas (the slow test runs them on the run's own models)."""
    with strategy.scope():
        model = make_model(setup.method, sync=strategy.num_replicas_in_sync > 1, image_size=setup.image_size)
        model.augment_config = setup.config().augment  # the device stage of a --photometric=device batch
    compile_model(model, strategy)
    return model


def noise_on_replica_1(model) -> None:
    """Replica 1 adds noise to its views before its step: what a broken per-replica path would compute."""
    step = model.train_step

    def train_step(batch):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        noise = 0.1 * tf.cast(tf.equal(replica, 1), tf.float32)
        return step({**batch, "view1": batch["view1"] + noise})

    model.train_step = train_step


def op_on_the_host(model) -> None:
    """The step's loss goes through a node pinned to the CPU: a host round-trip at every step on a GPU."""
    step = model.train_step

    def train_step(batch):
        logs = step(batch)
        with tf.device(CPU0):
            logs["loss/total"] = tf.identity(logs["loss/total"])
        return logs

    model.train_step = train_step


@pytest.fixture
def two_replicas() -> tf.distribute.Strategy:
    strategy = make_strategy("auto", cpu_replicas=2)  # conftest split the CPU in two already
    assert strategy.num_replicas_in_sync == 2
    return strategy


def test_replicas_match_passes_and_a_planted_replica_difference_fails_it_and_the_exit(two_replicas):
    setup = Setup(method="simsiam", batch_size=8)
    clean = correctness.replicas_match(two_replicas, setup, steps=2, builder=tiny_model)
    assert clean.status == PASS, clean.figure
    assert clean.values["max_loss_diff"] <= 1e-5 and clean.values["variables"] > 10
    planted = correctness.replicas_match(two_replicas, setup, steps=2, tamper=noise_on_replica_1, builder=tiny_model)
    assert planted.status == FAIL, planted.figure
    assert "beyond it" in planted.figure
    report = Report(out=open(os.devnull, "w"))
    report.add(clean)
    assert report.exit_status() == 0
    report.add(planted)
    assert report.exit_status() == 1 and report.as_json()["sections"]["correctness"][1]["status"] == FAIL


@pytest.mark.usefixtures("production_graph_optimizer")  # host-op placement, as production runs it
def test_an_op_forced_onto_the_host_fails_the_placement_line_and_the_exit(two_replicas):
    setup = Setup(method="simsiam")
    clean = placement.accelerator_step(two_replicas, setup, builder=tiny_model)
    assert clean.status == PASS, clean.figure
    assert "no GPU here" in clean.figure  # honest about what was checked on a CPU-only machine
    forced = placement.accelerator_step(two_replicas, setup, tamper=op_on_the_host, builder=tiny_model)
    assert forced.status == FAIL, forced.figure
    assert forced.values["by_op"] == {"Identity (CPU)": 1}, forced.values
    report = Report(out=open(os.devnull, "w"))
    report.add(forced)
    assert report.exit_status() == 1


def test_nothing_in_the_library_imports_the_selfcheck():
    found = modules()
    assert "augself_tf.selfcheck.cli" in found and "augself_tf.training.loop" in found
    inside = lambda name: name == "augself_tf.selfcheck" or name.startswith("augself_tf.selfcheck.")  # noqa: E731
    wrong = [(m, n) for m, p in found.items() if not inside(m) for n in imported_modules(m, p) if inside(n)]
    assert wrong == []


def test_host_ops_check_names_what_it_found():
    @tf.function
    def step(x):
        return tf.py_function(lambda a: a, [x], tf.float32)

    graph = step.get_concrete_function(tf.TensorSpec([4])).graph.as_graph_def()
    check = placement.host_ops_check(graph, "a test graph")
    assert check.status == FAIL and "EagerPyFunc" in check.figure
    clean = tf.function(lambda x: 2 * x).get_concrete_function(tf.TensorSpec([4])).graph.as_graph_def()
    assert placement.host_ops_check(clean, "a test graph").status == PASS


def test_an_input_bound_run_is_reported_but_does_not_fail_the_exit():
    report = Report(out=open(os.devnull, "w"))
    report.add(Check("placement", "input pipeline vs step", FAIL, "input bounds", fatal=False))
    report.add(Check("speed", "default size: simsiam", FAIL, "raised"))
    assert report.exit_status() == 0
    report.add(Check("placement", "host-memory ops in the step", FAIL, "3"))
    assert report.exit_status() == 1


@pytest.mark.parametrize("argv,message", [
    (["--sections=speed,colour"], "--sections=speed,colour: choose among environment,correctness,placement,speed"),
    (["--methods=simsiam,mocco"], "--methods: unknown method mocco; choose from"),
    (["--cpu_replicas=0"], "--cpu_replicas=0: must be at least 1"),
    (["--quik"], "unrecognized arguments: --quik"),
])
def test_a_bad_flag_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"augself-selfcheck: error: {message}"), line


@pytest.mark.slow
def test_quick_on_two_cpu_replicas_passes_and_its_json_holds_every_section(tmp_path):
    output = tmp_path / "selfcheck.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-m", "augself_tf.selfcheck", "--quick", "--cpu_replicas=2",
                           f"--output={output}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    print(proc.stdout)
    result = json.loads(output.read_text())
    assert result["exit_status"] == 0 and result["replicas"] == 2
    names = {s: {c["name"] for c in checks} for s, checks in result["sections"].items()}
    assert {"TensorFlow", "Keras", "Python", "CUDA / cuDNN", "visible devices", "compute capability",
            "native low precision", "cross-replica reduction", "matmul peak float32", "matmul peak bfloat16",
            "matmul peak float16"} <= names["environment"]
    assert {"2 replicas = one device: simsiam", "2 replicas = one device: moco", "float16 steps finite: simsiam",
            "bfloat16 steps finite: simsiam", "float16 overflow on one replica skips all",
            "XLA compiles the replica step: simsiam"} <= names["correctness"]
    assert {"host-memory ops in the step", "input pipeline vs step"} <= names["placement"]
    assert {"default size: simsiam", "default size: simsiam --jit_compile", "ImageNet-100 size (ResNet-50, 224 px)",
            "default size: simsiam --mixed_precision=bfloat16", "default size: simsiam --photometric=device"
            } <= names["speed"]
    every = [c for checks in result["sections"].values() for c in checks]
    assert all(c["status"] in ("pass", "fail", "n/a") and c["figure"] for c in every)
    assert not [c for c in every if c["fatal"] and c["status"] == "fail"]
    assert result["facts"]["peak_flops"]["float32"] > 0
