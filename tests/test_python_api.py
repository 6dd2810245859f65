"""The Python API: docs/python-api.md's code runs as written, and ``import augself_tf`` stays light.

Each python block of the page runs in a fresh interpreter in a scratch directory (as a user pastes it into a
file: the two-replica block sets its logical devices before TensorFlow starts), with this checkout first on the
path.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "python-api.md")
_ENV = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"}


def python_blocks() -> list[str]:
    with open(PAGE, encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)


def _run(code: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_ENV, capture_output=True, text=True,
                          timeout=900)


def test_the_package_imports_no_tensorflow_and_names_resolve_to_the_librarys_objects():
    out = _run("import sys, augself_tf as at; assert 'tensorflow' not in sys.modules, 'TensorFlow imported';"
               "from augself_tf.training.loop import train;"
               "assert at.pretrain is train and at.TrainConfig.__name__ == 'TrainConfig';"
               "assert set(at.__all__) <= set(dir(at));"
               "print(len(at.__all__))", REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == 12
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        import augself_tf

        augself_tf.nothing  # noqa: B018


def test_the_page_has_its_three_examples():
    blocks = python_blocks()
    assert len(blocks) == 3
    assert "at.pretrain(" in blocks[0] and "at.evaluate_backbone(" in blocks[0]
    assert all(".fit(" in b and "TensorBoard(" in b for b in blocks[1:]) and "MirroredStrategy" in blocks[2]


@pytest.mark.slow  # whole training runs (docs/development.md): the page's code as a user runs it
def test_the_train_evaluate_example_runs_as_written(tmp_path):
    out = _run(python_blocks()[0], str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()  # the run's own progress lines, then the example's prints
    assert [x for x in lines if re.fullmatch(r"20 steps, last loss \d+\.\d+", x)], out.stdout[-2000:]
    records = [x for x in lines if re.fullmatch(r"linear shapes top1_% \d+\.\d ± \d+\.\d", x)]
    assert len(records) == 1, out.stdout[-2000:]
    assert os.path.isdir(tmp_path / "runs" / "api_moco" / "checkpoints")


@pytest.mark.slow
@pytest.mark.parametrize("block", [1, 2], ids=["one_device", "two_cpu_replicas"])
def test_the_fit_examples_train_and_write_tensorboard_events(tmp_path, block):
    out = _run(python_blocks()[block], str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    losses = ast.literal_eval(out.stdout.strip().splitlines()[-1])  # the example's printed dict
    assert {"loss/total", "loss/method", "loss/augself"} <= set(losses)
    assert all(isinstance(v, float) and v == v for v in losses.values())  # finite numbers, not NaN
    run = tmp_path / "runs" / ("api_fit" if block == 1 else "api_fit2") / "tensorboard" / "train"
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(run))
