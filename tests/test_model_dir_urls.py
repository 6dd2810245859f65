"""A ``--model_dir`` that is a tf.io.gfile URL (``gs://`` on a TPU pod) works end to end: run.json, checkpoints and
their repair, the resume, the export, and augself-eval reading it and writing its results under a URL. TensorFlow's
in-memory ``ram://`` file system stands in for GCS (in this process only: everything runs in-process)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_export_is_the_backbone, replace_config, tiny_run

from augself_tf.runtime import files, run_lock
from augself_tf.training.checkpoint_files import intact_checkpoint
from augself_tf.training.loop import train

gfile = tf.io.gfile
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: A staged run.json and checkpoint index never renamed, an export's new tree killed before its saved_model.pb; and
#: a user's file.
LEFTOVERS = ("run.json.tmp-0123abcd", "checkpoints/checkpoint.tmp-deadbeef",
             ".saved_model.tmp-89abcdef/variables/variables.index")
KEPT = "notes.tmp-mine"


@pytest.fixture(scope="module")
def runs():
    """Two calls of ``train`` on one ram:// model_dir: 2 steps without an export, then resumed to 4 and exported;
    {"dir", "first", "second", "log"} (the second call's printed lines)."""
    model_dir = f"ram://model_dir_urls_{uuid.uuid4().hex}/run"
    cfg = tiny_run(model_dir, max_steps=2, checkpoint_every=2, export=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_lock, "SETTLE_SECONDS", 0.01)  # the lock's read-back wait on a URL
        first = train(cfg)
        run_json = files.read_text(f"{model_dir}/run.json")  # as the first run left it
        for name in LEFTOVERS:  # what a run killed mid-write leaves (an export's tree is made as a directory)
            files.makedirs(files.parent(f"{model_dir}/{name}"))
            files.write_text(f"{model_dir}/{name}", "half-written")
        files.write_text(f"{model_dir}/{KEPT}", "mine")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            second = train(replace_config(cfg, max_steps=4, export=True, verbose=1))
    return {"dir": model_dir, "first": first, "second": second, "run_json": run_json, "log": out.getvalue(),
            "cfg": replace_config(cfg, max_steps=4, export=True)}


def test_run_json_and_checkpoints_are_written_under_the_url(runs):
    d = runs["dir"]
    assert runs["first"].model_dir == d and runs["first"].steps == 2
    recorded = json.loads(runs["run_json"])
    assert recorded["model"]["method"] == "moco"
    assert json.loads(files.read_text(f"{d}/run.json")) == recorded  # the resume found it equal: not rewritten
    names = gfile.listdir(f"{d}/checkpoints")
    assert {"ckpt-2.index", "ckpt-4.index", "checkpoint"} <= set(names)
    assert not [n for n in names if ".tmp" in n or n.endswith("_temp")]  # no staging file left
    state = tf.train.get_checkpoint_state(f"{d}/checkpoints")
    assert os.path.basename(state.model_checkpoint_path) == "ckpt-4"
    assert gfile.listdir(f"{d}/tensorboard")


def test_a_second_call_resumes_at_the_step_the_first_stopped(runs):
    d = runs["dir"]
    assert f"Resumed from {d}/checkpoints/ckpt-2" in runs["log"], runs["log"][-2000:]
    assert runs["second"].steps == 4
    assert intact_checkpoint(f"{d}/checkpoints", print) == f"{d}/checkpoints/ckpt-4"


def test_the_resume_removes_what_a_killed_run_left_half_written_and_nothing_else(runs):
    d = runs["dir"]
    assert ("Removed what a killed run left half-written in " + d + ": .saved_model.tmp-89abcdef, "
            "run.json.tmp-0123abcd, checkpoints/checkpoint.tmp-deadbeef") in runs["log"], runs["log"][-2000:]
    assert "Put back" not in runs["log"]
    assert not [n for n in LEFTOVERS if gfile.exists(f"{d}/{n}")]
    assert not gfile.exists(f"{d}/.saved_model.tmp-89abcdef")
    assert files.read_text(f"{d}/{KEPT}") == "mine"


def test_leftovers_on_a_local_path(tmp_path):
    (tmp_path / ".saved_model.old-0a1b2c3d").mkdir()
    (tmp_path / ".saved_model.old-0a1b2c3d" / "saved_model.pb").write_text("old export")
    (tmp_path / "saved_model").mkdir()  # the export is in place: its old tree is only left over
    (tmp_path / "run.lock.tmp-00ff00ff").write_text("{}")
    kept = ("run.json", "run.json.tmp", "saved_model.tmp-0a1b2c3d9", "notes.tmp-ABCDEF12")
    for name in kept:
        (tmp_path / name).write_text("kept")
    assert files.remove_leftovers(str(tmp_path)) == ([".saved_model.old-0a1b2c3d", "run.lock.tmp-00ff00ff"], [])
    assert sorted(os.listdir(tmp_path)) == sorted((*kept, "saved_model"))
    assert files.remove_leftovers(str(tmp_path / "absent")) == ([], [])


@pytest.mark.parametrize("where", ["local", "url"])
def test_a_kill_between_the_exports_two_renames_puts_the_finished_new_export_back(tmp_path, where):
    d = str(tmp_path) if where == "local" else f"ram://model_dir_urls_{uuid.uuid4().hex}/run"
    for tree, text in ((".saved_model.old-0a1b2c3d", "old"), (".saved_model.tmp-4e5f6a7b", "new"),
                       (".saved_model_precise_bn.tmp-11223344", "unfinished")):
        files.makedirs(f"{d}/{tree}/variables")
        files.write_text(f"{d}/{tree}/variables/variables.index", text)
        if text != "unfinished":
            files.write_text(f"{d}/{tree}/saved_model.pb", text)
    removed, restored = files.remove_leftovers(d)
    assert restored == ["saved_model from .saved_model.tmp-4e5f6a7b"]
    assert removed == [".saved_model.old-0a1b2c3d", ".saved_model_precise_bn.tmp-11223344"]
    assert files.read_text(f"{d}/saved_model/saved_model.pb") == "new"
    assert files.read_text(f"{d}/saved_model/variables/variables.index") == "new"
    assert sorted(files.listdir(d)) == ["saved_model"]


def test_the_export_is_written_under_the_url_loads_and_a_rerun_replaces_it(runs):
    d, result = runs["dir"], runs["second"]
    assert result.saved_model_dir == f"{d}/saved_model"
    assert gfile.exists(f"{d}/saved_model/saved_model.pb")
    assert_export_is_the_backbone(result)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_lock, "SETTLE_SECONDS", 0.01)
        again = train(runs["cfg"])  # trained already: exported again, over the first export
    assert again.steps == 4 and again.saved_model_dir == result.saved_model_dir
    assert [n for n in gfile.listdir(d) if n.startswith(".saved_model")] == []  # no staging directory left
    assert_export_is_the_backbone(again)


