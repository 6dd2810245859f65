"""The device stage (``--photometric=device``): host CPU saved, its cost inside the step, end-to-end rate.

Four measurements, each reported as ratios within one run (docs/benchmarks.md §4):

1. ``pipeline``: host CPU-seconds per pair of ``make_pair_dataset`` (batch 256), ``photometric="host"`` vs
   ``"device"``, at 96 and 224 px, over tiny-imagenet-mini decoded once into memory (64 px images, so every
   crop is UPSAMPLED to the view size), and over synthetic ImageNet-sized JPEGs (500x375, ~108 KB, decoded
   every epoch as a folder source does, crops mostly shrunk) at 224 px. Target: device mode >= 2.5x fewer
   host CPU-seconds per pair at 96 px.
   ``jpeg``: CPU-ms per image of decoding such a JPEG, whole (``tf.io.decode_jpeg``) or only the pair's two
   crop windows (``tf.image.decode_and_crop_jpeg``).
2. ``share``: ``finish_views`` alone (tf.function, a real device-mode batch of 256 at 96 px, the paper's
   probabilities) vs one ResNet-18 (width 1.0) SimSiam+AugSelf{crop,color} step at batch 256, 96 px
   (``common.TrainStep``, synthetic float batch), and that step fed the device-mode batch (finish_views
   inside), interleaved; with ``--share_select`` (default) also both with the jitter's select form (the
   former default, before the partitioned form). Target: finish_views <= 8% of the step.
3. ``train_main``: the README default run (``python train_main.py``) for ``--max_steps`` steps with
   ``--photometric=host`` and ``=device``; pairs/s are read from its TensorBoard scalar ``pairs_per_sec``
   (one value per ``--log_every`` window; the first window, which holds tracing, is dropped).
4. ``--gpu``: for ResNet-18 at 96 px and ResNet-50 at 224 px, fp32 and mixed precision, XLA off and on:
   training-step pairs/s on one real batch held on the device (device mode: uint8 views + draws, finish_views
   in the step; host mode: float views), finish_views alone, the host pipeline's pairs/s in both modes, and
   the input-bound fraction max(0, 1 - pipeline pairs/s / step pairs/s); the device-mode step and finish_views
   again with each colour-jitter form of ``--gpu_jitter`` forced. Runs on CPU too (``--quick``).
   Its pipeline figures use ``--source`` (decoded into memory first); on the GPU machine pass the real data,
   e.g. ``--source=stl10@train+unlabelled``.

Timing as in bench/common.py: interleaved rounds, medians, process CPU time (all threads) besides wall time.

    python -m bench.bench_device_stage --json /tmp/device_stage.json      # CPU figures of §4, 6-8 min on 2 cores
    python -m bench.bench_device_stage --quick                            # smoke test of 1-3, ~2 min
    python -m bench.bench_device_stage --parts=train_main --train_main_runs=2        # end to end, alternating
    python -m bench.bench_device_stage --parts=finish_breakdown           # where finish_views' time goes
    python -m bench.bench_device_stage --host_breakdown --repeats=2       # where device mode's host CPU goes
    python -m bench.bench_device_stage --gpu --json /tmp/gpu.json         # on a GPU machine
    python -m bench.bench_device_stage --gpu --quick                      # the GPU suite at toy sizes (CPU ok)

This file is the command (flags, which parts run, the JSON); the parts live beside it: device_stage_host.py
(1, 1b, ``--host_breakdown``), device_stage_step.py (2, ``finish_breakdown``, 3), device_stage_gpu.py (4), and
device_stage_harness.py holds the sources, pipelines and timed callables they share.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

from bench import common
from bench.device_stage_gpu import part_gpu
from bench.device_stage_harness import load_cached, synthetic_jpegs
from bench.device_stage_host import part_host_breakdown, part_jpeg, part_pipeline
from bench.device_stage_step import part_finish_breakdown, part_share, part_train_main

DEFAULT_SOURCE = "folder:/work/shared/data/tiny-imagenet-mini@all"


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="pipeline,jpeg,share,train_main",
                   help="comma-separated: pipeline, jpeg, share, train_main, finish_breakdown (not by default)")
    p.add_argument("--gpu", action="store_true", help="run the GPU suite (part 4) instead")
    p.add_argument("--host_breakdown", action="store_true", help="instead: where device mode's host CPU goes")
    p.add_argument("--quick", action="store_true", help="toy sizes and few repeats (smoke test; CPU is fine)")
    p.add_argument("--source", default=DEFAULT_SOURCE, help="SPEC@SPLIT decoded once into memory")
    p.add_argument("--sizes", default="96,224", help="view sizes of the pipeline comparison")
    p.add_argument("--batch_size", type=int, default=256, help="pipeline batch (pairs)")
    p.add_argument("--threads", type=int, default=0, help="tf.data private threadpool size (0 = all cores)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of the pipeline measurements")
    p.add_argument("--warmup_batches", type=int, default=1)
    p.add_argument("--min_batches", type=int, default=2)
    p.add_argument("--min_seconds", type=float, default=4.0)
    p.add_argument("--jpeg_images", type=int, default=512, help="synthetic JPEGs (0: skip the JPEG rows)")
    p.add_argument("--jpeg_width", type=int, default=500)
    p.add_argument("--jpeg_height", type=int, default=375)
    p.add_argument("--jpeg_quality", type=int, default=90)
    p.add_argument("--jpeg_noise", type=float, default=24.0, help="std (of 255) of the noise added before encoding")
    p.add_argument("--jpeg_size", type=int, default=224, help="view size of the JPEG rows")
    p.add_argument("--share_size", type=int, default=96)
    p.add_argument("--share_batch", type=int, default=256)
    p.add_argument("--share_width", type=float, default=1.0)
    p.add_argument("--share_warmup", type=int, default=1)
    p.add_argument("--share_repeats", type=int, default=3)
    p.add_argument("--share_select", action=argparse.BooleanOptionalAction, default=True,
                   help="also time finish_views and the device-batch step with the select jitter (the accelerators' "
                        "form; CPU's before the partition)")
    p.add_argument("--train_steps", type=int, default=40, help="train_main --max_steps")
    p.add_argument("--train_log_every", type=int, default=10, help="train_main --log_every (one pairs/s window)")
    p.add_argument("--train_main_runs", type=int, default=1, help="runs per mode (alternating host/device)")
    p.add_argument("--train_main_flags", default="", help="extra train_main flags (default: the README default run)")
    p.add_argument("--gpu_configs", default="resnet18@96:256,resnet50@224:64",
                   help="BACKBONE@SIZE:PER_DEVICE_BATCH list of the GPU suite")
    p.add_argument("--gpu_width", type=float, default=1.0)
    p.add_argument("--gpu_mixed_precision", default="auto", choices=["auto", "float16", "bfloat16"],
                   help="auto: bfloat16, float16 on GPUs without it (preferred_mixed_precision)")
    p.add_argument("--gpu_jitter", default="partition,select",
                   help="colour-jitter forms (ops.JITTER_METHODS) whose device-mode step and finish_views the GPU "
                        "suite also times, besides what auto builds (select on a GPU, partition on CPU)")
    p.add_argument("--gpu_warmup", type=int, default=3)
    p.add_argument("--gpu_repeats", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.batch_size, args.repeats, args.min_seconds = "32,64", 32, 1, 1.0
        args.jpeg_images, args.jpeg_size, args.jpeg_width, args.jpeg_height = 64, 64, 160, 120
        args.share_size, args.share_batch, args.share_width, args.share_repeats = 32, 16, 0.25, 2
        args.train_steps, args.train_log_every = 4, 2
        args.gpu_configs, args.gpu_width, args.gpu_warmup, args.gpu_repeats = "resnet18@32:8,resnet50@32:4", 0.25, 1, 2
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if 0 < args.jpeg_images < args.batch_size:  # make_pair_dataset drops the remainder: no batch at all
        raise SystemExit(f"--jpeg_images ({args.jpeg_images}) must be at least --batch_size ({args.batch_size})")

    info = common.machine_info()
    common.print_machine(info)
    t_start = time.perf_counter()
    results: dict = {"machine": info, "args": vars(args)}
    source = load_cached(args.source)
    if args.gpu:
        results["gpu"] = part_gpu(source, args)
    elif args.host_breakdown:
        results["host_breakdown_cpu_ms_per_pair"] = part_host_breakdown(source, args)
    else:
        parts = [x for x in args.parts.split(",") if x]
        jpegs = None
        if args.jpeg_images and {"pipeline", "jpeg"} & set(parts):
            t0 = time.perf_counter()
            jpegs = synthetic_jpegs(source, args.jpeg_images, args.jpeg_height, args.jpeg_width, args.jpeg_noise,
                                    args.jpeg_quality)
            print(f"# {len(jpegs)} synthetic JPEGs encoded in {time.perf_counter() - t0:.1f}s", flush=True)
        for part in parts:
            t0 = time.perf_counter()
            print(f"\n## {part}", flush=True)
            if part == "pipeline":
                results[part] = part_pipeline(source, jpegs, args)
            elif part == "jpeg":
                if jpegs is not None:
                    results[part] = part_jpeg(jpegs, args)
            elif part == "share":
                results[part] = part_share(source, args)
            elif part == "finish_breakdown":
                results[part] = part_finish_breakdown(source, args)
            elif part == "train_main":
                results[part] = part_train_main(args)
            else:
                raise SystemExit(f"unknown part {part!r}")
            print(f"# {part}: {time.perf_counter() - t0:.0f}s; loadavg "
                  f"{tuple(round(x, 2) for x in os.getloadavg())}", flush=True)
            gc.collect()
    info["loadavg_end"] = os.getloadavg()
    info["wall_seconds"] = time.perf_counter() - t_start
    print(f"# total {info['wall_seconds']:.0f}s; loadavg at the end: {tuple(round(x, 2) for x in info['loadavg_end'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
