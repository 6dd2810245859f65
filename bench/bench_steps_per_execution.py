"""Steps per second of ``train()`` at ``--steps_per_execution`` K = 1 and K = 10 (docs/benchmarks.md).

The run is the default one (TrainConfig's defaults: MoCo + AugSelf{crop,color} on shapes, ResNet-18 at width
1/8, 32 px, global batch 256, one device; logs every 10 steps) with monitors, periodic checkpoints and export off,
so what differs between the two is only how the steps are dispatched and their logs reduced and read. The time
runs from the end of the call that reaches step ``--warmup`` (past both traces) to the end of the call before the
last (the last one's end includes the run's final save); rounds alternate K = 1 and K = 10 in one process, each
round a fresh model. ``--batch_size`` smaller makes the step shorter, so the per-call cost weighs more.

    python -m bench.bench_steps_per_execution [--steps=40] [--warmup=10] [--rounds=2] [--batch_size=256]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from bench import common


def steps_per_second(k: int, steps: int, warmup: int, batch_size: int, model_dir: str) -> float:
    """One run of ``steps`` steps at K = ``k``; steps/s after the call that reaches ``warmup``."""
    from augself_tf.training.loop import TrainConfig, train

    marks: list[tuple[int, float]] = []
    cfg = TrainConfig(max_steps=steps, batch_size=batch_size, steps_per_execution=k, monitor="none", export=False,
                      checkpoint_every=10 * steps, model_dir=model_dir, verbose=0,
                      on_step=lambda step: marks.append((step, time.perf_counter())))
    train(cfg)
    start = next((s, t) for s, t in marks if s >= warmup)
    end = [(s, t) for s, t in marks if s < steps][-1]  # before the last call, whose mark comes after the final save
    return (end[0] - start[0]) / (end[1] - start[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256)
    args = parser.parse_args()
    common.print_machine(common.machine_info())
    rates: dict[int, list[float]] = {1: [], 10: []}
    for r in range(args.rounds):
        for k in ((1, 10) if r % 2 == 0 else (10, 1)):
            with tempfile.TemporaryDirectory() as tmp:
                rate = steps_per_second(k, args.steps, args.warmup, args.batch_size, tmp)
            rates[k].append(rate)
            print(f"round {r} K={k}: {rate:.3f} steps/s", flush=True)
    for k, values in rates.items():
        print(f"K={k}: median {statistics.median(values):.3f} steps/s over {len(values)} runs "
              f"({', '.join(f'{v:.3f}' for v in values)}); batch {args.batch_size}", flush=True)
    print(f"K=10 / K=1: {statistics.median(rates[10]) / statistics.median(rates[1]):.3f}", flush=True)


if __name__ == "__main__":
    main()
