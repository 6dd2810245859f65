"""Test session setup: quiet TensorFlow, and split the CPU into 2 logical devices before TF starts so the
multi-replica (MirroredStrategy) paths run without GPUs."""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if TYPE_CHECKING:
    import tensorflow as tf


def _set_up_tensorflow() -> None:
    """The test processes' TensorFlow: one intra-op thread, Grappler off, one shared op traceback, the CPU split
    into 2 logical devices.

    Run from pytest_configure, before any test module imports TensorFlow, in every process that runs tests; not in
    pytest-xdist's controller, which only hands out tests (importing TensorFlow there cost ~5 s before the workers
    started)."""
    import tensorflow as tf

    # One intra-op thread in the test processes themselves; their train_main children keep TensorFlow's default.
    # Idle clean-clone runs (`PYTEST_ADDOPTS=--durations=0 time bash .ci/run`, pytest's own wall time): none, 14 min
    # 12 s (484db9f) and 16 min 31 s (6a51f7c); one thread for every process (TF_NUM_INTRAOP_THREADS=1), 14 min 34 s:
    # the in-process files faster, the children slower; this setting, 14 min 14 s (12ddedf). Runs of one setting
    # differ by two minutes, so its gain is not established; it is kept because its run is within 2 s of the better
    # run without it and 2 min faster than the other (test_flagfiles, all in-process: 178 and 207 s with one thread,
    # 191 and 243 s without).
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow already started (a caller's own setup): keep its pools
        pass
    # Grappler (TensorFlow's graph optimizer, run on each traced function before its first call) off in the test
    # processes. Optimizing a tiny model's step costs more than the step itself: a 2-replica step's first call took
    # 1.3-1.5 CPU s with it and 0.7 without. It rewrites a traced graph into an equivalent one (fusions, constant
    # folding, pruning), so a loss, a gradient or a weight a test checks is what the traced step computes either
    # way, to round-off; what a test traces (ops, devices, collectives) is untouched, since Grappler runs after
    # tracing. Tests about what production runs on an accelerator (XLA's clusters and HLO, host-op placement) take
    # `production_graph_optimizer`, TensorFlow's default; train_main children always run with it.
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    _shared_op_traceback()
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    except RuntimeError:
        pass


def _shared_op_traceback() -> None:
    """Every graph op gets one shared Python stack trace, taken here, instead of the stack at its creation (which
    TensorFlow records for the "defined at" lines of an error raised when a graph runs). Under pytest a trace walks
    60 to 150 frames, some 35 us per op, and the tests trace millions of ops: 6% of the fast tier's CPU in a
    one-process profile; test_condition_kinds took 30 CPU s with the shared trace and 33 to 37 without. What a graph
    computes does not depend on it. (An empty trace would do as well but for XLA: its bridge crashes on one.) Set
    AUGSELF_TEST_OP_TRACEBACKS=1 for the real traces while debugging a test's graph error. Private API (TF 2.21
    framework/ops.py takes the trace through its module global ``tf_stack``): if it moves, tests only run slower."""
    if os.environ.get("AUGSELF_TEST_OP_TRACEBACKS") == "1":
        return
    from tensorflow.python.framework import ops
    from tensorflow.python.util import tf_stack

    if not callable(getattr(getattr(ops, "tf_stack", None), "extract_stack", None)):
        return
    shared = tf_stack.extract_stack()

    class _SharedTrace:
        @staticmethod
        def extract_stack(stacklevel: int = 1):
            return shared

    ops.tf_stack = _SharedTrace


@pytest.fixture
def production_graph_optimizer():
    """TensorFlow's default graph optimization (Grappler on) for one test, as production runs it."""
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    yield
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def mirrored_cpus(reduction: str = "one_device", merge_call: bool = True) -> tf.distribute.MirroredStrategy:
    """A MirroredStrategy over the two logical CPUs split above (the multi-replica path without GPUs).

    ``reduction``: ``"one_device"`` (ReductionToOneDevice, what ``--cpu_replicas`` runs) or ``"collective"``
    (the strategy's default on logical CPUs: CollectiveAllReduce, ring all-reduces, the GPUs' kind of reduction).
    ``merge_call=False``: the strategy runs replica functions without merge_call, as it does on GPUs for an
    XLA-compiled replica function; replica-context reductions then go through its collectives.
    """
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "conftest could not split the CPU into 2 logical devices"
    assert reduction in ("one_device", "collective"), reduction
    # Collective instance keys count from the strategy's key base, and the runtime keeps each key's first shape:
    # a second strategy in this process starting from the same base fails with "Shape mismatch in the collective
    # instance". TF's own tests move the base the same way (strategy_combinations.py).
    tf.distribute.MirroredStrategy._collective_key_base += 100_000
    ops = tf.distribute.ReductionToOneDevice() if reduction == "one_device" else None
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    if not merge_call:
        # Private API (TF 2.21 mirrored_strategy.py): fail loudly if it is renamed rather than test the wrong path.
        assert callable(getattr(strategy.extended, "_use_merge_call", None)), "TF no longer has _use_merge_call"
        strategy.extended._use_merge_call = lambda: False
    return strategy


# The fast tier runs each per-method sweep on these methods; the slow tier on every method. Between them they hold
# the two kinds of state a step writes besides the weights: a predictor at constant lr (SimSiam), a momentum encoder
# with a queue filled from a gathered key batch (MoCo; LooC's queue per embedding space is the same mechanism, and
# tests/test_methods_looc.py runs its 2-replica step in the fast tier).
FAST_METHODS = ("simsiam", "moco")


def each_method(methods) -> list:
    """`methods` as pytest parameters, those outside FAST_METHODS marked slow (docs/development.md)."""
    return [m if m in FAST_METHODS else pytest.param(m, marks=pytest.mark.slow) for m in methods]


# The files that take longest, heaviest first, per tier (measured with --durations=0 on the 2-core machine).
# pytest-xdist's `--dist loadfile` hands each worker whole files in collection order once the reorder below is
# off; its default reorder sends files with the most tests first, so the files of one or a few long runs (kill -9
# resumes, two-worker training, the rerun check) used to start last and run alone at the end, the other worker
# idle. Longest first keeps the tail short. A file missing here runs after these, in its usual order; a stale order
# costs only balance, never a test.
HEAVIEST_FIRST = (  # the slow tier, and both tiers in one run: by each file's seconds in the slow tier
    "test_resume.py",
    "test_flagfiles.py",
    "test_faults.py",
    "test_multiworker.py",
    "test_worker_agreement.py",
    "test_run_lock.py",
    "test_methods_base.py",
    "test_accelerator_path.py",
    "test_determinism.py",
    "test_install.py",
    "test_reproduce_small.py",
    "test_pair_stream.py",
    "test_eval_omega_probe.py",
    "test_device_stage.py",
    "test_conditioning.py",
    "test_views.py",
    "test_host_ops.py",
    "test_analyses.py",
    "test_training.py",
    "test_monitors.py",
    "test_mixed_precision.py",
    "test_eval_e2e.py",
    "test_checkpoints.py",
    "test_augment.py",
    "test_methods_looc.py",
    "test_progress.py",
)
# The fast tier (`-m "not slow"`) by its own CPU seconds (files of 5 s or more; per-test process time in one
# process on the 2-core AMD EPYC, 1112 tests), test_objectives_stl and test_views moved up for their oneDNN child
# (STL's about 20 s: its file's CPU time less its tests'). The files added since the last order (DINO, MoCo v3, the
# ViT's) ran after every listed one.
HEAVIEST_FIRST_FAST = (
    "test_accelerator_path.py",
    "test_device_stage.py",
    "test_objectives_essl.py",
    "test_methods_base.py",
    "test_objectives_stl.py",
    "test_views.py",
    "test_condition_kinds.py",
    "test_analyses.py",
    "test_selfcheck.py",
    "test_methods_dino.py",
    "test_pair_stream.py",
    "test_eval_omega_probe.py",
    "test_augment.py",
    "test_objectives_equimod.py",
    "test_host_ops.py",
    "test_methods_mocov3.py",
    "test_vit_training.py",
    "test_conditioning.py",
    "test_monitors.py",
    "test_eval_e2e.py",
    "test_saved_model_compat.py",
    "test_methods_looc.py",
    "test_resume.py",
    "test_vit.py",
    "test_crop_sampler.py",
    "test_loss_scale.py",
    "test_objectives.py",
    "test_faults.py",
    "test_checkpoints.py",
    "test_catalog.py",
    "test_torch_optimizers.py",
    "test_methods_momentum.py",
    "test_data_sources.py",
    "test_flagfiles.py",
    "test_eval_lowshot.py",
    "test_methods_moco.py",
    "test_mixed_precision.py",
    "test_package_layout.py",
    "test_resnet_reference.py",
    "test_batch_norm.py",
    "test_eval.py",
)


def pytest_configure(config) -> None:
    """TensorFlow set up where tests run (not in pytest-xdist's controller); under pytest-xdist, files scheduled in
    collection order (see HEAVIEST_FIRST and HEAVIEST_FIRST_FAST)."""
    controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not controller:
        _set_up_tensorflow()
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_finish(session) -> None:
    """Freeze what is alive once the tests are collected (TensorFlow, Keras, the test modules: some 400 000 objects)
    out of Python's cyclic garbage collector. Each full collection walked all of them, and tracing a step makes
    garbage fast enough to trigger many: test_condition_kinds spent 4.4 of its 36 CPU s in the collector, 0.8 with
    them frozen. They live to the end of the session anyway; what a test creates is collected as before."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items) -> None:
    """The files of the tier's order first (HEAVIEST_FIRST_FAST for `-m "not slow"`, HEAVIEST_FIRST otherwise), in
    that order; the others after them, as collected (a stable sort)."""
    fast_tier = config.getoption("markexpr", "").replace(" ", "") == "notslow"
    order = HEAVIEST_FIRST_FAST if fast_tier else HEAVIEST_FIRST
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.path.name, len(order)))
