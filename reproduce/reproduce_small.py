"""CPU-scale reproduction of the paper's effect, advanced in pieces through a results ledger.

    augself-reproduce                      # every arm not yet in the ledger (~4-5 h on 2 cores)
    augself-reproduce --time_budget=60     # only the arms that fit in an hour
    augself-reproduce --arms='tiny-simsiam-*-s1'  # some arms (globs on names or ids)
    augself-reproduce --list               # the arms, what is done, what is left
    augself-reproduce --report_only        # table, curves and docs/results.md from the ledger
    augself-reproduce --quick              # smoke version of the whole pipeline (CI)
    augself-reproduce --suite=looc         # the LooC comparison: the paper's LooC table (same flags)
    augself-reproduce --suite=aware        # the augmentation-aware family's comparison (same flags)
    augself-reproduce --suite=recipe       # the ledger recipe's sweep, judged on a held-out split
    augself-reproduce --suite=comparison   # the README's rows and the family with controls, at the ledger recipe
    augself-reproduce --suite=vit          # MoCo v3 and DINO ± AugSelf on the CPU-scale ViT and the ResNet

An arm is one pretraining run (data, method, AugSelf set, conditioning set, seed, budget) and its
evaluations with eval_main.py. Each finished arm writes reproduce/ledger/<arm id>.json (its settings,
commit, machine, wall times, evaluation records and monitor curves; no weights); arms with an entry for
the same settings are not run again. Run directories live under runs/reproduce_small/<name>-t<hash of the
training settings> (not committed): an interrupted arm resumes from its checkpoint when the command runs
again, and an arm whose evaluations changed keeps its training and redoes only the changed calls. What an arm
is: reproduce/arm_settings.py; the ledger's entries: reproduce/ledger.py (schema in reproduce/ledger/README.md);
running arms: reproduce/ledger_runner.py (run directories in run_directory.py, estimates in time_estimates.py).
The arm sets (``--suite``) are registered in reproduce/suites.py, each with its arms in reproduce/<suite>_arms.py
and its report in reproduce/<suite>_report.py. Each suite's report reads only its own entries (the aware suite's
SimSiam ± AugSelf rows are the looc suite's entries, the comparison's floor the looc suite's floor) and writes its own
block of docs/results.md.
``augself-reproduce`` is the command of an editable install (``pip install -e .``); ``python -m
reproduce.reproduce_small`` from the checkout's root is the same program. Either reads and writes the checkout it
imports this package from (reproduce/ledger.py's ``ROOT``) and stops with one line anywhere else.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from reproduce import arm_settings, ledger, ledger_runner, run_directory, step_times, time_estimates
from reproduce.suites import SUITES

ROOT = ledger.ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=tuple(SUITES), default="main",
                   help="arm set, each with its own report block: "
                        + "; ".join(f"{s.name} ({s.help})" for s in SUITES.values()))
    p.add_argument("--arms", default=None, help="comma-separated globs on arm names or ids (default: all); they run in "
                   "the suite's order, whatever the order given")
    p.add_argument("--time_budget", type=float, default=None, metavar="MINUTES",
                   help="start no arm that its measured seconds per step say would not finish in time")
    p.add_argument("--report_only", action="store_true", help="regenerate the report from the ledger; run nothing")
    p.add_argument("--list", action="store_true", help="print the arms and their status; run nothing")
    p.add_argument("--time_steps", action="store_true",
                   help="time one arm of every setting back to back (2 rounds of 40 steps, alternating order) into "
                        "LEDGER/timings/SUITE.json, then regenerate the report (the looc and aware tables' s/step); "
                        "run on an otherwise idle machine")
    p.add_argument("--no_report", action="store_true", help="do not regenerate the report after running arms")
    p.add_argument("--quick", action="store_true",
                   help="smoke version: 2 shapes arms of 2 steps, small evaluations, own ledger under --out")
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"),
                   help="directory holding tiny-imagenet-mini, cifar10-mini and flowers17")
    p.add_argument("--out", default=None,
                   help="run directories (default runs/reproduce_small; --quick: runs/reproduce_small_<suite>_quick)")
    p.add_argument("--ledger", default=None, help="ledger directory (default reproduce/ledger; --quick: OUT/ledger)")
    p.add_argument("--results_md", default=None, help="document with the generated block (default docs/results.md)")
    p.add_argument("--curves", default=None,
                   help="the suite's picture (main: monitor curves, default docs/img/reproduce_small_curves.png; "
                        "looc, aware, comparison: omega_probe heat map, default docs/img/<suite>_omega_probe.png; "
                        "vit: kNN and teacher-entropy curves, default docs/img/vit_curves.png; --quick: the same "
                        "file name under --out)")
    p.add_argument("--epochs", type=int, default=None, help="tiny-imagenet budget's epochs (new arms; default 120)")
    p.add_argument("--width", type=float, default=None, help="tiny-imagenet budget's width (new arms; default 0.25)")
    args = p.parse_args(argv)
    args.prog = p.prog.removesuffix(".py")  # augself-reproduce, or reproduce_small under python -m
    suite = SUITES[args.suite]
    picture = suite.picture()
    if args.quick:
        args.out = os.path.abspath(args.out or os.path.join(ROOT, "runs", f"reproduce_small_{args.suite}_quick"))
        args.ledger = args.ledger or os.path.join(args.out, "ledger")
        args.results_md = args.results_md or os.path.join(args.out, "results.md")
        args.curves = args.curves or os.path.join(args.out, picture)
        docs = os.path.join(ROOT, "docs") + os.sep
        for path in (args.ledger, args.results_md, args.curves):
            if os.path.abspath(path).startswith(docs):
                p.error(f"--quick never writes under docs/: {path}")
    else:
        args.out = os.path.abspath(args.out or os.path.join(ROOT, "runs", "reproduce_small"))
        args.ledger = args.ledger or os.path.join(ROOT, "reproduce", "ledger")
        args.results_md = args.results_md or os.path.join(ROOT, "docs", "results.md")
        args.curves = args.curves or os.path.join(ROOT, "docs", "img", picture)
    return args


def _terminate(signum, frame):  # noqa: ARG001
    """SIGTERM (a scheduler's pre-emption) stops like Ctrl-C: the child is interrupted, the state kept."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The reproduction's command line (the module docstring); the exit status."""
    args = parse_args(argv)
    error = ledger.checkout_error(args.prog, "run `python -m reproduce.reproduce_small` from its root, or "
                                             f"`pip install -e .` there and then `{ledger.COMMAND}`")
    if error:
        print(error, file=sys.stderr)
        return 2
    suite = SUITES[args.suite]
    if args.quick and suite.quick_arms is None:
        print(f"{args.prog}: error: --quick has no {suite.name} suite ({suite.no_quick})", file=sys.stderr)
        return 2
    arms = (suite.quick_arms() if args.quick
            else suite.arms(ledger.load_entries(args.ledger), args.epochs, args.width))
    command, write_report = suite.command, suite.write_report
    command += " --quick" if args.quick else ""
    if args.report_only:
        block = write_report(args.ledger, arms, args.results_md, args.curves, command)
        print(block)
        print(f"\nwrote {args.results_md}" + (f" and {args.curves}" if "![" in block else ""))
        return 0
    try:
        selected = arm_settings.select_arms(arms, args.arms)
    except ValueError as e:
        print(f"{args.prog}: error: {e}", file=sys.stderr)
        return 2
    ctx = run_directory.Context(root=ROOT, data_dir=os.path.abspath(args.data), out_dir=args.out,
                                ledger_dir=args.ledger)
    if args.quick:
        ctx.poll_seconds = 1.0
    if args.list:
        entries = ledger.load_entries(args.ledger)
        for arm in selected:
            est = None if ledger.has_entry(args.ledger, arm) else time_estimates.estimate(arm, ctx, entries, False)
            left = "" if est is None else f"; ~{est.seconds / 60:.0f} min left ({est.why})"
            print(f"{arm.name:32s} {arm.id}  {run_directory.status_line(arm, ctx)}{left}")
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    if args.time_steps:
        try:
            record = step_times.measure(selected, ctx, args.suite if args.suite != "main" else "")
        except KeyboardInterrupt:
            ctx.log("interrupted; nothing written")
            return 130
        for name, t in record["settings"].items():
            ctx.log(f"{name}: {t['median']:.3f} s/step (median of {len(t['timings'])})")
        if not args.no_report:
            write_report(args.ledger, arms, args.results_md, args.curves, command)
        return 0
    try:
        result = ledger_runner.run_arms(selected, ctx, args.time_budget)
    except KeyboardInterrupt:
        ctx.log("interrupted; run the same command again to resume")
        return 130
    ctx.log(f"finished: {len(result['done'])} arm(s) done, {len(result['skipped'])} skipped, "
            f"{len(result['failed'])} failed" + (f" ({', '.join(result['failed'])})" if result["failed"] else ""))
    if not args.no_report:
        write_report(args.ledger, arms, args.results_md, args.curves, command)
        ctx.log(f"regenerated {args.results_md} from {args.ledger}")
    return 1 if result["failed"] else 0


def cli() -> None:
    """``augself-reproduce`` and ``python -m reproduce.reproduce_small``: :func:`main`, exiting with its status."""
    try:
        sys.exit(main())
    except BrokenPipeError:  # `--list | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    cli()
