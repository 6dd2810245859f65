"""Bit-identical runs on CPU: deterministic kernels, no oneDNN, one thread per op and one op at a time, no graph
rewrites."""

from __future__ import annotations

import os
import sys

import tensorflow as tf

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"


def restart_without_onednn() -> None:
    """Re-executes this program with oneDNN off, unless it already is (it can only be set before TF loads).

    oneDNN's CPU kernels pick code paths by buffer alignment, so even on one thread two runs differ in the
    last bits of a few gradients after a step or two (measured: BYOL, one BN β per step), and the
    difference then grows. The programs (augself-train, augself-eval) call this for `--deterministic`.
    """
    if os.environ.get(ONEDNN_ENV) == "0":
        return
    os.environ[ONEDNN_ENV] = "0"
    sys.stdout.flush()
    sys.stderr.flush()
    # The command as typed (sys.argv lost `-m augself_tf.train` or `-c ...`); this interpreter runs it again.
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def make_deterministic() -> None:
    """Makes two runs of one command compute the same bits (`--deterministic`).

    Op determinism alone is not enough on CPU: multithreaded kernels split their sums by thread count and
    timing, and oneDNN's by alignment, so runs drift by ~1e-2 relative within 20 steps. One intra-op and
    one inter-op thread and oneDNN off (:func:`restart_without_onednn`) remove that. On GPUs op determinism
    is the switch that matters; the CPU settings then only slow host-side work. Must run before TensorFlow
    executes its first op.

    Grappler (TensorFlow's graph rewriter) is turned off too. A traced step is the same graph in every
    process, but its rewrites of a multi-device step (constant folding, arithmetic rewrites) did not always
    give the same program: with 2 replicas, two runs of one command computed the same per-replica gradients
    yet applied updates that differed in the last bits from step 1 on, while one process rerunning its own
    compiled step reproduced itself exactly (docs/distributed.md, "Why Grappler is off"). Without rewrites
    every process runs the graph as traced.

    Raises:
      ValueError: when TensorFlow was loaded with oneDNN on, or has started with other thread settings.
    """
    if os.environ.get(ONEDNN_ENV) != "0":
        raise ValueError(
            f"--deterministic needs oneDNN off: set {ONEDNN_ENV}=0 before TensorFlow is imported "
            "(augself-train and augself-eval restart themselves with it)"
        )
    tf.config.experimental.enable_op_determinism()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
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
