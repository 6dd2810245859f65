"""bench_cpu_step.py part 2, ``step``: the SimSiam + AugSelf ResNet-18 step as train_main runs it, in float32
and bfloat16, against the same step in PyTorch (bench/torch_simsiam.py in worker processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

from bench import common
from bench.cpu_step_stats import intra_op_threads, paired, print_step_table, step_summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------ 2. step


class TorchWorker:
    """``python -m bench.torch_simsiam --worker`` in its own process; `run(precision)` times one step there."""

    def __init__(self, args, label: str, env: dict[str, str], precisions: str) -> None:
        self.label = label
        cmd = [sys.executable, "-m", "bench.torch_simsiam", "--worker", f"--width={args.width}",
               f"--image_size={args.image_size}", f"--batch_size={args.step_batch}",
               f"--threads={args.torch_threads or intra_op_threads()}", f"--precisions={precisions}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env}, cwd=REPO)
        self.info = json.loads(self.proc.stdout.readline())
        self.batch = args.step_batch

    def run(self, precision: str) -> common.Timing:
        self.proc.stdin.write(precision + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        if out["loss"] != out["loss"]:
            raise RuntimeError(f"{self.label}: NaN loss")
        return common.Timing(out["wall"], out["cpu"], self.batch)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def composite_bn(step: common.TrainStep) -> common.TrainStep:
    """`step` with every BatchNorm computing its training statistics from moments and elementwise ops (Keras
    3's way, and the library's before the fused kernel), set per layer before the step is first traced."""
    from augself_tf.models.batch_norm import BatchNorm

    for layer in step.model._flatten_layers():
        if isinstance(layer, BatchNorm):
            layer._fusable = lambda inputs: False
    return step


def part_step(args) -> dict:
    spec = common.StepSpec(method="simsiam", augself=("crop", "color"), backbone="resnet18", width=args.width,
                           image_size=args.image_size, batch_size=args.step_batch)
    runs: dict[str, Callable[[], common.Timing]] = {}
    tf_f32 = common.TrainStep(spec)
    runs["tf float32"] = tf_f32.run
    if "bfloat16" in args.tf_precisions:
        import dataclasses

        runs["tf bfloat16"] = common.TrainStep(dataclasses.replace(spec, mixed_precision="bfloat16")).run
    if args.composite_bn:
        runs["tf float32 composite BN"] = composite_bn(common.TrainStep(spec)).run
    workers = []
    if args.torch:
        threads = args.torch_threads or intra_op_threads()
        for label, env in (("torch", {}), ("torch passive", {"OMP_WAIT_POLICY": "PASSIVE"})):
            if label not in [v.strip() for v in args.torch_variants.split(",")]:
                continue
            precisions = args.torch_precisions if label == "torch passive" else "f32"
            w = TorchWorker(args, label, env, precisions)
            workers.append(w)
            print(f"# PyTorch worker '{label}': {w.info}", flush=True)
            for prec in precisions.split(","):
                name = f"{label} {'float32' if prec == 'f32' else 'bfloat16 autocast'}"
                runs[name] = lambda w=w, prec=prec: w.run(prec)
        print(f"# torch threads {threads} = TF intra-op threads {intra_op_threads()}", flush=True)
    try:
        times = common.interleaved_steps(runs, warmup=args.warmup, repeats=args.repeats, log=True)
    finally:
        for w in workers:
            w.close()
    summary = step_summary(times)
    ratios = {}
    if "tf float32 composite BN" in times:
        ratios["tf float32 composite BN / tf float32"] = paired(times, "tf float32 composite BN", "tf float32")
    if "tf bfloat16" in times:
        ratios["tf float32 / tf bfloat16"] = paired(times, "tf float32", "tf bfloat16")
    for k in times:
        if k.startswith("torch"):
            ours = "tf bfloat16" if "bfloat16" in k and "tf bfloat16" in times else "tf float32"
            ratios[f"{k} / {ours}"] = paired(times, k, ours)
            if ours != "tf float32":
                ratios[f"{k} / tf float32"] = paired(times, k, "tf float32")
    print_step_table(f"\n2-3. SimSiam+AugSelf{{crop,color}} ResNet-18 w{args.width:g}, {args.image_size}px, batch "
                     f"{args.step_batch} (s per step, median [min..max] over {args.repeats} rounds)", summary, ratios)
    return {"summary": summary, "ratios": ratios, "torch": [w.info for w in workers]}
