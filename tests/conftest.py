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
