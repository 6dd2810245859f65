"""Bit-identical runs on CPU: deterministic kernels, one thread per op and one op at a time."""

from __future__ import annotations

import tensorflow as tf


def make_deterministic() -> None:
    """Makes two runs of one command compute the same bits (`--deterministic`).

    Op determinism alone is not enough on CPU: multithreaded kernels (oneDNN convolutions, reductions)
    split their sums by thread count and timing, so runs drift by ~1e-2 relative within 20 steps. One
    intra-op and one inter-op thread remove that. On GPUs op determinism is the switch that matters and
    the thread counts only limit host-side work. Must run before TensorFlow executes its first op.

    Raises:
      ValueError: when TensorFlow's runtime has already started with other thread settings.
    """
    tf.config.experimental.enable_op_determinism()
    threading = tf.config.threading
    if threading.get_intra_op_parallelism_threads() == 1 and threading.get_inter_op_parallelism_threads() == 1:
        return
    try:
        threading.set_intra_op_parallelism_threads(1)
        threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        raise ValueError(
            "--deterministic must be set before TensorFlow starts (it fixes the thread pools); "
            "pass it on the command line or call make_deterministic() first"
        ) from None
