"""Cost and effect of --deterministic: the same train_main command twice, with and without it.

    python -m bench.bench_determinism                      # BYOL, default width, batch 256, 19 steps
    python -m bench.bench_determinism --cpu_replicas=2     # the MirroredStrategy path on 2 logical CPUs
    python -m bench.bench_determinism --matrix             # 2 replicas: {SimSiam, MoCo} x {host, device} x {128, 256}

Each configuration trains twice from scratch into fresh directories, exports the backbone, and compares the
two exports' features on one fixed batch (max relative difference; 0.0 means bit-identical). Wall time is
per run, the same machine, in one invocation: compare the ratio, not the seconds.

    python -m bench.bench_determinism --grappler_cost      # the step with and without Grappler, both --deterministic

``--matrix`` runs only ``--deterministic`` on 2 logical CPU replicas (AugSelf{crop,color}, width 0.125, 32 px),
the two runs of a configuration at once (each uses one thread per op), and compares every checkpointed tensor
(weights, BN statistics, momentum buffers, MoCo's encoder and queue) besides the features.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(model_dir: str, args: list[str]) -> float:
    cmd = [sys.executable, os.path.join(ROOT, "train_main.py"), f"--model_dir={model_dir}", *args]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return time.perf_counter() - t0


def _features(saved_model: str) -> list:
    script = (
        "import numpy as np, tensorflow as tf, json, sys\n"
        "x = np.random.default_rng(0).uniform(size=[64, 32, 32, 3]).astype('float32')\n"
        f"m = tf.saved_model.load({saved_model!r})\n"
        "print(json.dumps(m.signatures['serving_default'](images=tf.constant(x))['features'].numpy().tolist()))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _checkpoint_differences(dir_a: str, dir_b: str) -> tuple[int, int, float]:
    """(tensors that differ, tensors compared, max relative difference) of two runs' last checkpoints."""
    import numpy as np
    import tensorflow as tf

    a, b = (tf.train.load_checkpoint(os.path.join(d, "checkpoints")) for d in (dir_a, dir_b))
    names = sorted(n for n in a.get_variable_to_shape_map() if "save_counter" not in n)
    if names != sorted(n for n in b.get_variable_to_shape_map() if "save_counter" not in n):
        raise RuntimeError(f"{dir_a} and {dir_b} hold different checkpoint keys")
    differ, worst = 0, 0.0
    for name in names:
        x, y = a.get_tensor(name), b.get_tensor(name)
        if not np.array_equal(x, y):
            differ += 1
            x, y = x.astype(np.float64), y.astype(np.float64)
            worst = max(worst, float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-30)))
    return differ, len(names), worst


def run_matrix(opts: argparse.Namespace) -> dict:
    """Two concurrent --deterministic 2-replica runs per configuration; checkpoints and features compared."""
    import numpy as np

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in opts.methods.split(","):
            for photometric in ("host", "device"):
                for batch in (int(b) for b in opts.batch_sizes.split(",")):
                    name = f"{method}-{photometric}-{batch}"
                    args = [f"--method={method}", "--augself=crop,color", f"--photometric={photometric}",
                            f"--batch_size={batch}", f"--max_steps={opts.max_steps}", "--width=0.125",
                            "--image_size=32", f"--seed={opts.seed}", "--deterministic", "--cpu_replicas=2",
                            "--strategy=mirrored", "--monitor=none", "--log_every=1000",
                            f"--checkpoint_every={opts.max_steps}"]
                    dirs = [os.path.join(tmp, f"{name}-{rep}") for rep in range(2)]
                    t0 = time.perf_counter()
                    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "train_main.py"), f"--model_dir={d}",
                                               *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")) for d in dirs]
                    if any(p.wait() for p in procs):
                        raise RuntimeError(f"{name}: a run failed")
                    seconds = time.perf_counter() - t0
                    differ, total, worst = _checkpoint_differences(*dirs)
                    a, b = (np.asarray(_features(os.path.join(d, "saved_model"))) for d in dirs)
                    row = {"config": name, "steps": opts.max_steps, "tensors_differing": differ,
                           "tensors": total, "max_rel_checkpoint_diff": worst,
                           "max_rel_feature_diff": float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12)),
                           "bit_identical": differ == 0 and bool(np.array_equal(a, b)),
                           "seconds_for_both_runs": seconds}
                    rows.append(row)
                    print(f"| {name} | {opts.max_steps} | {differ}/{total} | {row['max_rel_feature_diff']:.1e} | "
                          f"{'yes' if row['bit_identical'] else '**no**'} | {seconds:.0f} s |", flush=True)
    return {"rows": rows, "all_bit_identical": all(r["bit_identical"] for r in rows)}


def time_step_child(grappler: bool, replicas: int, batch_size: int, steps: int) -> None:
    """(In a child process.) The SimSiam+AugSelf{crop,color} step of the --matrix runs under --deterministic's
    settings, Grappler turned back on or not; prints one JSON line of per-step wall and CPU seconds."""
    import tensorflow as tf

    from augself_tf.runtime.determinism import make_deterministic
    from augself_tf.runtime.strategy import make_strategy
    from bench.common import StepSpec, TrainStep

    make_deterministic()
    if grappler:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    strategy = make_strategy("mirrored" if replicas > 1 else "one_device", replicas)
    step = TrainStep(StepSpec(backbone="resnet18_cifar", width=0.125, image_size=32, batch_size=batch_size),
                     strategy)
    for _ in range(2):  # the first traces
        step.run()
    timings = [step.run() for _ in range(steps)]
    print(json.dumps({"wall": [t.wall for t in timings], "cpu": [t.cpu for t in timings]}))


