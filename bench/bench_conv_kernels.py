"""ResNet-18's convolutions alone, TensorFlow against PyTorch (docs/benchmarks.md §5.6).

Both frameworks run these layers on oneDNN. This benchmark times one 3×3 convolution of each ResNet-18 stage
(and the 7×7/2 stem) at the step benchmark's 96 px and batch 64, forward and forward + backward (gradients of
input and weights), in process CPU milliseconds: TensorFlow NHWC in this process, PyTorch NCHW and
channels_last in a worker process (``--torch_worker``; the two thread pools never share a process). Rounds
alternate the frameworks. Convolutions are ~75% of our SimSiam + AugSelf step (§5.6), so if the kernels cost
the same in both frameworks, the step's ratio to PyTorch is bounded by what the rest of the step costs.

    python -m bench.bench_conv_kernels                 # ~5 min on 2 loaded cores
    python -m bench.bench_conv_kernels --rounds=5 --json /tmp/conv.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The checkout's root: the PyTorch worker runs from there as python -m bench.bench_conv_kernels.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (name, in channels, out channels, kernel, stride, input size) at 96 px: stem, then one 3×3 conv per stage.
LAYERS = (("stem 7x7/2", 3, 64, 7, 2, 96), ("layer1 3x3", 64, 64, 3, 1, 24), ("layer2 3x3", 128, 128, 3, 1, 12),
          ("layer3 3x3", 256, 256, 3, 1, 6), ("layer4 3x3", 512, 512, 3, 1, 3))


def _cpu_ms(fn, repeats: int) -> float:
    """Median process-CPU milliseconds of `fn` over `repeats` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        c0 = time.process_time()
        fn()
        times.append((time.process_time() - c0) * 1e3)
    return statistics.median(times)


def torch_worker(batch: int, threads: int) -> int:
    """One JSON line {layer: {format: [fwd ms, fwd+bwd ms]}} per line read on stdin."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cases = {}
    for name, cin, cout, k, s, hw in LAYERS:
        for fmt in ("NCHW", "channels_last"):
            memory = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
            conv = torch.nn.Conv2d(cin, cout, k, s, k // 2, bias=False).to(memory_format=memory)
            x = torch.randn(batch, cin, hw, hw).contiguous(memory_format=memory).requires_grad_()

            def fwd(conv=conv, x=x):
                with torch.no_grad():
                    return float(conv(x).sum())

            def step(conv=conv, x=x):
                y = conv(x)
                (y * y).sum().backward()
                x.grad = conv.weight.grad = None

            cases[(name, fmt)] = (fwd, step)
    print(json.dumps({"ready": True, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        repeats = int(line)
        out: dict = {}
        for (name, fmt), (fwd, step) in cases.items():
            out.setdefault(name, {})[fmt] = [_cpu_ms(fwd, repeats), _cpu_ms(step, repeats)]
        print(json.dumps(out), flush=True)
    return 0


def tf_cases(batch: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.random.set_seed(0)
    cases = {}
    for name, cin, cout, k, s, hw in LAYERS:
        x = tf.random.normal([batch, hw, hw, cin])
        w = tf.Variable(tf.random.normal([k, k, cin, cout]) * 0.05)
        # As the library pads: explicitly (torchvision's symmetric padding) at stride 2, `SAME` at stride 1.
        pad = [[0, 0], [k // 2, k // 2], [k // 2, k // 2], [0, 0]] if s > 1 else [[0, 0]] * 4
        mode = "VALID" if s > 1 else "SAME"

        @tf.function
        def fwd(x=x, w=w, s=s, pad=pad, mode=mode):
            return tf.reduce_sum(tf.nn.conv2d(tf.pad(x, pad), w, s, mode))

        @tf.function
        def step(x=x, w=w, s=s, pad=pad, mode=mode):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.nn.conv2d(tf.pad(x, pad), w, s, mode)
                loss = tf.reduce_sum(y * y)
            gx, gw = tape.gradient(loss, [x, w])
            return tf.reduce_sum(gx) + tf.reduce_sum(gw)

        cases[name] = (lambda f=fwd: f().numpy(), lambda f=step: f().numpy())
    return cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5, help="timed calls per case per round (median)")
    p.add_argument("--threads", type=int, default=0, help="PyTorch threads (0: os.cpu_count())")
    p.add_argument("--json", default=None)
    p.add_argument("--torch_worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    threads = args.threads or os.cpu_count() or 1
    if args.torch_worker:
        return torch_worker(args.batch, threads)
    worker = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_conv_kernels", "--torch_worker", f"--batch={args.batch}",
         f"--threads={threads}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, cwd=REPO)
    info = json.loads(worker.stdout.readline())
    cases = tf_cases(args.batch)
    rounds: list[dict] = []
    try:
        for r in range(args.rounds):
            order = ("tf", "torch") if r % 2 == 0 else ("torch", "tf")
            result: dict = {}
            for side in order:
                if side == "tf":
                    for name, (fwd, step) in cases.items():
                        result.setdefault(name, {})["tf NHWC"] = [_cpu_ms(fwd, args.repeats),
                                                                   _cpu_ms(step, args.repeats)]
                else:
                    worker.stdin.write(f"{args.repeats}\n")
                    worker.stdin.flush()
                    for name, by_fmt in json.loads(worker.stdout.readline()).items():
                        result.setdefault(name, {}).update({f"torch {k}": v for k, v in by_fmt.items()})
            rounds.append(result)
            print(f"# round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        worker.stdin.close()
        worker.wait(timeout=60)
    print(f"\nConvolutions alone, batch {args.batch}, CPU-ms (median of {args.rounds} rounds); "
          f"torch {info['torch']}, {threads} threads, OMP_WAIT_POLICY=PASSIVE")
    print("| layer | TF NHWC fwd | TF fwd+bwd | torch NCHW fwd+bwd | torch channels_last fwd+bwd "
          "| torch NCHW / TF (fwd+bwd) |")
    print("|---|---:|---:|---:|---:|---:|")
    table = {}
    for name in rounds[0]:
        med = {k: [statistics.median(r[name][k][i] for r in rounds) for i in (0, 1)] for k in rounds[0][name]}
        ratio = statistics.median(r[name]["torch NCHW"][1] / r[name]["tf NHWC"][1] for r in rounds)
        table[name] = {"median_ms": med, "torch_nchw_over_tf": ratio}
        print(f"| {name} | {med['tf NHWC'][0]:.1f} | {med['tf NHWC'][1]:.1f} | {med['torch NCHW'][1]:.1f} "
              f"| {med['torch channels_last'][1]:.1f} | {ratio:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "table": table, "torch": info}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
