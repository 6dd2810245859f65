"""Host-memory ops in the `--photometric=device` training step as a GPU run traces it, per method.

Each method's model is the one train_main builds (``augself_tf.training.loop.build_model``). Its replica step
(``strategy.run(model.train_step)``, what the loop's step runs on every replica) is traced, not run, for a
device-mode batch (uint8 views and the device stage's draws, from ``make_pair_dataset`` over ``shapes``) under:

* ``gpu``: ``OneDeviceStrategy("/job:localhost/replica:0/task:0/device:GPU:0")``, what ``make_strategy`` makes on
  a one-GPU machine. TensorFlow accepts the GPU name without a GPU (variables fall back to the CPU) and
  ``strategy.run`` enters the GPU's device scope while tracing, as on a GPU;
* ``cpu``: the same on ``/cpu:0``.

and each colour-jitter form: ``auto`` (what the step builds now), ``partition`` (what ``auto`` built outside XLA
before it read the device) and ``select``. It counts the nodes ``augself_tf.runtime.host_ops.host_memory_ops``
reports (functions included; on the ``cpu`` setting every node is pinned to the CPU, so pins are not counted
there) and, for the ``gpu`` setting with ``auto``, the whole step function the loop calls
(``make_distributed_step``: also the reduction of the logs).

    python -m bench.bench_host_ops                             # every method, tiny ResNet (~2 min on 2 cores)
    python -m bench.bench_host_ops --methods=simsiam,moco --mixed_precision=float16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import keras
import tensorflow as tf

from augself_tf.augment import ops
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.methods.augself_model import PretrainData
from augself_tf.runtime.host_ops import count_by_op, host_memory_ops
from augself_tf.training.distributed_step import make_distributed_step
from augself_tf.training.loop import build_model
from bench import common

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
SETTINGS = {"gpu": GPU, "cpu": "/job:localhost/replica:0/task:0/device:CPU:0"}
FORMS = ("auto", "partition", "select")


def device_batch_spec(cfg, plan) -> dict:
    """The TensorSpecs of one `--photometric=device` batch of the run `cfg` (the method's views)."""
    ds = make_pair_dataset(load_source("shapes", "test"), cfg.augment, seed=0, batch_size=cfg.batch_size,
                           num_epochs=1, photometric="device", views=plan)
    return tf.nest.map_structure(tf.TensorSpec.from_tensor, next(iter(ds)))


def traced(spec: common.StepSpec, device: str, form: str, whole_step: bool = False) -> tf.compat.v1.GraphDef:
    """The replica step of ``spec``'s model on ``device``, its jitter built as ``form`` (or the loop's whole step
    function)."""
    cfg = spec.config()
    strategy = tf.distribute.OneDeviceStrategy(device)
    data = PretrainData("synthetic", 4096, 10, cfg.batch_size, 1000, 4096 // cfg.batch_size)
    previous = keras.mixed_precision.global_policy().name
    if cfg.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{cfg.mixed_precision}")
    try:
        model = build_model(cfg, strategy, data)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    batch = device_batch_spec(cfg, cfg.model.views())
    if whole_step:
        step = make_distributed_step(strategy, model, spec.jit_compile)
    else:
        step = tf.function(lambda b: strategy.run(model.train_step, args=(b,)), jit_compile=spec.jit_compile or None)
    with ops.jitter_method(form) if form != "auto" else contextlib.nullcontext():
        return step.get_concrete_function(batch).graph.as_graph_def()


def counted(graph: tf.compat.v1.GraphDef, setting: str) -> dict[str, int]:
    found = host_memory_ops(graph)
    return count_by_op([h for h in found if setting == "gpu" or not h.pinned])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default="simsiam,moco,byol,simclr,swav,supervised,looc")
    p.add_argument("--augself", default="crop,color")
    p.add_argument("--backbone", default="resnet18_cifar")
    p.add_argument("--width", type=float, default=0.125)
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=8, help="per-replica batch of the traced step")
    p.add_argument("--mixed_precision", default=None, choices=[None, "float16", "bfloat16"])
    p.add_argument("--jit_compile", action="store_true")
    p.add_argument("--json", default=None, help="also write the counts here")
    args = p.parse_args(argv)
    info = common.machine_info()
    common.print_machine(info)
    results: dict = {"machine": info, "args": vars(args), "counts": {}}
    print(f"\nhost-memory ops in the --photometric=device replica step (functions included), by jitter form\n"
          f"{'method':<11} {'setting':<8} {'form':<10} {'count':>5}  by op")
    for method in [m for m in args.methods.split(",") if m]:
        spec = common.StepSpec(method=method, augself=tuple(a for a in args.augself.split(",") if a),
                               backbone=args.backbone, width=args.width, image_size=args.image_size,
                               batch_size=args.batch_size, jit_compile=args.jit_compile,
                               mixed_precision=args.mixed_precision)
        rows = {}
        t0 = time.perf_counter()
        for setting, device in SETTINGS.items():
            for form in FORMS:
                try:
                    rows[f"{setting} {form}"] = counted(traced(spec, device, form), setting)
                except Exception as err:  # report it and go on: one method's failure should not hide the rest
                    rows[f"{setting} {form}"] = {"FAILED": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        rows["gpu auto, whole step function"] = counted(traced(spec, GPU, "auto", whole_step=True), "gpu")
        for key, counts in rows.items():
            setting, _, form = key.partition(" ")
            total = sum(v for v in counts.values() if isinstance(v, int))
            print(f"{method:<11} {setting:<8} {form:<10} {total:>5}  {counts or ''}")
        print(f"# {method}: traced in {time.perf_counter() - t0:.0f}s", flush=True)
        results["counts"][method] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
