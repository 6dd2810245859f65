"""CPU step speed (issue 24), as ratios measured within one run (docs/benchmarks.md §5).

Four parts, each timed in interleaved rounds (order reversed every other round) so that a shared machine's
load drift hits every configuration alike; ratios are medians of the per-round ratios, with their min..max.

1. ``padding``: a plain ResNet-18 (``build_backbone``; step = forward + backward + momentum-SGD apply of
   mean(f²)) with three paddings, made by patching ``augself_tf.models.resnet._conv`` inside this process:
   (a) ``same`` on every conv and the stem max-pool (not torchvision's function at stride 2); (b) explicit
   ZeroPadding2D + ``valid`` on every k>1 conv (the code before issue 24); (c) the library as it is
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

    python bench/bench_cpu_step.py --json /tmp/cpu_step.json                  # all four (~35 min at load 6-10)
    python bench/bench_cpu_step.py --parts=padding,step --repeats=4
    python bench/bench_cpu_step.py --parts=losses --loss_steps=200 --plot docs/img/bf16_vs_f32_losses.png
    python bench/bench_cpu_step.py --parts=e2e --e2e_rounds=2
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from unittest import mock

import common  # noqa: E402  (sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import augself_tf.models.resnet as resnet  # noqa: E402
from augself_tf.runtime import tensorboard  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.dirname(os.path.abspath(__file__))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def spread(xs: list[float]) -> dict:
    """Median and min..max of per-round values."""
    return {"median": common.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s: dict, digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}..{s['max']:.{digits}f}]"


def paired(times: dict[str, list[common.Timing]], a: str, b: str) -> dict:
    """Per-round time(a)/time(b), wall and CPU: median and range."""
    ta, tb = times[a], times[b]
    return {"wall": spread([x.wall / y.wall for x, y in zip(ta, tb, strict=True)]),
            "cpu": spread([x.cpu / y.cpu for x, y in zip(ta, tb, strict=True)])}


def step_summary(times: dict[str, list[common.Timing]]) -> dict:
    """Per configuration: the spread of its seconds and CPU-seconds per step."""
    return {k: {"s_per_step": spread([t.wall for t in v]), "cpu_s_per_step": spread([t.cpu for t in v])}
            for k, v in times.items()}


def print_step_table(title: str, summary: dict, ratios: dict, label=lambda k: k, width: int = 32,
                     digits: int = 2) -> None:
    """The seconds (and CPU-seconds) per step of each configuration, then the paired ratios."""
    print(title)
    for k, s in summary.items():
        print(f"  {label(k):<{width}} {fmt(s['s_per_step'])} s  {fmt(s['cpu_s_per_step'])} CPU-s")
    for k, r in ratios.items():
        print(f"  ratio {k:<44} wall {fmt(r['wall'], digits)}, CPU {fmt(r['cpu'], digits)}")


def intra_op_threads() -> int:
    """TF's intra-op pool size (0 in the config means the default, one thread per core)."""
    return tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1


# ------------------------------------------------------------------------------------------------ 1. padding


def _conv_same(filters: int, kernel: int, stride: int, name: str):
    """(a) Keras' `same` everywhere: at stride 2 it pads bottom/right only (not torchvision's function)."""
    return keras.layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                               kernel_initializer=resnet.torch_default_kernel(), name=name)


def _conv_explicit_all(filters: int, kernel: int, stride: int, name: str):
    """(b) The code before issue 24: ZeroPadding2D(k//2) + `valid` on every k>1 conv."""
    conv = keras.layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=False,
                               kernel_initializer=resnet.torch_default_kernel(), name=name)
    if kernel == 1:
        return conv
    pad = keras.layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")
    return lambda x: conv(pad(x))


