"""The training loop end to end: replicas, exact resume, NaN guard, export round trip, bad input."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_run
from program_runs import run_program

from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.training.loop import NonFiniteLossError, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _checkpoint_values(ckpt_dir: str) -> dict:
    reader = tf.train.load_checkpoint(ckpt_dir)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "save_counter" not in k}


class _InterruptError(Exception):
    pass


@pytest.mark.slow
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    full = train(tiny_run(str(tmp_path / "full"), export=False))
    assert full.steps == 6

    def interrupt(step):
        if step == 4:
            raise _InterruptError

    with pytest.raises(_InterruptError):
        train(tiny_run(str(tmp_path / "resumed"), on_step=interrupt, export=False))
    resumed = train(tiny_run(str(tmp_path / "resumed"), export=False))
    assert resumed.steps == 6
    a, b = _checkpoint_values(full.checkpoint_dir), _checkpoint_values(resumed.checkpoint_dir)
    assert a.keys() == b.keys()
    assert any("queue" in k for k in a), "the MoCo queue must be checkpointed"
    for key in a:
        if np.asarray(a[key]).dtype.kind in "fiu":
            np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-6, err_msg=key)


@pytest.mark.slow
def test_two_replicas_train_finite_and_export_loads_without_the_project(tmp_path):
    # The device stage (uint8 views, photometric ops batched per replica) is the path 8-GPU runs take.
    result = train(tiny_run(str(tmp_path / "run"), method="simsiam", cpu_replicas=2, max_steps=3, photometric="device",
                        method_options={"projector_dim": 32, "predictor_hidden": 8}))
    assert np.isfinite(result.last_logs["loss/total"])
    assert result.model.distribute_strategy.num_replicas_in_sync == 2
    assert os.path.exists(os.path.join(result.tensorboard_dir))
    images = np.random.default_rng(0).uniform(size=[3, 20, 24, 3]).astype("float32")
    np.save(tmp_path / "x.npy", images)
    script = (
        "import sys, numpy as np, tensorflow as tf\n"
        f"m = tf.saved_model.load({result.saved_model_dir!r})\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        "f = m.signatures['serving_default'](images=tf.constant(x))['features'].numpy()\n"
        f"np.save({str(tmp_path / 'f.npy')!r}, f)\n"
        "assert not any(k.startswith('augself_tf') for k in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(tmp_path),
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""})
    exported = np.load(tmp_path / "f.npy")
    direct = result.model.backbone(images, training=False).numpy()
    assert exported.shape == (3, result.model.feature_dim)
    np.testing.assert_allclose(exported, direct, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = AugSelfModel.compute_losses

    def poisoned(self, batch, training=True):
        total, logs, forward = original(self, batch, training)
        bad = tf.cast(self.optimizer.iterations, tf.float32) >= 2.0
        total = tf.where(bad, tf.constant(float("nan")), total)
        logs["loss/total"] = total
        return total, logs, forward

    monkeypatch.setattr(AugSelfModel, "compute_losses", poisoned)
    with pytest.raises(NonFiniteLossError, match="step 3"):
        train(tiny_run(str(tmp_path / "nan"), checkpoint_every=1))
    ckpt = tf.train.latest_checkpoint(str(tmp_path / "nan" / "checkpoints"))
    assert ckpt.endswith("-2")
    values = _checkpoint_values(str(tmp_path / "nan" / "checkpoints"))
    assert all(np.isfinite(v).all() for v in values.values() if np.asarray(v).dtype.kind == "f")
    assert not os.path.exists(tmp_path / "nan" / "saved_model")


@pytest.mark.slow
def test_nan_between_log_steps_is_caught_before_the_next_save_and_names_its_step(tmp_path, monkeypatch):
    original = AugSelfModel.compute_losses

    def poisoned(self, batch, training=True):
        total, logs, forward = original(self, batch, training)
        total = tf.where(tf.equal(self.optimizer.iterations, 1), tf.constant(float("inf")), total)
        logs["loss/total"] = total
        return total, logs, forward

    monkeypatch.setattr(AugSelfModel, "compute_losses", poisoned)
    with pytest.raises(NonFiniteLossError, match="step 2"):  # iterations == 1 during the 2nd step
        train(tiny_run(str(tmp_path / "inf"), checkpoint_every=4, log_every=5))
    assert tf.train.latest_checkpoint(str(tmp_path / "inf" / "checkpoints")) is None


@pytest.mark.slow
@pytest.mark.parametrize(("k", "sizes"), [(1, [1] * 6), (3, [1, 2, 3])], ids=["K=1", "K=3"])
def test_loop_fetches_logs_only_at_log_steps(tmp_path, monkeypatch, k, sizes):
    """A host read of the logs after every call would stall a GPU's queue: each call's packed logs are copied to
    the host once, and only by the calls that end on a log step. With K = 3 (log and checkpoint every 3 steps)
    the calls are the process's first step, then 2 steps up to the log point, then 3."""
    from augself_tf.training import distributed_step

    calls: list[int] = []
    fetched_after: list[int] = []
    real_call, real_fetch = distributed_step.DistributedSteps.__call__, distributed_step.StepLogs._fetch

    def counting_call(self, iterator, steps, peek=None):
        logs, ran = real_call(self, iterator, steps, peek)
        calls.append(ran)
        return logs, ran

    def counting_fetch(self):
        if self._values is None:  # a device-to-host copy (later reads are the host's own dict)
            fetched_after.append(sum(calls))
        return real_fetch(self)

    monkeypatch.setattr(distributed_step.DistributedSteps, "__call__", counting_call)
    monkeypatch.setattr(distributed_step.StepLogs, "_fetch", counting_fetch)
    result = train(tiny_run(str(tmp_path / "run"), log_every=3, export=False, steps_per_execution=k))
    assert calls == sizes and fetched_after == [3, 6]
    assert np.isfinite(result.last_logs["loss/total"]) and "stop_requested" not in result.last_logs


