"""Faults a long run meets, injected into tiny runs: each ends in a resume that loses at most the steps
since the last save, or in one clear line and a non-zero exit; none in exit 0 with a wrong result, none in a
traceback. Every scenario runs `train_main.py` in its own process on a tiny MoCo + AugSelf model (those that end
on their own forked after one shared import of the program, tests/program_runs.py), except those that test a
function's truth directly (the folder listing, the epoch order, the logged lr, the advice)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, make_model
from program_runs import run_program

from augself_tf.data import folder
from augself_tf.data.pretrain import epoch_order, make_pair_dataset
from augself_tf.training.checkpoint_files import LIMIT
from augself_tf.training.health import advice
from augself_tf.training.optim import build_optimizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ("--method=moco", "--augself=crop,color", "--dataset=shapes", "--width=0.0625", "--image_size=16",
        "--batch_size=16", "--queue_size=64", "--projector_hidden=32", "--projector_dim=16", "--monitor=none",
        "--noexport", "--log_every=1")
_ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}  # every train_main child's


def _run(model_dir, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={model_dir}",
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env=_ENV)


def _error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    """The run's one error line, after checking the exit code and that no traceback was printed."""
    assert proc.returncode == code, (proc.returncode, proc.stdout[-1500:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _max_abs(prefix: str) -> float:
    reader = tf.train.load_checkpoint(prefix)
    values = [np.asarray(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()]
    return max(float(np.abs(v.astype(np.float64)).max()) for v in values if v.dtype.kind == "f" and v.size)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """A 6-step run with checkpoints at steps 2, 4 and 6; scenarios damage copies of it."""
    run = str(tmp_path_factory.mktemp("faults") / "run")
    proc = _run(run, "--max_steps=6", "--checkpoint_every=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# Every scenario that ends on its own (a resume, a refusal, a divergence, a full disk, a bad flag) is train_main.py
# in a process of its own, forked after one import of the program (tests/program_runs.py): importing TensorFlow
# was most of each scenario's seconds. The damage is done to copies of the trained run before the forks.
MISSING = ["ckpt-6.index", "checkpoint"]
DAMAGES = ["truncate", "bitflip"]
LRS = ["1e6", "1e30"]
FULL_DISK_BYTES = 1_000_000  # the checkpoint's data file is 5.4 MB
# 7. run.json guard gaps: one line naming the file.
RUN_JSON_CASES = [
    (None, "run.json is missing"),
    ("[1, 2, 3]", "is not a run settings file"),
    ("not json", "cannot be read as run settings"),
]
# 8. Every bad flag: exit 2 and one line.
BAD_FLAG_CASES = [
    (["--method=MoCo"], "--method=MoCo"),
    (["--no_such_flag=1"], "no_such_flag"),
    (["--lr=-1"], "--lr must be positive"),
    (["--lr=nan"], "--lr must be a finite number"),
    (["--augself_weight=inf"], "--augself_weight must be a finite number"),
    (["--image_size=100000"], "--image_size must be at most"),
    (["--model_dir=FILE"], "is a file"),
    (["--model_dir=/proc/augself_run"], "is not writable"),
]


@pytest.fixture(scope="module")
def runs(trained, tmp_path_factory) -> dict:
    """train_main.py on every scenario below, each its own process: {key: (CompletedProcess, run dir, extra)},
    where extra is what the scenario recorded before its run (the older checkpoints' bytes, run.json's path)."""
    tmp = tmp_path_factory.mktemp("scenarios")
    (tmp / "FILE").write_text("x")
    cases, dirs, extra, limits = {}, {}, {}, {}

    def copy(key) -> str:
        run = dirs[key] = str(tmp / "_".join(map(str, key)))
        shutil.copytree(trained, run)
        return run

    for missing in MISSING:
        run = copy(("missing", missing))
        ckpts = os.path.join(run, "checkpoints")
        os.remove(os.path.join(ckpts, missing))
        extra[("missing", missing)] = {n: _bytes(os.path.join(ckpts, n))
                                       for n in ("ckpt-2.data-00000-of-00001", "ckpt-4.data-00000-of-00001")}
        # the older code restarted at 0 and rewrote ckpt-2 and ckpt-4 here
        cases[("missing", missing)] = [*TINY, f"--model_dir={run}", "--max_steps=4"]
    for damage in DAMAGES:
        run = copy(("damaged", damage))
        data = os.path.join(run, "checkpoints", "ckpt-6.data-00000-of-00001")
        content = bytearray(_bytes(data))
        if damage == "truncate":
            content = content[: len(content) // 2]
        else:
            content[len(content) // 2] ^= 0x10
        with open(data, "wb") as f:
            f.write(content)
        os.makedirs(os.path.join(run, "checkpoints", "ckpt-8_temp"))  # what a kill -9 during a save leaves
        cases[("damaged", damage)] = [*TINY, f"--model_dir={run}", "--max_steps=4"]
    run = copy(("no_intact",))
    for step in (2, 4, 6):
        os.remove(os.path.join(run, "checkpoints", f"ckpt-{step}.index"))
    cases[("no_intact",)] = [*TINY, f"--model_dir={run}", "--max_steps=4"]
    for lr in LRS:
        run = dirs[("diverge", lr)] = str(tmp / f"diverge{lr}")
        cases[("diverge", lr)] = [*TINY, f"--model_dir={run}", f"--lr={lr}", "--max_steps=6", "--checkpoint_every=1"]
    run = dirs[("full_disk",)] = str(tmp / "full_disk")
    limits[len(cases)] = FULL_DISK_BYTES
    cases[("full_disk",)] = [*TINY, f"--model_dir={run}", "--max_steps=2", "--checkpoint_every=1"]
    for i, (content, _) in enumerate(RUN_JSON_CASES):
        run = copy(("json", i))
        path = extra[("json", i)] = os.path.join(run, "run.json")
        os.remove(path)
        if content is not None:
            with open(path, "w") as f:
                f.write(content)
        cases[("json", i)] = [*TINY, f"--model_dir={run}", "--max_steps=4", "--width=0.125"]
    for i, (args, _) in enumerate(BAD_FLAG_CASES):
        args = [a.replace("FILE", str(tmp / "FILE")) for a in args]
        cases[("flag", i)] = [*TINY, f"--model_dir={tmp / f'run{i}'}", *args]
    procs = run_program(os.path.join(ROOT, "train_main.py"), list(cases.values()), cwd=ROOT, max_file_bytes=limits,
                        env=_ENV)
    return {key: (proc, dirs.get(key), extra.get(key)) for key, proc in zip(cases, procs, strict=True)}


# 1. A missing index or state file must not restart the run at step 0 over the older checkpoints.
@pytest.mark.slow
@pytest.mark.parametrize("missing", MISSING)
def test_missing_checkpoint_file_resumes_from_the_files_present(runs, missing):
    proc, run, older = runs[("missing", missing)]
    ckpts = os.path.join(run, "checkpoints")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = "ckpt-4" if missing == "ckpt-6.index" else "ckpt-6"
    assert f"Resumed from {os.path.join(ckpts, resumed)}" in proc.stdout
    assert "pretrain  1/" not in proc.stdout  # no step was trained again
    for name, content in older.items():
        assert _bytes(os.path.join(ckpts, name)) == content
    if missing == "ckpt-6.index":
        assert "ckpt-6.index is missing" in proc.stdout
        assert os.path.exists(os.path.join(ckpts, "ckpt-6.data-00000-of-00001.bad"))
    assert tf.train.latest_checkpoint(ckpts).endswith(resumed)  # the state file names what is there


# 4. A damaged newest checkpoint falls back to the older intact one, naming the bad file.
@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_newest_checkpoint_falls_back_to_the_older_intact_one(runs, damage):
    proc, run, _ = runs[("damaged", damage)]
    data = os.path.join(run, "checkpoints", "ckpt-6.data-00000-of-00001")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"Checkpoint {data[: -len('.data-00000-of-00001')]} is not usable" in proc.stdout, proc.stdout
    assert f"Resumed from {os.path.join(run, 'checkpoints', 'ckpt-4')}" in proc.stdout
    assert not os.path.exists(os.path.join(run, "checkpoints", "ckpt-8_temp"))


@pytest.mark.slow
def test_no_intact_checkpoint_is_one_line_not_a_fresh_start(runs):
    line = _error_line(runs[("no_intact",)][0], 1)
    assert "no intact checkpoint" in line and "ckpt-6" in line and "ckpt-2" in line


# 2 and 3. Divergence with a finite loss is caught from the weights and BN statistics; no checkpoint written
# from such a state, and the "last good checkpoint" named really is sound.
@pytest.mark.slow
@pytest.mark.parametrize("lr", LRS)
def test_divergence_stops_without_saving_a_diverged_state(runs, lr):
    proc, run, _ = runs[("diverge", lr)]
    line = _error_line(proc, 2)
    assert "diverged" in line or "NaN" in line
    assert "--lr" in line and "--augself_weight" not in line
    ckpts = os.path.join(run, "checkpoints")
    saved = sorted(n[:-6] for n in os.listdir(ckpts) if n.endswith(".index")) if os.path.isdir(ckpts) else []
    assert len(saved) < 6  # it stopped
    for name in saved:
        assert _max_abs(os.path.join(ckpts, name)) <= LIMIT, name
    named = line.split("last good checkpoint in ")[1].split(" is ")[1].split(";")[0]
    assert named == (os.path.join(ckpts, saved[-1]) if saved else "(none yet)")


# 4. A full disk: one line, and the partial ckpt-N_temp is removed (a file-size limit stands in for the disk).
@pytest.mark.slow
def test_full_disk_is_one_line_and_leaves_no_partial_checkpoint(runs):
    proc, run, _ = runs[("full_disk",)]
    line = _error_line(proc, 1)
    assert "could not write checkpoint" in line and "ckpt-1" in line
    assert os.listdir(os.path.join(run, "checkpoints")) == []


# 5. SIGTERM / SIGINT: finish the step, save it, one line saying where to resume, exit 128 + signal.
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_at_the_next_step_and_says_where_to_resume(tmp_path, sig):
    run = str(tmp_path / "run")
    log = tmp_path / "log"
    with open(log, "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train_main.py"), *TINY, f"--model_dir={run}",
                                 "--max_steps=200", "--checkpoint_every=1000"], cwd=ROOT, stdout=out, stderr=err,
                                env=_ENV)
        deadline = time.time() + 300
        # A log file gets a progress line every few steps: the first one means the loop is running.
        while "pretrain " not in log.read_text() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(sig)
        code = proc.wait(timeout=300)
    stderr = (tmp_path / "err").read_text()
    assert code == 128 + sig, stderr[-3000:]
    assert "Traceback" not in stderr
    last = [x for x in stderr.splitlines() if x.strip()][-1]
    assert last.startswith(f"stopped by {signal.Signals(sig).name} after step ")
    step = int(last.split("after step ")[1].split("/")[0])
    saved = os.path.join(run, "checkpoints", f"ckpt-{step}")
    assert 0 < step < 200 and f"saved {saved};" in last and "resumes" in last
    assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints")) == saved
    reader = tf.train.load_checkpoint(saved)
    assert int(reader.get_tensor("state/optimizer/torch_sgd/iteration/.ATTRIBUTES/VARIABLE_VALUE".replace(
        "optimizer/torch_sgd/iteration", "optimizer.Storch_sgd.Siteration"))) == step


# 6. A symlink loop in a folder tree lists each file once, so no train image is also a test image.
def test_folder_symlink_loop_lists_every_file_once(tmp_path):
    root = tmp_path / "tree"
    for c in ("cat", "dog"):
        os.makedirs(root / c)
        src = f"/work/shared/data/cifar10-mini/train/{c}"
        for name in sorted(os.listdir(src))[:10]:
            shutil.copy(os.path.join(src, name), root / c / name)
        os.symlink("..", root / c / "loop")  # cat/loop -> tree: cat/loop/cat/loop/... and cat/loop/dog
    listed = [p for split in ("train", "val", "test") for p, _ in folder.files(str(root), split)]
    real = [os.path.realpath(p) for p in listed]
    assert len(real) == len(set(real)) == 20


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(RUN_JSON_CASES)))
def test_run_json_problems_are_one_line_naming_the_file(runs, case):
    content, expected = RUN_JSON_CASES[case]
    proc, _, path = runs[("json", case)]
    line = _error_line(proc, 2)
    assert path in line and expected in line
    if content is None:
        assert not os.path.exists(path)  # not rewritten to match other settings


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(BAD_FLAG_CASES)))
def test_bad_flag_exits_2_with_one_line(runs, case):
    _args, expected = BAD_FLAG_CASES[case]
    line = _error_line(runs[("flag", case)][0], 2)
    assert expected in line, line


