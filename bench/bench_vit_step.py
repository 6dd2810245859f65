"""The ViT's CPU step against the ledger's ResNet-18 at width 0.25 (docs/benchmarks.md §10).

Step = forward + backward + momentum-SGD apply of mean(f²) on a batch of 64-px images, as bench_cpu_step.py's
``padding`` part times a backbone. The configurations are timed in interleaved rounds (order reversed every other
round) so that a shared machine's load drift hits each alike; the ratio of each to the ResNet is the median of the
per-round ratios, with its min..max, of wall time and of process CPU time (all threads: the figure a shared,
oversubscribed machine moves least, docs/benchmarks.md "Machine and method").

    python -m bench.bench_vit_step                               # vit_pico against resnet18 width 0.25
    python -m bench.bench_vit_step --vits=vit_pico,vit_tiny --patch_size=8 --rounds=6
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import tensorflow as tf

from augself_tf.models import backbones
from bench import common


def stepper(model: keras.Model):
    """One traced training step of `model` on mean(f²) with momentum SGD."""
    return common.mean_square_step(model, keras.optimizers.SGD(0.01, momentum=0.9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vits", default="vit_pico", help="comma-separated ViT names")
    parser.add_argument("--patch_size", type=int, default=8)
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    models = {"resnet18 w0.25": backbones.build("resnet18", width=0.25)}
    for name in args.vits.split(","):
        models[f"{name} p{args.patch_size}"] = backbones.build(name, image_size=args.image_size,
                                                               patch_size=args.patch_size)
    x = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    steps = {k: stepper(m) for k, m in models.items()}
    for step in steps.values():  # trace and warm up
        step(x)
        step(x)
    times: dict[str, list[float]] = {k: [] for k in steps}
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(args.rounds):
        for k in (list(steps) if r % 2 == 0 else list(reversed(steps))):
            t0, c0 = time.perf_counter(), time.process_time()
            steps[k](x).numpy()
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)

    def ratio(values: dict[str, list[float]], k: str) -> str:
        r = [a / b for a, b in zip(values[k], values["resnet18 w0.25"], strict=True)]
        return f"{statistics.median(r):.2f} ({min(r):.2f}..{max(r):.2f})"

    for k in steps:
        print(f"{k:>18}: {1000 * statistics.median(times[k]):6.0f} ms, {statistics.median(cpu[k]):5.2f} CPU s a step "
              f"(batch {args.batch_size}, {args.image_size} px), {models[k].count_params():>9,d} parameters; "
              f"to the ResNet: wall {ratio(times, k)}, CPU {ratio(cpu, k)}")


if __name__ == "__main__":
    main()