def test_the_evaluation_reads_the_export_and_writes_its_results_under_the_url(runs):
    """augself-eval's library path in this process (the program itself defines absl flags that augself-train's
    share: it runs in a process of its own below)."""
    from augself_tf.evaluation.context import EvalContext, EvalSettings
    from augself_tf.evaluation.datasets import DataAccess
    from augself_tf.evaluation.loading import load_model
    from augself_tf.evaluation.protocols import run_protocol
    from augself_tf.evaluation.report import markdown_table, save_records
    from augself_tf.runtime.tensorboard import log_eval_records

    d = runs["dir"]
    model = load_model(d)  # the run's directory: its saved_model found inside, named after the run
    assert (model.path, model.name) == (f"{d}/saved_model", "run")
    context = EvalContext(EvalSettings(image_size=16, max_examples=64, output_dir=f"{d}/eval"), DataAccess(None))
    records = [*run_protocol(context, model, "linear", "shapes"), *run_protocol(context, model, "retrieval", "shapes")]
    assert save_records(records, f"{d}/eval/results.json") == json.loads(files.read_text(f"{d}/eval/results.json"))
    files.write_text(f"{d}/eval/results.md", markdown_table(records))
    assert "| run |" in files.read_text(f"{d}/eval/results.md")
    figures = [n for n in gfile.listdir(f"{d}/eval") if n.endswith(".png")]
    assert figures and gfile.GFile(f"{d}/eval/{figures[0]}", "rb").read(4) == b"\x89PNG"
    assert log_eval_records(d, records) == f"{d}/tensorboard/eval" and gfile.listdir(f"{d}/tensorboard/eval")


# augself-eval itself, in a fresh process: a ram:// export of a small backbone, then the program's command line
# with its results, their table, a figure and --log_to=auto's events all under ram://.
EVAL_CLI = """
import json, sys
import keras, tensorflow as tf
from augself_tf.export.saved_model import export_backbone
d = sys.argv[1]
x = keras.Input([None, None, 3])
backbone = keras.Model(x, keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3)(x)))
export_backbone(backbone, d + "/saved_model")
from augself_tf import evaluate
out = d + "/out/results.json"
sys.argv = ["augself-eval", "--saved_model=" + d + "/saved_model", "--protocol=linear,retrieval", "--dataset=shapes",
            "--image_size=16", "--max_examples=64", "--linear_regs=1", "--output=" + out, "--log_to=auto", "--quiet"]
try:
    evaluate.cli()
except SystemExit as e:
    assert not e.code, e.code
g = tf.io.gfile
print(json.dumps({"default": evaluate.default_output(d + "/saved_model"), "records": json.loads(g.GFile(out).read()),
                  "md": g.GFile(d + "/out/results.md").read(), "out": sorted(g.listdir(d + "/out")),
                  "events": [n for n in g.listdir(d + "/eval") if n.startswith("events.out")]}))
"""


def test_augself_eval_reads_a_url_export_and_writes_its_output_under_the_url():
    d = f"ram://model_dir_urls_{uuid.uuid4().hex}/run"
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", EVAL_CLI, d], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["default"] == f"{d}/eval/results.json"
    assert {(r["model"], r["protocol"]) for r in seen["records"]} == {("run", "linear"), ("run", "retrieval")}
    assert np.isfinite([r["value"] for r in seen["records"]]).all()
    assert "| protocol | dataset | metric | run | paper |" in seen["md"]
    assert "results.md" in seen["out"] and [n for n in seen["out"] if n.endswith(".png")]
    assert seen["events"]  # --log_to=auto: the run's TensorBoard (its directory, no tensorboard/ there), under the URL


def test_url_paths_and_replacing_a_file():
    assert files.absolute("gs://bucket/run/") == "gs://bucket/run" and files.absolute("gs://bucket") == "gs://bucket"
    assert files.parent("gs://bucket/run/saved_model") == "gs://bucket/run"
    assert files.absolute("run") == os.path.abspath("run") and files.parent("a/b") == os.path.abspath("a")
    path = f"ram://model_dir_urls_{uuid.uuid4().hex}/run.json"
    files.replace_text(path, "a longer first text")
    files.replace_text(path, "second")  # ram:// appends to an existing file: the staged write must not
    assert files.read_text(path) == "second"
    assert gfile.listdir(path.rsplit("/", 1)[0]) == ["run.json"]
    with pytest.raises(FileNotFoundError):
        files.read_text(path + ".missing")