@pytest.mark.slow  # three trainings (two minutes on a loaded 2-core machine)
def test_steps_per_execution_stop_and_resume_equals_one_step_per_call(tmp_path):
    """K = 4 stopped after a call (at the checkpoint of step 3) and resumed with K = 4 ends where K = 1 ends; the
    resumed process runs its first step alone, then calls up to the end."""
    full = train(tiny_run(str(tmp_path / "full"), export=False))

    def interrupt(step):
        if step == 3:
            raise _InterruptError

    with pytest.raises(_InterruptError):
        train(tiny_run(str(tmp_path / "resumed"), on_step=interrupt, export=False, steps_per_execution=4))
    resumed = train(tiny_run(str(tmp_path / "resumed"), export=False, steps_per_execution=4))
    assert resumed.steps == 6
    a, b = _checkpoint_values(full.checkpoint_dir), _checkpoint_values(resumed.checkpoint_dir)
    assert a.keys() == b.keys()
    for key in a:
        if np.asarray(a[key]).dtype.kind in "fiu":
            np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-6, err_msg=key)


BAD_INPUTS = [
    (["--method=simclrr"], "simsiam"),
    (["--augself=crop,hue"], "choose from crop, flip, color, blur, rotation, solarize"),
    (["--augself_weight=-1"], "augself_weight"),
    (["--batch_size=15", "--cpu_replicas=2"], "not divisible"),
    (["--dataset=no_such_dataset_xyz"], "unknown dataset"),
    (["--method=looc", "--looc_augmentations=color,sepia"],
     "error: --looc_augmentations: unknown augmentation 'sepia'; choose from crop, flip, color"),
    (["--method=looc", "--condition=color"], "error: --condition does not compose with --method=looc"),
    (["--condition_kind=hypernet"], "error: --condition_kind=hypernet needs --condition"),
    (["--method=moco", "--condition=crop", "--condition_predictor"],
     "error: --condition_predictor: method 'moco' has no predictor that reads the description"),
]
# A tiny MoCo run on shapes asking for a monitor that does not exist.
UNKNOWN_MONITOR = ["--method=moco", "--augself=crop,color", "--dataset=shapes", "--split=test", "--width=0.0625",
                   "--image_size=16", "--batch_size=200", "--max_steps=7", "--queue_size=400", "--projector_hidden=32",
                   "--projector_dim=16", "--noexport", "--monitor=knn,probe"]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory) -> dict:
    """train_main.py on every bad input of the tests below, one process each, forked after one import of the
    program (tests/program_runs.py): {case: CompletedProcess}, and the empty data_dir of the tfds case."""
    tmp = tmp_path_factory.mktemp("bad_input")
    cases = {i: [f"--model_dir={tmp / str(i)}", "--max_steps=1", *args] for i, (args, _) in enumerate(BAD_INPUTS)}
    cases["tfds"] = ["--dataset=cifar10", "--max_steps=1", f"--data_dir={tmp}", f"--model_dir={tmp / 'model'}"]
    cases["monitor"] = [*UNKNOWN_MONITOR, f"--model_dir={tmp / 'monitor'}"]
    procs = run_program(os.path.join(ROOT, "train_main.py"), list(cases.values()), cwd=ROOT,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return {**dict(zip(cases, procs, strict=True)), "data_dir": str(tmp)}


@pytest.mark.slow
def test_bad_input_is_one_clear_line_and_nonzero_exit(bad_runs):
    for i, (args, expected) in enumerate(BAD_INPUTS):
        proc = bad_runs[i]
        assert proc.returncode != 0, args
        assert "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        assert expected in proc.stderr, (args, proc.stderr[-2000:])


@pytest.mark.slow
def test_train_main_unprepared_tfds_is_one_error_line_exit_2(bad_runs):
    proc, data_dir = bad_runs["tfds"], bad_runs["data_dir"]
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: tfds dataset 'cifar10' is not prepared in {data_dir}: build it with "
        "`tfds build cifar10 --data_dir DIR` on a machine with network, copy DIR here and pass --data_dir=DIR; "
        "or use --dataset=folder:PATH for an image folder"
    ], proc.stderr
    assert "Traceback" not in proc.stderr and "unknown or zero size" not in proc.stderr


