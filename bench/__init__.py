"""Timing benchmarks (``bench_*.py``, figures in docs/benchmarks.md; shared helpers in ``common.py``; a benchmark
of several parts keeps them beside it, named after it: ``device_stage_*.py``, ``cpu_step_*.py``) and, in
``parity/``, the step parity harness against the reference semantics in PyTorch. Each runs from the checkout's
root as a module, ``python -m bench.<script>`` (the harness: ``python -m bench.parity.parity``), so that it
imports this checkout's augself_tf and its siblings as ``bench.<module>``. The reproduction is in reproduce/."""

import os

from augself_tf.startup import pool_host_memory

# Every benchmark imports this package before its own module, and so before TensorFlow: quiet its C++ logging, and
# take the host allocator train_main takes (so an in-process step is timed as users run it).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pool_host_memory()
