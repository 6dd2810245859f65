"""CPU seconds per training step of LooC at N = 3 and 4 views against MoCo v2 (N = 2), same global batch.

Each configuration is the model train_main builds (``augself_tf.training.loop.build_model`` and
``make_distributed_step``) fed one synthetic batch of N views held in memory (host mode: float views, every ω;
the ω a key copies from q is copied), so the input pipeline is not timed. After warm-up the configurations run
in interleaved rounds (one step each per round, the order reversed every other round); per configuration the
median over rounds of process CPU seconds (every thread) and wall seconds per step are printed, and the ratio to
MoCo is the median of the per-round ratios, so a shared machine's load drift cancels out. It uses only the
augself_tf package; from the checkout's root:

    python -m bench.bench_looc_views                                   # docs/benchmarks.md: 96 px, batch 32
    python -m bench.bench_looc_views --image_size=32 --width=0.25 --repeats=3   # a quick look
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig, registry
from augself_tf.methods.augself_model import PretrainData
from augself_tf.methods.model_config import ModelConfig
from augself_tf.training.distributed_step import make_distributed_step
from augself_tf.training.loop import build_model
from augself_tf.training.train_config import TrainConfig

#: label -> (method, --looc_augmentations or None): N = 2, 3, 4.
CONFIGS = {"moco (N=2)": ("moco", None), "looc color (N=3)": ("looc", "color"),
           "looc color,rotation (N=4)": ("looc", "color,rotation")}


def synthetic_batch(cfg: TrainConfig, seed: int = 0) -> dict:
    """N views of random pixels with random ω of every entry; a view copies its source's ω of a shared step."""
    rng = np.random.default_rng(seed)
    plan = cfg.model.views()
    b, s = cfg.batch_size, cfg.augment.image_size
    batch: dict = {}
    for j, view in enumerate(plan.views):
        batch[f"view{j + 1}"] = tf.constant(rng.uniform(0, 1, [b, s, s, 3]), tf.float32)
        omega = {k: rng.uniform(0, 1, [b, d]).astype("float32") for k, d in registry.OMEGA_DIMS.items()}
        omega["rotation"] = rng.integers(0, 4, [b, 1]).astype("float32")
        for name, source in view.shares:
            omega[name] = batch[f"omega{source + 1}"][name]
        batch[f"omega{j + 1}"] = {k: tf.constant(v) for k, v in omega.items()}
    return batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="resnet18")
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--image_size", type=int, default=96)
    p.add_argument("--batch_size", type=int, default=32, help="global batch (images per view) of one step")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per configuration (the first traces)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (one step per configuration each)")
    args = p.parse_args(argv)

    print(f"# {platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, TF {tf.__version__}, "
          f"Python {platform.python_version()}")
    print(f"# {args.backbone} width {args.width} at {args.image_size} px, batch {args.batch_size}, "
          f"{args.repeats} rounds after {args.warmup} warm-up steps", flush=True)
    strategy = tf.distribute.get_strategy()
    data = PretrainData("synthetic", 105_000, 0, args.batch_size, 1000, 100)
    steps = {}
    for label, (method, left_out) in CONFIGS.items():
        options = {"queue_size": 4096} | ({"looc_augmentations": left_out} if left_out else {})
        model_cfg = ModelConfig(method=method, augself=(), backbone=args.backbone, width=args.width,
                                method_options=options)
        cfg = TrainConfig(model=model_cfg, augment=AugmentConfig(image_size=args.image_size),
                          batch_size=args.batch_size, verbose=0)
        model = build_model(cfg, strategy, data)
        step, batch = make_distributed_step(strategy, model), synthetic_batch(cfg)
        for _ in range(args.warmup):
            float(step(batch)["loss/total"])
        steps[label] = (step, batch)
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    wall: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(args.repeats):
        for label in (list(steps) if r % 2 == 0 else list(reversed(steps))):
            step, batch = steps[label]
            c0, w0 = time.process_time(), time.perf_counter()
            float(step(batch)["loss/total"])  # waits for the step
            cpu[label].append(time.process_time() - c0)
            wall[label].append(time.perf_counter() - w0)
    base = next(iter(steps))
    print("| configuration | N | CPU s/step | wall s/step | CPU ratio to MoCo | wall ratio to MoCo |")
    print("|---|---|---|---|---|---|")
    for label in steps:
        n = label.split("N=")[1].rstrip(")")
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu[label], cpu[base], strict=True))
        wall_ratio = statistics.median(a / b for a, b in zip(wall[label], wall[base], strict=True))
        print(f"| {label.split(' (')[0]} | {n} | {statistics.median(cpu[label]):.2f} | "
              f"{statistics.median(wall[label]):.2f} | {cpu_ratio:.2f} | {wall_ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
