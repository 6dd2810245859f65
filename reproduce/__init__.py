"""The CPU-scale reproduction of the paper's effect and the scripts that make the docs' result pictures.

``reproduce_small.py`` runs the arms and writes docs/results.md from the committed ledger ``ledger/`` (one JSON
entry per finished arm). Its modules, one job each: ``arm_settings.py`` (what an arm is, its settings and id),
``main_arms.py``, ``looc_arms.py`` and ``aware_arms.py`` (the three arm sets), ``ledger.py`` (the entries:
reading, writing, making them portable), ``main_report.py``, ``looc_report.py`` and ``aware_report.py`` (each
suite's block of docs/results.md, built from ``seed_cells.py``, ``report_parts.py``, ``wall_table.py`` and
``doc_blocks.py``), ``ledger_runner.py`` (running arms into the ledger,
with ``run_directory.py``, ``child_process.py``, ``provenance.py`` and ``time_estimates.py``) and
``step_times.py`` (``--time_steps``). ``sweep.py`` runs λ / colour-strength sweeps (docs/analyses.md);
``plot_monitors.py`` draws the monitor curves of runs (docs/monitors.md). Each script runs from the checkout's
root as ``python -m reproduce.<script>``; ``augself-reproduce`` is ``reproduce_small``'s command (an editable
install, ``pip install -e .``); every module imports its siblings as ``reproduce.<module>``, as tests do. A new
arm is a line in ``main_arms.default_arms`` (or ``looc_arms.looc_table_arms``) and, once run, a new file in
``ledger/``. Timing benchmarks are in bench/, the PyTorch parity harness in bench/parity/.
"""