@pytest.mark.slow
def test_unknown_monitor_is_one_clear_line_and_nonzero_exit(bad_runs):
    proc = bad_runs["monitor"]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "unknown monitor 'probe'; choose auto, none, or a comma list of knn, knn:LABEL, colorperm" in proc.stderr


def test_default_moco_queue_is_the_papers_or_at_most_sixty_percent_of_the_data():
    from augself_tf.methods.moco import default_queue_size

    assert default_queue_size(1_281_167, 256) == 65536
    assert default_queue_size(5000, 256) == 2816  # ≤ 0.6·5000, a whole number of batches
    assert default_queue_size(3500, 128) == 2048
    assert default_queue_size(100, 64) == 64  # never below one batch


def test_methods_complete_their_options_from_the_data():
    from augself_tf.methods import METHODS
    from augself_tf.methods.augself_model import PretrainData

    data = PretrainData("d", num_examples=5000, num_classes=10, global_batch=256, total_steps=190, steps_per_epoch=19)
    logged = []
    moco = METHODS["moco"].complete_options({"queue_size": None, "temperature": 0.3}, data, logged.append)
    assert moco == {"queue_size": 2816, "temperature": 0.3, "total_steps": 190, "steps_per_epoch": 19}
    assert logged and "2816 keys for 5000 images" in logged[0]
    assert METHODS["moco"].complete_options({"queue_size": 4096}, data)["queue_size"] == 4096  # the flag wins
    simsiam = METHODS["simsiam"].complete_options({"queue_size": None}, data)
    assert simsiam == {"queue_size": None, "total_steps": 190, "steps_per_epoch": 19}  # no queue, no labels
    assert METHODS["supervised"].complete_options({}, data)["num_classes"] == 10
    unlabelled = dataclasses.replace(data, num_classes=0)
    with pytest.raises(ValueError, match="method 'supervised' needs class labels; 'd' has none"):
        METHODS["supervised"].complete_options({}, unlabelled)


@pytest.mark.slow
@pytest.mark.usefixtures("production_graph_optimizer")  # the XLA step production compiles
@pytest.mark.parametrize("photometric", ["host", "device"])
def test_mixed_precision_and_xla_step_on_one_device(tmp_path, photometric):
    import keras

    try:
        result = train(tiny_run(str(tmp_path / "run"), method="simsiam", max_steps=2, mixed_precision="bfloat16",
                            jit_compile=True, photometric=photometric, export=False,
                            method_options={"projector_dim": 16, "predictor_hidden": 8}))
    finally:
        keras.mixed_precision.set_global_policy("float32")  # train() sets the process-wide policy
    assert result.steps == 2 and np.isfinite(result.last_logs["loss/total"])