def run_grappler_cost(opts: argparse.Namespace) -> dict:
    """Child processes with Grappler on and off, alternating (reversed every other round); per-round ratios."""
    import numpy as np

    per_mode: dict[str, list[dict]] = {"off": [], "on": []}
    for r in range(opts.rounds):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            cmd = [sys.executable, "-m", "bench.bench_determinism", f"--_grappler_child={mode}",
                   f"--cpu_replicas={opts.cpu_replicas}", f"--batch_size={opts.batch_size}",
                   f"--max_steps={opts.max_steps}"]
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0"))
            per_mode[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = {}
    for mode, runs in per_mode.items():
        rows[mode] = {k: float(np.median([np.median(run[k]) for run in runs])) for k in ("wall", "cpu")}
        print(f"Grappler {mode:>3}: {rows[mode]['wall']:.3f} s/step, {rows[mode]['cpu']:.3f} CPU-s/step "
              f"(median of {len(runs)} processes' medians)", flush=True)
    ratios = {k: [float(np.median(on[k]) / np.median(off[k])) for on, off in zip(per_mode["on"], per_mode["off"],
                                                                               strict=True)] for k in ("wall", "cpu")}
    for k, v in ratios.items():
        print(f"Grappler on / off, {k}: {np.median(v):.3f} [{min(v):.3f}..{max(v):.3f}] (per round; > 1 means "
              "Grappler made the step slower)", flush=True)
    return {"per_mode": rows, "ratios_on_over_off": ratios, "runs": per_mode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="byol")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--max_steps", type=int, default=None, help="Steps per run (default 19; --matrix: 8).")
    parser.add_argument("--cpu_replicas", type=int, default=1)
    parser.add_argument("--output", default=None, help="JSON file for the figures.")
    parser.add_argument("--matrix", action="store_true", help="Bit-identity of 2-replica --deterministic runs over "
                        "methods x photometric modes x batch sizes (ignores --method, --cpu_replicas).")
    parser.add_argument("--methods", default="simsiam,moco", help="--matrix: comma list of methods.")
    parser.add_argument("--batch_sizes", default="128,256", help="--matrix: comma list of global batch sizes.")
    parser.add_argument("--seed", type=int, default=3, help="--matrix: the runs' --seed.")
    parser.add_argument("--grappler_cost", action="store_true", help="Time the SimSiam+AugSelf step of --matrix "
                        "(width 0.125, 32 px) under --deterministic's settings with Grappler off (as "
                        "--deterministic runs it) and back on, in alternating processes.")
    parser.add_argument("--rounds", type=int, default=4, help="--grappler_cost: processes per mode.")
    parser.add_argument("--_grappler_child", choices=("on", "off"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts._grappler_child:
        time_step_child(opts._grappler_child == "on", opts.cpu_replicas, opts.batch_size, opts.max_steps or 10)
        return
    import numpy as np

    from bench.common import machine_info, print_machine

    if opts.max_steps is None:
        opts.max_steps = 8 if opts.matrix else 10 if opts.grappler_cost else 19
    if opts.grappler_cost:
        info = machine_info()
        print_machine(info)
        results = {"machine": info, "args": vars(opts), **run_grappler_cost(opts)}
        if opts.output:
            with open(opts.output, "w") as f:
                json.dump(results, f, indent=2)
        return
    if opts.matrix:
        info = machine_info()
        print_machine(info)
        print("| configuration | steps | checkpoint tensors differing | max rel. feature diff | bit-identical | "
              "wall (2 runs at once) |\n|---|---|---|---|---|---|", flush=True)
        results = {"machine": info, "args": vars(opts), **run_matrix(opts)}
        if opts.output:
            with open(opts.output, "w") as f:
                json.dump(results, f, indent=2)
        sys.exit(0 if results["all_bit_identical"] else 1)

    base = [f"--method={opts.method}", f"--batch_size={opts.batch_size}", f"--max_steps={opts.max_steps}",
            f"--cpu_replicas={opts.cpu_replicas}", "--log_every=1000"]
    results = {"machine": machine_info(), "args": vars(opts), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, extra in (("default", []), ("deterministic", ["--deterministic"])):
            times, feats = [], []
            for rep in range(2):
                model_dir = os.path.join(tmp, f"{mode}{rep}")
                times.append(_train(model_dir, base + extra))
                feats.append(np.asarray(_features(os.path.join(model_dir, "saved_model"))))
            a, b = feats
            rel = float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
            results["runs"][mode] = {"seconds": times, "max_rel_feature_diff": rel,
                                     "bit_identical": bool(np.array_equal(a, b))}
            print(f"{mode:>13}: {np.mean(times):7.1f} s/run  max relative feature difference {rel:.2e}"
                  f"  bit-identical {np.array_equal(a, b)}", flush=True)
    ratio = np.mean(results["runs"]["deterministic"]["seconds"]) / np.mean(results["runs"]["default"]["seconds"])
    results["slowdown"] = float(ratio)
    print(f"--deterministic costs {ratio:.2f}x the wall time of a default run (same machine, same invocation)")
    if opts.output:
        with open(opts.output, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