def test_divergence_advice_names_the_flag_that_caused_it():
    assert "--lr" in advice(1e30, 256, 1.0) and "--augself_weight" not in advice(1e30, 256, 1.0)
    assert "--augself_weight" in advice(0.03, 256, 1e30) and "--lr" not in advice(0.03, 256, 1e30)
    assert "--lr" in advice(0.03, 256, 1.0)  # nothing out of range: the learning rate is the usual cause
    # Per-task weights (--augself=crop:1e30,color): the task's own weight is named; λ only while a task takes it.
    text = advice(0.03, 256, 1.0, {"crop": 1e30, "color": None})
    assert "crop:1e+30" in text and "--augself_weight" not in text and "--lr" not in text
    assert "--augself_weight" not in advice(0.03, 256, 1e30, {"crop": 1.0, "color": 0.5})  # no task takes λ
    assert "--augself_weight" in advice(0.03, 256, 1e30, {"crop": 1.0, "color": None})


# 9. A full permutation of the data every epoch, a function of (seed, epoch): resume stays exact.
def _epoch_indices(source, epochs: int, n: int, seed: int = 0, start_epoch: int = 0) -> list[np.ndarray]:
    """The example order of each of epochs [``start_epoch``, ``epochs``) of one stream (one batch of ``n`` each)."""
    rows, _ = source
    fake = ({**rows, "i": np.arange(n)}, lambda r: {"image": tf.zeros([8, 8, 3], tf.uint8), "label": r["i"]})
    from augself_tf.augment import AugmentConfig

    ds = make_pair_dataset(fake, AugmentConfig(image_size=8), seed=seed, batch_size=n, start_epoch=start_epoch,
                           num_epochs=epochs, shuffle_buffer=4)
    return [b["label"].numpy() for b in ds]