class _SameMaxPoolLayers:
    """`keras.layers` as resnet.py sees it, except that the stem max-pool is `same` without its padding layer."""

    def __getattr__(self, name: str):
        return getattr(keras.layers, name)

    @staticmethod
    def ZeroPadding2D(padding, name=None, **kwargs):  # noqa: N802  (mirrors the Keras name it replaces)
        if name == "stem_pool_pad":
            return lambda x: x
        return keras.layers.ZeroPadding2D(padding, name=name, **kwargs)

    @staticmethod
    def MaxPooling2D(pool_size, strides=None, padding="valid", **kwargs):  # noqa: N802
        return keras.layers.MaxPooling2D(pool_size, strides, padding="same", **kwargs)


@contextlib.contextmanager
def padding_variant(variant: str) -> Iterator[None]:
    """Patches resnet.py's module globals for the duration of one build_backbone call."""
    if variant == "same":
        with mock.patch.object(resnet, "_conv", _conv_same), mock.patch.object(resnet, "layers", _SameMaxPoolLayers()):
            yield
    elif variant == "explicit_all":
        with mock.patch.object(resnet, "_conv", _conv_explicit_all):
            yield
    elif variant == "stride2":
        yield
    else:
        raise ValueError(variant)


PADDING_LABELS = {
    "same": "(a) `same` everywhere (conv and max-pool)",
    "explicit_all": "(b) explicit on every k>1 conv (before)",
    "stride2": "(c) explicit on stride-2 convs + max-pool (now)",
}


class BackboneStep:
    """build_backbone under a padding variant; `run()` = one forward+backward+SGD apply of mean(f²)."""

    def __init__(self, variant: str, width: float, image_size: int, batch_size: int) -> None:
        keras.utils.set_random_seed(0)
        with padding_variant(variant):
            self.model = resnet.build_backbone("resnet18", width, model_name=f"resnet18_{variant}")
        self.pads = sum(isinstance(layer, keras.layers.ZeroPadding2D) for layer in self.model.layers)
        self.optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        self.optimizer.build(self.model.trainable_variables)
        self.x = tf.random.stateless_uniform([batch_size, image_size, image_size, 3], seed=[0, 1])
        self.batch_size = batch_size
        model, optimizer = self.model, self.optimizer

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        self._step = step

    def run(self) -> common.Timing:
        t0, c0 = time.perf_counter(), time.process_time()
        loss = float(self._step(self.x))
        timing = common.Timing(time.perf_counter() - t0, time.process_time() - c0, self.batch_size)
        if loss != loss:
            raise RuntimeError("NaN loss")
        return timing


def same_function(a: keras.Model, b: keras.Model, image_size: int) -> float:
    """max |a(x) − b(x)| in inference mode after copying a's conv/BN weights into b (layers matched by name)."""
    weights = {layer.name: layer.get_weights() for layer in a.layers if layer.weights}
    for layer in b.layers:
        if layer.weights:
            layer.set_weights(weights[layer.name])
    x = tf.random.stateless_uniform([2, image_size, image_size, 3], seed=[3, 4])
    return float(tf.reduce_max(tf.abs(a(x, training=False) - b(x, training=False))))


