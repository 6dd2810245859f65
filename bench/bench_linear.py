"""Benchmark of the linear-evaluation solvers on synthetic ResNet-like features.

Compares, on the SAME features in one run, the paper's full regularisation sweep (45 values in
[1e-6, 1e5], warm-started, best on validation, refit on train+val) with each backend of
``augself_tf.evaluation.estimators.logreg``:

* ``numpy``   — our objective in float32 BLAS + scipy L-BFGS-B;
* ``tf``      — the same objective as a TensorFlow ``tf.function`` + scipy L-BFGS-B
                (tensorflow_probability is not installed, so no TF-native L-BFGS);
* ``sklearn`` — ``LogisticRegression(solver="lbfgs", warm_start=True)``, C = 1/(2·reg);
* ``numpy_raw`` — ``numpy`` without the internal feature centring (to measure what centring buys).

All backends minimise the same objective (centred features except ``numpy_raw``), stop on the same rule
(max |gradient| of the mean-scaled objective <= gtol, as sklearn's ``tol``) and start each fit from
the previous solution.

Usage (the paper-sized problem, CIFAR-like 45k train / 5k val / 10k test, 2048-d, 10 classes):

    python -m bench.bench_linear --n_train 45000 --n_val 5000 --n_test 10000 --dim 2048 --classes 10

Prints one line per backend: seconds for the sweep + refit, chosen regulariser, test accuracy,
total L-BFGS iterations; ``--json`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from augself_tf.evaluation.estimators import logreg


def synthetic_features(
    n: int, dim: int, classes: int, *, seed: int = 0, latent: int = 64, separation: float = 0.3, noise: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """ResNet-like features: non-negative (post-ReLU), class structure in a low-dim latent, noisy."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).normal(size=(classes, latent)).astype(np.float32)
    mix = (np.random.default_rng(4321).normal(size=(latent, dim)) / np.sqrt(latent)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    z = separation * centers[y] + rng.normal(size=(n, latent)).astype(np.float32)
    x = z @ mix + noise * rng.normal(size=(n, dim)).astype(np.float32)
    np.maximum(x, 0.0, out=x)
    return x.astype(np.float32), y.astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n_train", type=int, default=45000)
    p.add_argument("--n_val", type=int, default=5000)
    p.add_argument("--n_test", type=int, default=10000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--separation", type=float, default=0.3, help="class separation (0.3: ~80%% top-1)")
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument(
        "--backends", default="numpy,tf,sklearn", help="comma list of numpy, tf, sklearn, numpy_raw (no centring)"
    )
    p.add_argument("--num_regs", type=int, default=45, help="sweep size (45 = the paper's grid)")
    p.add_argument("--max_iter", type=int, default=logreg.MAX_ITER)
    p.add_argument("--gtol", type=float, default=logreg.DEFAULT_GTOL)
    p.add_argument("--ftol", type=float, default=logreg.DEFAULT_FTOL)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)

    n = args.n_train + args.n_val + args.n_test
    t0 = time.perf_counter()
    x, y = synthetic_features(n, args.dim, args.classes, separation=args.separation, noise=args.noise)
    xtr, ytr = x[: args.n_train], y[: args.n_train]
    xva, yva = x[args.n_train : args.n_train + args.n_val], y[args.n_train : args.n_train + args.n_val]
    xte, yte = x[args.n_train + args.n_val :], y[args.n_train + args.n_val :]
    print(f"features: train {xtr.shape} val {xva.shape} test {xte.shape} ({time.perf_counter() - t0:.1f}s)")
    regs = np.logspace(-6, 5, args.num_regs)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, {platform.python_version()}"
    print(f"machine: {machine}; sweep: {len(regs)} values in [1e-6, 1e5]; gtol={args.gtol} ftol={args.ftol}")
    results = []
    for backend in args.backends.split(","):
        res = logreg.linear_eval(
            xtr, ytr, xva, yva, xte, yte,
            metric="top1", regs=regs, backend=backend.replace("_raw", ""), max_iter=args.max_iter,
            gtol=args.gtol, ftol=args.ftol, center=not backend.endswith("_raw"),
            log=print if args.verbose else None,
        )
        row = {
            "backend": backend,
            "seconds": round(res.seconds, 1),
            "best_reg": res.best_reg,
            "best_val": max(res.val_scores),
            "test_top1": res.test_score,
            "iterations": int(sum(res.iterations) + res.refit_iterations),
            "max_iterations_one_fit": int(max(res.iterations)),
        }
        results.append(row)
        print(
            f"{backend:8s} {row['seconds']:8.1f}s  best_reg={row['best_reg']:.3e} val={row['best_val']:.4f} "
            f"test={row['test_top1']:.4f} iters={row['iterations']} (max one fit {row['max_iterations_one_fit']})",
            flush=True,
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "machine": machine, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