def test_folder_epochs_are_full_permutations_uncorrelated_and_replayable():
    rows, decode = folder.records("/work/shared/data/flowers17", "train")
    n = 200
    rows = {k: v[:n] for k, v in rows.items()}  # the records of the first 200 files: a few seconds per epoch
    # Epochs 0 and 1 of one stream, and epoch 1 of a stream rebuilt to start there, as a resume builds it (each
    # build traces the augment graph: two builds, not one per epoch).
    (e0, e1), (again,) = _epoch_indices((rows, decode), 2, n), _epoch_indices((rows, decode), 2, n, start_epoch=1)
    assert sorted(e0) == list(range(n)) and sorted(e1) == list(range(n))  # every image exactly once
    np.testing.assert_array_equal(e1, again)  # a function of (seed, epoch): a resumed stream replays it
    for epoch, order in enumerate((e0, e1)):
        np.testing.assert_array_equal(order, epoch_order(0, tf.constant(epoch, tf.int64), n).numpy())
    # With a 4-image buffer the old stream kept each image within a few places of its source position in
    # every epoch (correlation > 0.99); a fresh permutation is uncorrelated with the last.
    position = lambda order: np.argsort(order)  # noqa: E731
    assert abs(np.corrcoef(position(e0), position(e1))[0, 1]) < 0.2
    assert abs(np.corrcoef(np.arange(n), position(e0))[0, 1]) < 0.2


