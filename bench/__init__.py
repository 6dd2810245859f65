"""Timing benchmarks (``bench_*.py``, figures in docs/benchmarks.md; shared helpers in ``common.py``; a benchmark
of several parts keeps them beside it, named after it: ``device_stage_*.py``, ``cpu_step_*.py``) and, in
``parity/``, the step parity harness against the reference semantics in PyTorch. A benchmark runs as
``python bench/<script>.py`` (its siblings import as top-level modules then); the parity harness, which imports
``bench.common``, as ``python -m bench.parity.parity``. The reproduction is in reproduce/."""
