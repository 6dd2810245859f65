"""The protocol registry seen from eval_main: a toy protocol added in one file plus one dict line, and
eval_main's progress output (one line per regularisation sweep; ``--verbose`` for every value)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import eval_fakes
import eval_toy_protocol
import pytest

from augself_tf.evaluation.extraction import FeatureExtractor
from augself_tf.evaluation.loading import load_model
from augself_tf.evaluation.protocols import PROTOCOLS, all_protocols

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")

# What a user's program does to add a protocol without editing the package: register it, then run the eval
# program, whose flags are defined when it is imported. The program sits beside its protocol module (run in TESTS).
DRIVER = """
from augself_tf.startup import import_tensorflow_quietly
import_tensorflow_quietly()
from augself_tf.evaluation.protocols import PROTOCOLS
import eval_toy_protocol
PROTOCOLS["featdim"] = eval_toy_protocol.PROTOCOL  # the one registry line
from augself_tf import evaluate
evaluate.cli()
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return eval_fakes.save_random_conv_model(str(tmp_path_factory.mktemp("m") / "rand" / "saved_model"), channels=8)


def _run(argv: list[str], cwd: str = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # start-up notices as users see them
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=cwd)


def test_a_registered_protocol_is_in_all_and_gets_its_flags(monkeypatch):
    monkeypatch.setitem(PROTOCOLS, "featdim", eval_toy_protocol.PROTOCOL)
    assert all_protocols()[-1] == "featdim"
    assert "colorinfo" not in all_protocols()  # the analyses run only when named


@pytest.mark.slow
def test_toy_protocol_runs_through_eval_main(model, tmp_path):
    out = str(tmp_path / "results.json")
    proc = _run([sys.executable, "-c", DRIVER, f"--saved_model={model}", "--protocol=linear,featdim",
                 "--dataset=shapes", "--image_size=32", "--max_examples=60", "--linear_max_iter=100",
                 "--featdim_scale=3", f"--output={out}"], cwd=TESTS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by = {r["protocol"]: r for r in json.load(open(out))}
    assert by["featdim"]["value"] == 3 * 16  # the random conv model: mean and max of 8 channels
    assert by["featdim"]["n_test"] == 60 and by["featdim"]["settings"]["scale"] == 3.0
    assert "| featdim | shapes | dims | 48.00000 |" in proc.stdout
    # Progress for people: one line for the 45-value sweep of the linear protocol, not 45.
    lines = proc.stderr.splitlines()
    assert sum("sweep: 45 regs" in ln for ln in lines) == 1
    assert not any("reg=" in ln for ln in lines)
    assert len(json.load(open(out))[0]["settings"]["sweep"]) == 45  # the full sweep stays in the JSON


@pytest.mark.slow
def test_verbose_restores_the_full_sweep_and_startup_is_quiet(model, tmp_path):
    proc = _run([sys.executable, os.path.join(REPO, "eval_main.py"), f"--saved_model={model}", "--protocol=linear",
                 "--dataset=shapes", "--image_size=32", "--max_examples=60", "--linear_max_iter=100", "--verbose",
                 f"--output={tmp_path / 'r.json'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert sum(ln.strip().startswith("reg=") for ln in lines) == 45
    assert sum("sweep: 45 regs" in ln for ln in lines) == 1
    assert not any("oneDNN custom operations" in ln or "absl::InitializeLog" in ln for ln in lines)


def test_a_long_extraction_shows_a_progress_bar(model):
    data = eval_fakes.rectangle_images(50, size=16, seed=0)
    access = eval_fakes.MemorySources({"rect": {"train": data, "test": data}})
    lines: list[str] = []
    stream = io.StringIO()  # not a terminal: plain progress lines
    kw = dict(image_size=16, batch_size=8, max_examples=40, log=lines.append, progress_stream=stream)
    loaded = load_model(model)
    short = FeatureExtractor(access.load, bar_after=1e9, **kw).extract(loaded, "rect", "train")
    assert len(short) == 40 and stream.getvalue() == ""  # a short extraction prints its one line only
    FeatureExtractor(access.load, bar_after=0.0, **kw).extract(loaded, "rect", "train")  # "long" from the start
    bar = stream.getvalue().splitlines()
    assert len(bar) == 5 and bar[-1].startswith("[features] rand rect/train  40/40 (100%)")  # 5 batches of 8
    assert [ln.split(" in ")[0] for ln in lines] == ["[features] rand rect/train: 40 images"] * 2
