"""The CPU-scale reproduction of the paper's effect and the scripts that make the docs' result pictures.

``reproduce_small.py`` runs the arms and writes docs/results.md from the committed ledger ``ledger/`` (one JSON
entry per finished arm; ``ledger.py`` defines the arms, the entries and the report, ``ledger_runner.py`` runs
them); ``sweep.py`` runs λ / colour-strength sweeps (docs/analyses.md); ``plot_monitors.py`` draws the monitor
curves of runs (docs/monitors.md). Each runs from the repository root as ``python reproduce/<script>.py``
(its siblings then import as top-level modules) or as ``python -m reproduce.<script>``; tests import
``reproduce.ledger`` and ``reproduce.ledger_runner``. A new arm is a line in ``ledger.default_arms`` and, once
run, a new file in ``ledger/``. Timing benchmarks are in bench/, the PyTorch parity harness in bench/parity/.
"""
