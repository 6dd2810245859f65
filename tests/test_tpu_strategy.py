"""--strategy=tpu on a machine without a TPU: one error line naming what was tried, exit 2, quickly (no wait on a
GCE metadata server that is not there); float16 on a TPU is refused for bfloat16."""

from __future__ import annotations

import os
import sys
import time

import pytest
import tensorflow as tf
from program_runs import run_program

from augself_tf.runtime.strategy import STRATEGIES, TPU_ENVIRONMENT, make_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_TPU = pytest.mark.skipif(bool(tf.config.list_physical_devices("TPU")), reason="this machine has a TPU")


@NO_TPU
def test_no_tpu_name_and_no_tpu_device_is_one_value_error_without_a_lookup(monkeypatch):
    for name in TPU_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    assert "tpu" in STRATEGIES
    start = time.perf_counter()
    with pytest.raises(ValueError, match="no TPU found: --tpu is empty") as err:
        make_strategy("tpu")
    assert "\n" not in str(err.value) and "TPU_NAME" in str(err.value)
    assert time.perf_counter() - start < 5  # decided locally: no resolver, no network


@NO_TPU
@pytest.mark.slow
def test_train_main_strategy_tpu_exits_2_with_one_line():
    """The command lines a user would try, each its own process after one shared import (tests/program_runs.py)."""
    env = {k: v for k, v in os.environ.items() if k not in TPU_ENVIRONMENT}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    cases = {
        "unset": (["--strategy=tpu"], "no TPU found: --tpu is empty"),
        "local": (["--strategy=tpu", "--tpu=local"], "no TPU found (--tpu=local)"),
        "float16": (["--strategy=tpu", "--mixed_precision=float16"], "use --mixed_precision=bfloat16"),
    }
    start = time.perf_counter()
    procs = run_program(os.path.join(ROOT, "train_main.py"), [args + ["--model_dir=/nonexistent/tpu_run"]
                                                              for args, _ in cases.values()],
                        cwd=ROOT, env=env, timeout=300)
    for (name, (_, expected)), proc in zip(cases.items(), procs, strict=True):
        assert proc.returncode == 2, (name, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, proc.stderr[-2000:])
        assert expected in lines[0], (name, lines[0])
    assert not os.path.exists("/nonexistent/tpu_run")
    print(f"{len(cases)} command lines in {time.perf_counter() - start:.1f} s", file=sys.stderr)
