"""Values the tests pinned under oneDNN's CPU kernels, computed under them whichever kernels this process runs.

TensorFlow turns oneDNN on by itself only on x86 CPUs with AVX-512; elsewhere its Eigen kernels round some image
ops differently, so a pinned batch digest would name the host rather than the pipeline. A process cannot switch
kernels once TensorFlow has loaded, and turning oneDNN on for every test process is not safe: on an AVX2-only host
(AMD Zen 3) it corrupted the heap in an in-process training test (glibc: "malloc_consolidate(): invalid chunk size",
gone with TF_ENABLE_ONEDNN_OPTS=0). So only the pinned computation moves to a oneDNN process, and only when needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache

TESTS = os.path.dirname(os.path.abspath(__file__))
_MARK = "ONEDNN-RESULT "
# The child sets TensorFlow up as conftest does for a test process (Grappler off, 2 logical CPUs): the pinned
# values were taken in such a process.
_CHILD = f"""
import importlib, json, sys
sys.path[:0] = [{TESTS!r}, {os.path.dirname(TESTS)!r}]
import conftest
conftest._set_up_tensorflow()
module, function, args = json.loads(sys.argv[1])
print({_MARK!r} + json.dumps(getattr(importlib.import_module(module), function)(*args)))
"""


def onednn_in_this_process() -> bool:
    """Whether this process's TensorFlow runs oneDNN's CPU kernels."""
    from tensorflow.python.util import _pywrap_util_port  # private (TF 2.21): TensorFlow has no public query

    return bool(_pywrap_util_port.IsMklEnabled())


@cache
def under_onednn(module: str, function: str, *args):
    """``module.function(*args)`` (JSON arguments and result) run under oneDNN's kernels: here when this process
    has them, else in a child Python started with ``TF_ENABLE_ONEDNN_OPTS=1``. Cached: one child per distinct
    call."""
    if onednn_in_this_process():
        import importlib

        # Through JSON as the child's result comes (tuples become lists), so both paths compare alike.
        return json.loads(json.dumps(getattr(importlib.import_module(module), function)(*args)))
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([module, function, list(args)])], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    assert done.returncode == 0 and lines, f"the oneDNN child failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len(_MARK):])
