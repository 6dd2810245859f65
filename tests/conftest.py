"""Test session setup: quiet TensorFlow, and split the CPU into 2 logical devices before TF starts so the
multi-replica (MirroredStrategy) paths run without GPUs."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

_cpu = tf.config.list_physical_devices("CPU")[0]
try:
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:
    pass


def mirrored_cpus() -> tf.distribute.MirroredStrategy:
    """A MirroredStrategy over the two logical CPUs split above (the multi-replica path without GPUs)."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "conftest could not split the CPU into 2 logical devices"
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


# The files that take longest, heaviest first (measured with --durations=0 on the 2-core machine). pytest-xdist's
# `--dist loadfile` hands each worker whole files in collection order once the reorder below is off; its default
# reorder sends files with the most tests first, so the files of one or a few long runs (kill -9 resumes,
# two-worker training, the rerun check) used to start last and run alone at the end, the other worker idle.
# Longest first keeps the tail short. A file missing here runs after these, in its usual order; a stale order
# costs only balance, never a test.
HEAVIEST_FIRST = (
    "test_resume.py",
    "test_flagfiles.py",
    "test_faults.py",
    "test_training.py",
    "test_determinism.py",
    "test_install.py",
    "test_multiworker.py",
    "test_methods_base.py",
    "test_analyses.py",
    "test_methods_looc.py",
    "test_monitors.py",
    "test_conditioning.py",
    "test_reproduce_small.py",
    "test_progress.py",
)


def pytest_configure(config) -> None:
    """Under pytest-xdist, schedule files in collection order (see HEAVIEST_FIRST)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items) -> None:
    """The files of HEAVIEST_FIRST first, in its order; the others after them, as collected (a stable sort)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVIEST_FIRST)))