def part_padding(args) -> dict:
    steps = {}
    for variant in PADDING_LABELS:
        t0 = time.perf_counter()
        steps[variant] = BackboneStep(variant, args.padding_width, args.image_size, args.padding_batch)
        print(f"# built {PADDING_LABELS[variant]}: {steps[variant].pads} ZeroPadding2D layers, "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
    # At an even size `same` pads a stride-2 conv bottom/right only, so (a) differs there; (b) never may.
    check = {"explicit_all vs stride2": same_function(steps["stride2"].model, steps["explicit_all"].model, 64),
             "same vs stride2": same_function(steps["stride2"].model, steps["same"].model, 64)}
    print(f"# max |difference| of the features from the same weights at 64 px: "
          f"(b) vs (c) {check['explicit_all vs stride2']:.1e} (must be ~0), (a) vs (c) {check['same vs stride2']:.1e}",
          flush=True)
    times = common.interleaved_steps({k: s.run for k, s in steps.items()}, warmup=args.warmup,
                                     repeats=args.repeats, per_round=args.per_round, log=True)
    times = {k: merge_rounds(v, args.per_round) for k, v in times.items()}
    summary = {k: {**v, "zero_padding_layers": steps[k].pads} for k, v in step_summary(times).items()}
    ratios = {"b/c": paired(times, "explicit_all", "stride2"), "a/c": paired(times, "same", "stride2")}
    print_step_table(f"\n1. padding: ResNet-18 w{args.padding_width:g}, {args.image_size}px, batch "
                     f"{args.padding_batch}, forward+backward+SGD (s per step, median [min..max] over "
                     f"{args.repeats} rounds)", summary, ratios, label=PADDING_LABELS.get, width=52, digits=3)
    return {"summary": summary, "ratios": ratios, "function_check": check}


def merge_rounds(timings: list[common.Timing], per_round: int) -> list[common.Timing]:
    """One Timing per round (the mean of its `per_round` steps), so that ratios pair steps of one round."""
    out = []
    for i in range(0, len(timings), per_round):
        chunk = timings[i:i + per_round]
        out.append(common.Timing(sum(t.wall for t in chunk) / len(chunk), sum(t.cpu for t in chunk) / len(chunk),
                                 chunk[0].pairs))
    return out


# ------------------------------------------------------------------------------------------------ 2. step


class TorchWorker:
    """bench/torch_simsiam.py --worker in its own process; `run(precision)` times one step there."""

    def __init__(self, args, label: str, env: dict[str, str], precisions: str) -> None:
        self.label = label
        cmd = [sys.executable, os.path.join(BENCH, "torch_simsiam.py"), "--worker", f"--width={args.width}",
               f"--image_size={args.image_size}", f"--batch_size={args.step_batch}",
               f"--threads={args.torch_threads or intra_op_threads()}", f"--precisions={precisions}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
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


# ------------------------------------------------------------------------------------------------ TensorBoard


def read_curves(tb_dir: str, tags: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of scalar summaries in a TensorBoard directory, sorted by step (the library's reader)."""
    events = tensorboard.read_scalars(tb_dir, tags)
    return {t: tensorboard.last_per_step(events.get(t, [])) for t in tags}


PROGRESS = re.compile(r"\b(\d+)/(\d+) \(\d+%\)")


def run_train_main(flags: list[str], model_dir: str) -> dict:
    """train_main.py as a subprocess; the process CPU time (all threads) is sampled at every progress line."""
    cmd = [sys.executable, os.path.join(REPO, "train_main.py"), f"--model_dir={model_dir}", *flags]
    print(f"#   {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    cpu_at: dict[int, tuple[float, float]] = {}
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line])[-60:]
        m = PROGRESS.search(line)
        if m:
            cpu_at[int(m.group(1))] = (time.perf_counter() - t0, proc_cpu(proc.pid))
    rc = proc.wait()
    if rc:
        print("".join(tail))
        raise RuntimeError(f"train_main.py failed ({rc})")
    return {"wall_s": time.perf_counter() - t0, "cpu_at": cpu_at, "tail": tail}


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, all its threads, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except OSError:
        return float("nan")


# ------------------------------------------------------------------------------------------------ 3. losses

LOSS_TAGS = ("loss/total", "loss/method", "loss/augself")


def part_losses(args) -> dict:
    runs = [("float32", []), ("bfloat16", ["--mixed_precision=bfloat16"])]
    if args.loss_baseline:  # a second float32 run: how much two float32 runs differ (thread-order round-off)
        runs.append(("float32 again", []))
    curves, walls = {}, {}
    with tempfile.TemporaryDirectory(prefix="bf16_losses_") as tmp:
        for i, (name, extra) in enumerate(runs):
            flags = [f"--max_steps={args.loss_steps}", "--monitor=none", "--log_every=1", "--noexport", *extra]
            run = run_train_main(flags, os.path.join(tmp, f"run{i}"))
            walls[name] = run["wall_s"]
            curves[name] = read_curves(os.path.join(tmp, f"run{i}", "tensorboard"), LOSS_TAGS)
            print(f"#   {name}: {run['wall_s']:.0f}s wall with start-up", flush=True)
    stats: dict[str, dict] = {}
    for other in [name for name, _ in runs[1:]]:
        for tag in LOSS_TAGS:
            a, b = dict(curves["float32"][tag]), dict(curves[other][tag])
            steps = sorted(set(a) & set(b))
            rel = [abs(b[s] - a[s]) / max(abs(a[s]), 1e-12) for s in steps]
            stats.setdefault(other, {})[tag] = {
                "steps": len(steps), "max_rel": max(rel), "mean_rel": sum(rel) / len(rel),
                "max_abs": max(abs(b[s] - a[s]) for s in steps), "first": (a[steps[0]], b[steps[0]]),
                "last": (a[steps[-1]], b[steps[-1]])}
    print(f"\n3. README default run, first {args.loss_steps} steps: float32 vs --mixed_precision=bfloat16 (wall "
          + " / ".join(f"{n} {w:.0f}s" for n, w in walls.items()) + " with start-up)")
    for other, per_tag in stats.items():
        for tag, s in per_tag.items():
            print(f"  {other} vs float32, {tag:<14} |diff| / |f32|: max {100 * s['max_rel']:.2f}%, mean "
                  f"{100 * s['mean_rel']:.3f}% over {s['steps']} steps; first {s['first'][0]:.4f}/{s['first'][1]:.4f},"
                  f" last {s['last'][0]:.4f}/{s['last'][1]:.4f}")
    if args.loss_csv:
        names = [name for name, _ in runs]
        with open(args.loss_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step"] + [f"{t} {n}" for t in LOSS_TAGS for n in names])
            for step in sorted(dict(curves["float32"]["loss/total"])):
                w.writerow([step] + [dict(curves[n][t]).get(step, "") for t in LOSS_TAGS for n in names])
        print(f"  curves: {args.loss_csv}")
    if args.plot:
        plot_losses(curves, stats["bfloat16"], args.plot)
        print(f"  picture: {args.plot}")
    return {"stats": stats, "wall_s": walls, "curves": curves}


def plot_losses(curves: dict, stats: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOSS_TAGS), figsize=(12, 3.2))
    for ax, tag in zip(axes, LOSS_TAGS, strict=True):
        for name, style in (("float32", {"color": "tab:blue", "lw": 1.6}),
                            ("bfloat16", {"color": "tab:orange", "lw": 1.0, "ls": "--"})):
            steps, values = zip(*curves[name][tag], strict=True)
            ax.plot(steps, values, label=name, **style)
        s = stats[tag]
        ax.set_title(f"{tag}\nrel. diff max {100 * s['max_rel']:.1f}%, mean {100 * s['mean_rel']:.2f}%", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("README default run (MoCo + AugSelf{crop,color}, shapes, 32 px, w0.125, b256): float32 vs bfloat16",
                 fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ 4. e2e


def e2e_flags(args, photometric: str) -> list[str]:
    return [f"--dataset={args.e2e_dataset}", f"--split={args.e2e_split}", "--method=simsiam",
            "--augself=crop,color", "--backbone=resnet18", f"--width={args.e2e_width}",
            f"--image_size={args.e2e_image_size}", f"--batch_size={args.e2e_batch}", f"--max_steps={args.e2e_steps}",
            "--monitor=none", "--noexport", f"--log_every={args.e2e_log_every}", f"--photometric={photometric}"]


def part_e2e(args) -> dict:
    from augself_tf.augment import AugmentConfig
    from augself_tf.data.pretrain import make_pair_dataset
    from augself_tf.data.sources import load_source

    spec = common.StepSpec(method="simsiam", augself=("crop", "color"), backbone="resnet18", width=args.e2e_width,
                           image_size=args.e2e_image_size, batch_size=args.e2e_batch)
    step = common.TrainStep(spec)
    for _ in range(args.warmup):
        step.run()
    dataset, split = args.e2e_dataset, args.e2e_split

    def pipeline():
        source = load_source(dataset, split)
        return make_pair_dataset(source, AugmentConfig(image_size=args.e2e_image_size), seed=0,
                                 batch_size=args.e2e_batch, photometric="host")

    results: dict[str, list[dict]] = {}
    modes = [m for m in ("host", "device") if m in args.e2e_modes]
    for r in range(args.e2e_rounds):
        order = ["step", "pipeline", *modes]
        for name in order if r % 2 == 0 else order[::-1]:
            print(f"# e2e round {r + 1}/{args.e2e_rounds}: {name}", flush=True)
            if name == "step":
                ts = [step.run() for _ in range(args.e2e_step_alone)]
                wall, cpu = sum(t.wall for t in ts), sum(t.cpu for t in ts)
                res = {"pairs_per_sec": len(ts) * spec.batch_size / wall,
                       "pairs_per_cpu_sec": len(ts) * spec.batch_size / cpu}
            elif name == "pipeline":
                t = common.drain(pipeline, args.e2e_batch, warmup=2, min_batches=args.e2e_pipeline_batches,
                                 min_seconds=0)
                res = {"pairs_per_sec": t.pairs_per_sec, "pairs_per_cpu_sec": t.pairs_per_cpu_sec}
            else:
                with tempfile.TemporaryDirectory(prefix=f"e2e_{name}_") as tmp:
                    run = run_train_main(e2e_flags(args, name), os.path.join(tmp, "run"))
                    rates = read_curves(os.path.join(tmp, "run", "tensorboard"), ("pairs_per_sec",))["pairs_per_sec"]
                steady = [v for s, v in rates if s > args.e2e_log_every]  # the first window holds tracing
                first, last = args.e2e_log_every, max(run["cpu_at"])
                (w0, c0), (w1, c1) = run["cpu_at"][first], run["cpu_at"][last]
                pairs = (last - first) * spec.batch_size
                res = {"pairs_per_sec": common.median(steady), "windows": rates,
                       "pairs_per_sec_progress": pairs / (w1 - w0), "pairs_per_cpu_sec": pairs / (c1 - c0),
                       "cores_used": (c1 - c0) / (w1 - w0), "wall_s": run["wall_s"]}
            results.setdefault(name, []).append(res)
            print(f"#   {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items() if isinstance(v, float)),
                  flush=True)
    summary = {k: {"pairs_per_sec": spread([x["pairs_per_sec"] for x in v]),
                   "pairs_per_cpu_sec": spread([x["pairs_per_cpu_sec"] for x in v])} for k, v in results.items()}
    ratios = {}
    for m in modes:
        ratios[f"train_main {m} / step"] = {
            key: spread([x[key] / y[key] for x, y in zip(results[m], results["step"], strict=True)])
            for key in ("pairs_per_sec", "pairs_per_cpu_sec")}
    step_cpu = summary["step"]["pairs_per_cpu_sec"]["median"]
    pipe_cpu = summary["pipeline"]["pairs_per_cpu_sec"]["median"]
    predicted = 1.0 / (1.0 / step_cpu + 1.0 / pipe_cpu)
    print(f"\n4. end to end: train_main.py {' '.join(e2e_flags(args, '<mode>'))}, {args.e2e_rounds} rounds")
    for k, s in summary.items():
        print(f"  {k:<10} pairs/s {fmt(s['pairs_per_sec'], 1)}  pairs/CPU-s {fmt(s['pairs_per_cpu_sec'], 1)}")
    for k, r in ratios.items():
        print(f"  {k}: pairs/s {fmt(r['pairs_per_sec'])}, pairs/CPU-s {fmt(r['pairs_per_cpu_sec'])}  (target >= 0.90)")
    print(f"  step + pipeline CPU per pair predicts {predicted:.1f} pairs/CPU-s = "
          f"{predicted / step_cpu:.2f} of the step alone: the pipeline's CPU cost if cores are the bottleneck")
    return {"summary": summary, "ratios": ratios, "runs": results,
            "predicted_pairs_per_cpu_sec": predicted}


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