# 10. The lr logged at step s is the rate step s applied.
def test_logged_lr_is_the_rate_of_the_step_that_logged_it():
    model = make_model("simsiam", augself=())
    optimizer = build_optimizer(1.0, 256, total_steps=2)
    model.compile(optimizer=optimizer)
    optimizer.build(model.optimized_variables())
    data = batch(n=4, size=8)
    schedule = keras.optimizers.schedules.CosineDecay(1.0, decay_steps=2)
    for step in range(2):
        logs = model.train_step(data)
        assert float(logs["lr"]) == pytest.approx(float(schedule(step)))


def test_buffer_shuffled_sources_get_a_new_order_every_epoch():
    """tfds sources go through a shuffle buffer; its seed used to be the same for every epoch (one order for all)."""
    from augself_tf.augment import AugmentConfig

    n = 64
    source = tf.data.Dataset.range(n).map(lambda i: {"image": tf.zeros([8, 8, 3], tf.uint8), "label": i})

    def orders(start_epoch: int) -> list[np.ndarray]:
        ds = make_pair_dataset(source, AugmentConfig(image_size=8), seed=0, batch_size=n, start_epoch=start_epoch,
                               num_epochs=2, shuffle_buffer=n)
        return [b["label"].numpy() for b in ds]

    # Epochs 0 and 1 of one stream, then epoch 1 of a stream rebuilt to start there, as a resume builds it (each
    # build traces the augment graph: two builds, not one per epoch).
    (e0, e1), (again,) = orders(0), orders(1)
    assert sorted(e0) == list(range(n)) and sorted(e1) == list(range(n))
    assert not np.array_equal(e0, e1)
    np.testing.assert_array_equal(e1, again)
