"""What the fault-tolerance guards cost and what the full per-epoch permutation changes (docs/distributed.md).

1. The finite-state check (`augself_tf.training.health.make_state_check`: every weight, BN statistic and buffer
   against NaN/Inf/LIMIT in one graph call) against one training step of the same model, per model size.
2. The correlation of example positions between consecutive epochs (and with the source order): tf.data's
   10,000-image shuffle buffer, the pair stream's earlier order, against `epoch_order`'s full permutation, at
   STL10's (105,000) and ImageNet-100's (126,689) sizes. Index streams only: no image is decoded.

    python -m bench.bench_fault_guards [--orders_only]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import tensorflow as tf

from bench.common import StepSpec, TrainStep


def check_cost(spec: StepSpec, repeats: int = 10) -> tuple[float, float]:
    """(median seconds of one state check, median seconds of one step) for ``spec``'s model."""
    from augself_tf.training.checkpoints import training_state
    from augself_tf.training.health import make_state_check

    step = TrainStep(spec)
    check = make_state_check(training_state(step.model, step.model.optimizer))
    check(), step.run(), step.run()  # traced outside the timings
    checks, steps = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        assert check() is None
        checks.append(time.perf_counter() - t0)
        steps.append(step.run().wall)
    return statistics.median(checks), statistics.median(steps)


def positions(order: np.ndarray) -> np.ndarray:
    """position[i] = where example i comes in the epoch."""
    out = np.empty_like(order)
    out[order] = np.arange(len(order))
    return out


def buffer_order(n: int, epoch: int, buffer: int = 10_000, seed: int = 0, before: bool = False) -> np.ndarray:
    """Epoch ``epoch``'s order through a ``buffer``-image shuffle of the source order, as the pair stream builds
    it: inside ``flat_map`` with the buffer seed of `augself_tf.data.pretrain.buffer_seed`, or with
    ``before`` its earlier seed (the first entry of the epoch's key, which is the same for every epoch)."""
    from augself_tf.data.pretrain import buffer_seed

    def epoch_stream(e: tf.Tensor) -> tf.data.Dataset:
        tf.compat.v1.get_default_graph().seed = None
        key = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0x5EED], tf.int64), e)
        s = key[0] if before else buffer_seed(seed, e)
        return tf.data.Dataset.range(n).shuffle(buffer, seed=s, reshuffle_each_iteration=False)

    ds = tf.data.Dataset.range(epoch, epoch + 1).flat_map(epoch_stream)
    return next(iter(ds.batch(n))).numpy()


def main() -> None:
    from augself_tf.data.pretrain import epoch_order

    orders_only = "--orders_only" in sys.argv
    print("| model | state check (ms) | step (ms) | check / step |")
    print("|---|---|---|---|")
    for spec in (StepSpec(method="moco", backbone="resnet18_cifar", width=0.125, image_size=32, batch_size=256),
                 StepSpec(method="simsiam", backbone="resnet18", width=1.0, image_size=96, batch_size=32)):
        if orders_only:
            break
        check, step = check_cost(spec)
        print(f"| {spec.label} | {1e3 * check:.2f} | {1e3 * step:.0f} | {100 * check / step:.2f}% |")
    print("\n| images | order | corr(epoch e, e+1) | corr(epoch, source order) |")
    print("|---|---|---|---|")
    for n in (105_000, 126_689):
        for name, order in (("10,000-image buffer, before", lambda n, e: buffer_order(n, e, before=True)),
                            ("10,000-image buffer, now (tfds)", buffer_order),
                            ("full permutation (folder:, in memory)",
                             lambda n, e: epoch_order(0, tf.constant(e, tf.int64), n).numpy())):
            p0, p1 = positions(order(n, 0)), positions(order(n, 1))
            between = np.corrcoef(p0, p1)[0, 1]
            source = np.corrcoef(np.arange(n), p0)[0, 1]
            print(f"| {n:,} | {name} | {between:.4f} | {source:.4f} |")


if __name__ == "__main__":
    main()
