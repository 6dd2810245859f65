"""Is the training state still a model? NaN/Inf or overflowing values in weights, BN statistics and buffers.

A diverged run can keep a finite loss (normalisation hides the scale: ``--lr=1e6`` gave weights near 5e34 and
Inf BN moving variances under a finite loss), so the loss alone does not tell. :func:`make_state_check` reads
every float variable in one graph call that returns one number; the loop calls it where it already reads the
loss (log steps) and before every save, so no step waits on the host for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf

from augself_tf.training.checkpoint_files import LIMIT


class NonFiniteLossError(RuntimeError):
    """The run diverged (a NaN/Inf loss, or a weight or statistic beyond LIMIT); the last good checkpoint is kept."""


def make_state_check(state: Mapping[str, tf.Variable]) -> Callable[[], str | None]:
    """A function returning the key of the first float variable of ``state`` holding NaN/Inf or a value beyond
    :data:`~augself_tf.training.checkpoint_files.LIMIT` in magnitude, or None when all are sound."""
    keys = [k for k, v in sorted(state.items()) if tf.as_dtype(v.dtype).is_floating]
    variables = [state[k] for k in keys]

    @tf.function
    def first_bad() -> tf.Tensor:
        # |x| <= LIMIT is False for NaN too: one comparison covers NaN, Inf and overflow.
        bad = tf.stack([~tf.reduce_all(tf.abs(tf.cast(v, tf.float32)) <= LIMIT) for v in variables])
        return tf.where(tf.reduce_any(bad), tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32), -1)

    def check() -> str | None:
        i = int(first_bad())
        return None if i < 0 else keys[i]

    return check


def advice(lr: float, batch_size: int, augself_weight: float,
           task_weights: Mapping[str, float | None] | None = None) -> str:
    """What to change after a divergence: the flags whose values are far outside the paper's ranges, else --lr.

    ``task_weights``: each AugSelf task's own weight (``--augself=crop:2.0``), None where it takes λ.
    """
    flags = []
    if lr * batch_size / 256 > 1.0:
        flags.append(f"--lr (now {lr:g}, i.e. {lr * batch_size / 256:g} at this batch)")
    own = {name: w for name, w in (task_weights or {}).items() if w is not None}
    if augself_weight > 10.0 and len(own) < len(task_weights or {"λ": None}):  # some task takes λ
        flags.append(f"--augself_weight (λ, now {augself_weight:g}; the paper uses 0.5-1)")
    big = [f"{name}:{w:g}" for name, w in own.items() if w > 10.0]
    if big:
        flags.append(f"the task weights of --augself (now {', '.join(big)}; the paper uses 0.5-1)")
    if not flags:
        flags.append(f"--lr (now {lr:g})")
    return f"lower {' or '.join(flags)}, or check the data"
