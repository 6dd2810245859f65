"""Step parity: two full training steps of our TF code against the reference semantics written in PyTorch.

For each of SimSiam, MoCo v2 and BYOL with AugSelf{crop, color}, the harness
  1. builds our model exactly as ``augself_tf.training.loop.train`` does (``build_backbone``, ``build_method``,
     ``build_all``, ``build_optimizer`` with a cosine schedule over ``--total_steps``);
  2. builds the reference in PyTorch (``reference_torch/``) and copies EVERY TF weight into it (Keras conv
     kernels HWIO → torch OIHW, Dense kernels transposed, BN γ/β/moving statistics, the EMA target networks,
     MoCo's queue), so both start from identical state;
  3. makes two batches of views + ω with our pipeline (``augself_tf.data.pretrain.two_views`` on real
     Tiny-ImageNet images); TF gets the [0, 1] views (our backbone normalises them in its first layer, here
     with STL10's mean/std), torch gets them normalised with those constants as the reference's last transform;
     torch's AugSelf targets are recomputed independently in NumPy from ω (``reference_torch.extract_diff``);
  4. runs step 1 at lr₀ and step 2 at the cosine schedule's next lr (a changing lr, so momentum semantics
     matter) on both sides, and compares, per step: the losses (method, crop, colour), every gradient, the
     update of every optimized weight, the BN running means and variances (online and target networks),
     the EMA target weights (MoCo's key encoder, BYOL's target) and MoCo's queue.

Our gradients are taken with a tape over ``compute_losses`` at the pre-step state, every model variable is
then restored (that forward pass moved the BN statistics) and ``train_step`` runs the step itself.

Error measure (one number per quantity group and step: the max over its tensors). For a quantity read
directly (losses, gradients): max|ours − ref| / max|ref| per tensor. For a state after a step (weights, BN
statistics, targets, queue): max|ours − ref| / max|ref − ref_before|, i.e. relative to how far the step
moved it — comparing the weights themselves would hide a wrong update behind the unchanged bulk of the
weight. Such a ratio has a float32 rounding floor of about ε₃₂·max|ref|/max|Δref| (the stored weight is
rounded to its ulp whatever the update), reported as ``floor``; an EMA target with m = 0.999 moves by
1e-3 of an update, so its floor is high. A group passes when error ≤ ``--tol`` + 4·floor.

Tolerance: the two sides run float32 with different conv/matmul kernels (torch's and TF's own oneDNN / Eigen),
different summation orders in the BN statistics and the loss reductions. Each such op contributes relative
errors of ~1e-7–1e-6, and a ResNet-18 forward + backward through ~20 BN layers at batch 8 (whose 1/σ
amplifies small differences where a channel's batch variance is small) compounds them to 1e-6–1e-5 on the
gradients (measured ≤ 1e-5, ≤ 1e-4 with ``--chained``): ``--tol 1e-3`` leaves 2.5× over the worst tensor
(a mathematically zero one, see ``DEGENERATE``) and is 28× below the smallest effect of any bug in
``--inject`` (docs/experiments.md, "Step parity with the reference semantics").

From the repository root (it imports ``bench.common``, so it runs as a module):

    pip install -r bench/parity/requirements-parity.txt    # torch (CPU wheel); not a project dependency
    python -m bench.parity.parity                           # all three methods: PASS/FAIL per quantity
    python -m bench.parity.parity --inject keras_momentum   # one deliberate bug: must print FAIL, exit 1
    python -m bench.parity.parity --inject all              # the bug table: exit 0 iff every bug is caught
    python -m bench.parity.parity --emulate no_normalisation,biased_running_var,keras_momentum
        # the reference with our pre-fix semantics: isolates exactly those differences

Exit status: 0 when every group passes (``--inject all``: when every bug is caught by at least one group).

This file is the command (flags, the loop over methods, baselines and bugs); beside it: ``tf_side.py`` (our
model, views and steps), ``weight_map.py`` (which TF variable is which torch weight), ``reference_side.py``
(the reference built and run from our state), ``comparison.py`` (errors, verdicts, tables) and
``reference_torch/`` (the reference semantics in PyTorch).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if not __package__:
    sys.exit("parity: run it from the repository root as a module: python -m bench.parity.parity [flags]")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from bench.parity import reference_torch as ref  # noqa: E402
from bench.parity.comparison import compare, failing_groups, print_table  # noqa: E402
from bench.parity.reference_side import reference_run  # noqa: E402
from bench.parity.tf_side import build_tf, make_batches, run_tf  # noqa: E402
from bench.parity.weight_map import variable_map  # noqa: E402

METHODS = ("simsiam", "moco", "byol")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--backbone", default="resnet18", choices=["resnet18", "resnet18_cifar"])
    p.add_argument("--width", type=float, default=0.125)
    p.add_argument("--image_size", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05, help="lr of step 1 (the schedule's base lr)")
    p.add_argument("--total_steps", type=int, default=4, help="cosine schedule length: step 2 runs at "
                   "lr·(1 + cos(π/K))/2 (0.854·lr at K = 4)")
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--tau", type=float, default=0.996, help="BYOL base τ")
    p.add_argument("--key_momentum", type=float, default=0.999, help="MoCo key-encoder momentum")
    p.add_argument("--queue_size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the views")
    p.add_argument("--chained", action="store_true", help="step 2 continues each side's own step 1 instead "
                   "of both starting from our post-step-1 state")
    p.add_argument("--tol", type=float, default=1e-3, help="relative tolerance (module docstring)")
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "tiny-imagenet-mini"))
    p.add_argument("--emulate", default="", help="bugs injected into the reference as the baseline, e.g. our "
                   "pre-fix semantics: no_normalisation,biased_running_var,keras_momentum; several baselines "
                   "separated by ';' are each compared with the same TF run")
    p.add_argument("--inject", default="", help="a bug of reference_torch.BUGS (comma-separated for several), "
                   "or 'all' for the bug table")
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    baselines = [tuple(b for b in group.split(",") if b) for group in args.emulate.split(";")]
    injected = tuple(ref.BUGS) if args.inject == "all" else tuple(b for b in args.inject.split(",") if b)
    for baseline in baselines:
        ref.Bugs(baseline + injected)  # validates the names

    torch.set_num_threads(1)  # a shared 2-core machine; also keeps torch's reductions in one order
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from bench.common import machine_info, print_machine

    print_machine(machine_info())
    print(f"# torch {torch.__version__}; {args.backbone} width {args.width}, {args.image_size} px, batch "
          f"{args.batch_size}, lr {args.lr} (cosine over {args.total_steps} steps), wd {args.wd}, tol {args.tol}")
    batches = make_batches(args.data, args.batch_size, args.image_size, args.seed)

    all_ok, table = True, []
    for method in methods:
        t0 = time.perf_counter()
        model, options = build_tf(method, args)
        entries = variable_map(model, method)
        ours = run_tf(model, entries, batches)
        print(f"# {method}: TF steps in {time.perf_counter() - t0:.0f} s; lr {ours['lr']}", flush=True)

        for baseline in baselines:
            def reference(bugs: tuple[str, ...], context=(method, model, options, entries, ours, baseline)):
                return reference_run(*context, batches, args, bugs)

            label = method + (f" vs the reference with {'+'.join(baseline)}" if baseline else "")
            if args.inject != "all":
                theirs = reference(injected)
                if injected:
                    label += f" (+ injected {'+'.join(injected)})"
                all_ok &= print_table(label, compare(ours, theirs), args.tol, theirs["kinks"])
                continue
            clean_record = reference(())
            clean = compare(ours, clean_record)
            print_table(label, clean, args.tol, clean_record["kinks"])
            for bug in injected:
                if method not in ref.BUGS[bug][0] or bug in baseline:
                    continue
                errors = compare(ours, reference((bug,)))
                fails = failing_groups(errors, args.tol)
                caught = bool(set(fails) - set(failing_groups(clean, args.tol)))
                all_ok &= caught
                signal = max(err for groups in errors.values() for err, _, _ in groups.values())
                table.append((bug, label, caught, signal, fails))
    if table:
        print("\n## bug table (a bug is caught when some group fails that passes without it)")
        print(f"{'bug':<24} {'method':<8} {'caught':<7} {'max error':>9}  failing groups (quantity@step)")
        for bug, label, caught, signal, fails in table:
            print(f"{bug:<24} {label:<8} {'yes' if caught else 'NO':<7} {signal:>9.1e}  {' '.join(fails)}")
    print(f"\n{'PASS' if all_ok else 'FAIL'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
