"""Progress output: a redrawn bar on a terminal, a few dozen plain lines in a log file, and a quiet start-up."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from augself_tf.progress import MAX_LINE_LINES, Progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_log_file_gets_one_plain_line_every_n_units_and_the_last():
    out = io.StringIO()  # not a terminal
    bar = Progress(1000, "features", unit="img", stream=out)
    for done in range(1, 1001):
        bar.update(done, {"loss": 1.0 / done})
    lines = out.getvalue().splitlines()
    assert len(lines) == MAX_LINE_LINES
    assert "\r" not in out.getvalue() and "\b" not in out.getvalue()
    assert lines[0].split()[:3] == ["features", "20/1000", "(2%)"]
    assert lines[-1].split()[:3] == ["features", "1000/1000", "(100%)"]
    assert "loss 0.0010" in lines[-1] and "ETA" not in lines[-1]


def test_terminal_redraws_one_line_in_place_and_ends_it():
    out = io.StringIO()
    bar = Progress(10, "pretrain", stream=out, terminal=True, redraw_seconds=0.0)
    for done in range(1, 11):
        bar.update(done)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.count("\r") == 10
    assert "[" + "=" * 24 + "]" in text.splitlines()[-1].split("\r")[-1]


def test_disabled_writes_nothing_and_close_ends_an_unfinished_bar():
    out = io.StringIO()
    with Progress(5, "x", stream=out, enabled=False) as bar:
        bar.update(3)
    assert out.getvalue() == ""
    with Progress(5, "x", stream=out, terminal=True, redraw_seconds=0.0) as bar:
        bar.update(3)
    assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1


@pytest.mark.slow
def test_train_main_log_file_is_readable(tmp_path):
    """stdout and stderr to a file, as under nohup: bounded line count and width, no redraws, no notices."""
    log_path = tmp_path / "train.log"
    cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), "--method=simsiam", "--dataset=shapes",
           "--split=test", "--width=0.0625", "--image_size=16", "--batch_size=16", "--max_steps=120",
           "--log_every=1", "--noexport", f"--model_dir={tmp_path / 'run'}"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    with open(log_path, "w") as log:
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600).returncode
    text = log_path.read_text()
    assert code == 0, text[-3000:]
    lines = text.splitlines()
    progress = [line for line in lines if line.startswith("pretrain ")]
    assert len(progress) == 40 and progress[-1].split()[1] == "120/120", progress
    assert len(lines) <= MAX_LINE_LINES + 15, text
    widths = [len(line.replace(str(tmp_path), "DIR")) for line in lines]  # paths are as long as they are
    assert max(widths) <= 120, lines[widths.index(max(widths))]
    assert "\r" not in text and "\b" not in text and "\x1b[" not in text
    assert "oneDNN" not in text and "absl::InitializeLog" not in text, text[:2000]
