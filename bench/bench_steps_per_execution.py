"""What a `tf.function` call costs the host: steps/s and ms per step at ``--steps_per_execution`` K = 1, ... (§8).

Three modes, each alternating the K values in one process, a fresh model per run, rounds rotating the order:

``--mode=train``: ``train()`` itself (TrainConfig's defaults: MoCo + AugSelf{crop,color} on shapes, ResNet-18 at
width 1/8, 32 px, global batch 256; logs every ``--log_every`` steps) with monitors, periodic checkpoints and
export off, so what differs between the K is only how the steps are dispatched and their logs reduced and read.
The time runs from the end of the call that reaches step ``--warmup`` (past both traces) to the end of the call
before the last (the last one's end includes the run's final save); the input pipeline runs as in a run.

``--mode=step``: the loop's :class:`~augself_tf.training.distributed_step.DistributedSteps` alone on one batch
held in memory and repeated (no input pipeline, no checkpoint), the logs copied to the host every
``--log_every`` steps as the loop does: the call's own cost with nothing else competing for the host.
``--mode=call``: the same around a step that does no training work (the mean of the views), so the time per step
is the call's host cost itself: dispatch, the in-graph or host ``next()``, the packed reduction, the log copies.

Per K: the median steps/s and ms per step (wall and process CPU), its ratio to K = 1, and what K saves per step,
t(K=1) - t(K); the per-call cost c follows from t(K) = s + c / K as c = (t(1) - t(K)) / (1 - 1/K). On a shared
machine compare the K of one run by these ratios, not figures of different runs. A small ``--batch_size`` and
``--width`` make the step a few ms, as an accelerator's step is relative to its host.

    python -m bench.bench_steps_per_execution --k=1,10 --rounds=2                        # the default run
    python -m bench.bench_steps_per_execution --mode=step --k=1,2,5,10 --width=0.0625 --batch_size=16 \\
        --image_size=16 --steps=300 --warmup=20 --rounds=3                               # a ms step
    python -m bench.bench_steps_per_execution --mode=call --k=1,2,5,10 --batch_size=256 --steps=2000 \\
        --warmup=100 --rounds=3                                                          # the call alone
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from bench import common


def _config(args: argparse.Namespace, k: int, model_dir: str, on_step=None):
    """The run's TrainConfig: the defaults, with this benchmark's size, K and everything periodic off."""
    import dataclasses

    from augself_tf.augment import AugmentConfig
    from augself_tf.training.loop import TrainConfig

    base = TrainConfig()
    model = dataclasses.replace(base.model, width=args.width or base.model.width, method=args.method)
    augment = AugmentConfig(image_size=args.image_size) if args.image_size else base.augment
    return TrainConfig(model=model, augment=augment, max_steps=args.steps, batch_size=args.batch_size,
                       steps_per_execution=k, monitor="none", export=False, checkpoint_every=10 * args.steps,
                       log_every=args.log_every, jit_compile=args.jit_compile, model_dir=model_dir, verbose=0,
                       on_step=on_step)


def time_train(args: argparse.Namespace, k: int) -> tuple[float, float]:
    """One ``train()`` run at K = ``k``: (wall s, CPU s) per step after the call that reaches ``--warmup``."""
    from augself_tf.training.loop import train

    marks: list[tuple[int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        train(_config(args, k, tmp, lambda s: marks.append((s, time.perf_counter(), time.process_time()))))
    start = next(m for m in marks if m[0] >= args.warmup)
    end = [m for m in marks if m[0] < args.steps][-1]  # before the last call, whose mark comes after the final save
    steps = end[0] - start[0]
    return (end[1] - start[1]) / steps, (end[2] - start[2]) / steps


def time_step(args: argparse.Namespace, k: int, no_step: bool = False) -> tuple[float, float]:
    """DistributedSteps alone at K = ``k`` on a repeated in-memory batch: (wall s, CPU s) per step."""
    import tensorflow as tf

    from augself_tf.methods.augself_model import PretrainData
    from augself_tf.runtime.strategy import compile_mode, make_strategy
    from augself_tf.training.distributed_step import DistributedSteps, steps_in_call
    from augself_tf.training.loop import build_model

    cfg = _config(args, k, "")
    strategy = make_strategy(cfg.strategy, cfg.cpu_replicas)
    data = PretrainData("synthetic", common.STEP_DATA_EXAMPLES, common.STEP_DATA_CLASSES, cfg.batch_size,
                        common.STEP_TOTAL_STEPS, common.STEP_DATA_EXAMPLES // cfg.batch_size)
    model = _NoStep(strategy) if no_step else build_model(cfg, strategy, data)
    per_replica = cfg.batch_size // strategy.num_replicas_in_sync
    views = cfg.model.views().num_views  # LooC's plan has more than two
    batch = common.synthetic_batch(per_replica, cfg.augment.image_size, views=views)
    iterator = iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(batch).repeat().prefetch(2)))
    mode = compile_mode(strategy) if cfg.jit_compile else None
    run = DistributedSteps(strategy, model, mode, tf.Variable(0, dtype=tf.int64, trainable=False))
    step, t0, c0 = 0, 0.0, 0.0
    while step < args.steps:
        logs, ran = run(iterator, steps_in_call(step, k, args.steps, (args.log_every,)))
        step += ran
        if step % args.log_every == 0 or step == args.steps:
            logs.fetch()  # the loop copies the logs to the host at log steps
        if t0 == 0.0 and step >= args.warmup:
            logs.fetch()
            first, t0, c0 = step, time.perf_counter(), time.process_time()
    steps = step - first
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


class _NoStep:
    """A step that does no training work (the mean of the views, one counter bumped): with it DistributedSteps'
    time per step is what the call around a step costs the host, for ``--mode=call``."""

    def __init__(self, strategy) -> None:
        import tensorflow as tf

        with strategy.scope():
            counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.optimizer = type("Optimizer", (), {"iterations": counter})()

    def train_step(self, batch: dict) -> dict:
        import tensorflow as tf

        self.optimizer.iterations.assign_add(1)
        views = [v for k, v in batch.items() if k.startswith("view")]
        return {"loss/total": tf.add_n([tf.reduce_mean(v) for v in views]), "lr": tf.constant(0.1)}


def time_call(args: argparse.Namespace, k: int) -> tuple[float, float]:
    """DistributedSteps at K = ``k`` around a step that does nothing (:class:`_NoStep`), on the batch of
    ``--mode=step``: (wall s, CPU s) per step, i.e. the call's own cost divided by the steps it runs."""
    return time_step(args, k, no_step=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("train", "step", "call"), default="train",
                        help="train(): the run; step: DistributedSteps on an in-memory batch; call: the same "
                             "around a step that does nothing (the call's own host cost)")
    parser.add_argument("--k", default="1,10", help="comma list of steps per call; 1 must be among them")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--width", type=float, default=None, help="backbone width (default TrainConfig's, 1/8)")
    parser.add_argument("--image_size", type=int, default=None, help="views' size (default TrainConfig's, 32)")
    parser.add_argument("--method", default="moco")
    parser.add_argument("--log_every", type=int, default=10, help="calls stop at log points: K above it is cut")
    parser.add_argument("--jit_compile", action="store_true")
    args = parser.parse_args(argv)
    ks = [int(x) for x in args.k.split(",") if x]
    if 1 not in ks:
        parser.error("--k must include 1 (the ratios are to K = 1)")
    common.print_machine(common.machine_info())
    timed = {"train": time_train, "step": time_step, "call": time_call}[args.mode]
    wall: dict[int, list[float]] = {k: [] for k in ks}
    cpu: dict[int, list[float]] = {k: [] for k in ks}
    for r in range(args.rounds):
        order = ks[r % len(ks):] + ks[:r % len(ks)]  # each K leads a round in turn
        for k in order:
            w, c = timed(args, k)
            wall[k].append(w)
            cpu[k].append(c)
            print(f"round {r} K={k}: {1000 * w:.2f} ms/step ({1 / w:.2f} steps/s), {1000 * c:.2f} CPU-ms/step",
                  flush=True)
    t1 = statistics.median(wall[1])
    print(f"\n{args.mode}: batch {args.batch_size}, width {args.width or 'default'}, image "
          f"{args.image_size or 'default'}, {args.method}, log_every {args.log_every}, jit {args.jit_compile}; "
          f"medians over {args.rounds} rounds")
    print("| K | ms/step | steps/s | x K=1 | CPU-ms/step | saved ms/step | per-call cost c ms |")
    print("|---|---|---|---|---|---|---|")
    for k in ks:
        t, c = statistics.median(wall[k]), statistics.median(cpu[k])
        call = "" if k == 1 else f"{1000 * (t1 - t) / (1 - 1 / k):.2f}"
        print(f"| {k} | {1000 * t:.2f} | {1 / t:.2f} | {t1 / t:.3f} | {1000 * c:.2f} | {1000 * (t1 - t):.2f} | "
              f"{call} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
