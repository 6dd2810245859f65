"""Cost and effect of --deterministic: the same train_main command twice, with and without it.

    python bench/bench_determinism.py                      # BYOL, default width, batch 256, 19 steps
    python bench/bench_determinism.py --cpu_replicas=2     # the MirroredStrategy path on 2 logical CPUs

Each configuration trains twice from scratch into fresh directories, exports the backbone, and compares the
two exports' features on one fixed batch (max relative difference; 0.0 means bit-identical). Wall time is
per run, the same machine, in one invocation: compare the ratio, not the seconds.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="byol")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--max_steps", type=int, default=19)
    parser.add_argument("--cpu_replicas", type=int, default=1)
    parser.add_argument("--output", default=None, help="JSON file for the figures.")
    opts = parser.parse_args()
    import numpy as np
    from common import machine_info

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
