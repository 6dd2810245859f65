"""Benchmarks and the small reproduction. Scripts run as ``python bench/<script>.py`` (their siblings import
as top-level modules then) or, for reproduce_small, ``python -m bench.reproduce_small``; tests import
``bench.ledger`` and ``bench.ledger_runner`` from the repository root."""
