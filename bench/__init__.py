"""Timing benchmarks (``bench_*.py``, figures in docs/benchmarks.md; shared helpers in ``common.py``) and, in
``parity/``, the step parity harness against the reference semantics in PyTorch. A benchmark runs as
``python bench/<script>.py`` (its siblings import as top-level modules then); the parity harness, which imports
``bench.common``, as ``python -m bench.parity.parity``. The reproduction is in reproduce/."""
