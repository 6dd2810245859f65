"""CPU step speed, as ratios measured within one run (docs/benchmarks.md §5).

Four parts, each timed in interleaved rounds (order reversed every other round) so that a shared machine's
load drift hits every configuration alike; ratios are medians of the per-round ratios, with their min..max.

1. ``padding``: a plain ResNet-18 (``build_backbone``; step = forward + backward + momentum-SGD apply of
   mean(f²)) with three paddings, made by patching ``augself_tf.models.resnet._conv`` inside this process:
   (a) ``same`` on every conv and the stem max-pool (not torchvision's function at stride 2); (b) explicit
   ZeroPadding2D + ``valid`` on every k>1 conv (the earlier code); (c) the library as it is
   (explicit only on the stride-2 convs and the stem max-pool). Checks that (b) and (c) compute the same
   function from the same weights. Reports b/c and a/c.
2. ``step``: the SimSiam + AugSelf{crop,color} ResNet-18 step as train_main runs it (``common.TrainStep``:
   ``make_distributed_step`` on a synthetic batch in memory) in float32 and ``mixed_bfloat16``, against a
   PyTorch step of the same model (bench/torch_simsiam.py, run in worker processes with
   ``torch.set_num_threads`` = TF's intra-op thread count): PyTorch as installed (libgomp's default OpenMP
   wait policy) and with ``OMP_WAIT_POLICY=PASSIVE``, float32, and bfloat16 autocast.
3. ``losses``: the README default run (``train_main.py`` defaults, ``--max_steps``, ``--monitor=none``,
   ``--log_every=1``) in float32 and with ``--mixed_precision=bfloat16``; loss/total, loss/method and
   loss/augself from TensorBoard, their relative differences, a CSV and a picture.
4. ``e2e``: ``train_main.py`` pairs/s (TensorBoard ``pairs_per_sec``, the windows after the first) for the
   reproduction's configuration against its step alone (``common.TrainStep``, synthetic batch), with
   ``--photometric=host`` and ``=device``, plus the input pipeline alone (``make_pair_dataset`` as
   train_main builds it); CPU-seconds per pair of each, to say where the time goes.

    python -m bench.bench_cpu_step --json /tmp/cpu_step.json                  # all four (~35 min at load 6-10)
    python -m bench.bench_cpu_step --parts=padding,step --repeats=4
    python -m bench.bench_cpu_step --parts=losses --loss_steps=200 --plot docs/img/bf16_vs_f32_losses.png
    python -m bench.bench_cpu_step --parts=e2e --e2e_rounds=2

This file is the command (flags, which parts run, the JSON); the parts live beside it: cpu_step_padding.py
(1), cpu_step_vs_torch.py (2), cpu_step_train_main.py (3 and 4); cpu_step_stats.py holds their ratios and tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import tensorflow as tf

from bench import common
from bench.cpu_step_padding import part_padding
from bench.cpu_step_stats import intra_op_threads
from bench.cpu_step_train_main import part_e2e, part_losses
from bench.cpu_step_vs_torch import part_step

# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="padding,step,losses,e2e")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per configuration (the first traces)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds of the padding and step parts")
    p.add_argument("--per_round", type=int, default=1, help="steps per configuration per round (padding)")
    p.add_argument("--image_size", type=int, default=96)
    p.add_argument("--padding_batch", type=int, default=128)
    p.add_argument("--padding_width", type=float, default=1.0)
    p.add_argument("--width", type=float, default=1.0, help="ResNet-18 width of the step part")
    p.add_argument("--step_batch", type=int, default=64)
    p.add_argument("--tf_precisions", default="float32,bfloat16")
    p.add_argument("--composite_bn", action=argparse.BooleanOptionalAction, default=True,
                   help="step part: also time float32 with BN composed of moments (before the fused kernel)")
    p.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--torch_variants", default="torch,torch passive",
                   help="'torch' (OpenMP defaults) and/or 'torch passive' (OMP_WAIT_POLICY=PASSIVE)")
    p.add_argument("--torch_precisions", default="f32,bf16", help="of the passive worker: f32 and/or bf16")
    p.add_argument("--torch_threads", type=int, default=0, help="0: TF's intra-op thread count")
    p.add_argument("--loss_steps", type=int, default=200)
    p.add_argument("--loss_baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="also a second float32 run, to compare bfloat16's difference with run-to-run noise")
    p.add_argument("--loss_csv", default=None)
    p.add_argument("--plot", default=None, help="picture of the float32 vs bfloat16 loss curves")
    p.add_argument("--e2e_dataset", default="folder:/work/shared/data/tiny-imagenet-mini")
    p.add_argument("--e2e_split", default="train")
    p.add_argument("--e2e_width", type=float, default=0.5)
    p.add_argument("--e2e_image_size", type=int, default=64)
    p.add_argument("--e2e_batch", type=int, default=128)
    p.add_argument("--e2e_steps", type=int, default=60)
    p.add_argument("--e2e_log_every", type=int, default=10)
    p.add_argument("--e2e_step_alone", type=int, default=20, help="timed step-alone steps per round")
    p.add_argument("--e2e_pipeline_batches", type=int, default=20)
    p.add_argument("--e2e_modes", default="host,device")
    p.add_argument("--e2e_rounds", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    info = common.machine_info()
    common.print_machine(info)
    print(f"# TF intra-op threads {intra_op_threads()}, inter-op "
          f"{tf.config.threading.get_inter_op_parallelism_threads() or 'default'}", flush=True)
    out: dict = {"machine": info, "args": vars(args)}
    parts = {"padding": part_padding, "step": part_step, "losses": part_losses, "e2e": part_e2e}
    for name in args.parts.split(","):
        t0, load0 = time.perf_counter(), os.getloadavg()
        out[name] = parts[name](args)
        out[name]["minutes"] = (time.perf_counter() - t0) / 60
        out[name]["loadavg"] = [load0, os.getloadavg()]
        print(f"# part {name}: {out[name]['minutes']:.1f} min, loadavg {tuple(round(x, 2) for x in load0)} -> "
              f"{tuple(round(x, 2) for x in os.getloadavg())}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
