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
