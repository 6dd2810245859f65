"""Does augself-tf work, and run fast, on this machine? Run this first on new hardware and share the JSON it writes.

    augself-selfcheck                       # everything (minutes on GPUs; --paper_size on CPU for ResNet-50)
    augself-selfcheck --quick               # the short form: two methods, the default size only
    augself-selfcheck --quick --cpu_replicas=2   # the multi-replica path on a CPU-only machine

The same program is `python -m augself_tf.selfcheck`. One line per check, in four sections: environment
(versions, CUDA/cuDNN, devices, native dtypes, the reduction, the matmul peak), correctness (all replicas against
one device, float16/bfloat16 finite, float16 overflow on one replica, XLA), placement (host-memory ops in the
step, input pipeline against the step) and speed (pairs/s and share of the matmul peak). Exit status 1 when a
correctness or placement check fails, 2 on a bad flag, else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable

PROGRAM = "augself-selfcheck"
QUICK_METHODS = ("simsiam", "moco")
SECTION_NAMES = ("environment", "correctness", "placement", "speed")
EXIT_BAD_FLAG = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as the other commands (argparse prints usage)
        sys.stderr.write(f"{PROGRAM}: error: {message} (--help lists the flags)\n")
        sys.exit(EXIT_BAD_FLAG)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the short form: simsiam and moco (XLA and timings of "
                   "simsiam only), short timings, the default size only")
    p.add_argument("--cpu_replicas", type=int, default=1, help="split the CPU into N logical devices (the "
                   "multi-replica path without GPUs); ignored when GPUs are visible")
    p.add_argument("--strategy", default="auto", choices=("auto", "one_device", "mirrored", "tpu"),
                   help="the strategy, as augself-train's --strategy (default: auto)")
    p.add_argument("--tpu", default=None, help="the TPU of --strategy=tpu, as augself-train's --tpu")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: every method; simsiam,moco "
                   "under --quick)")
    p.add_argument("--sections", default=",".join(SECTION_NAMES), help="comma-separated sections to run "
                   f"(default: {','.join(SECTION_NAMES)})")
    p.add_argument("--paper_size", action="store_true", help="also time the ImageNet-100 settings (ResNet-50, "
                   "224 px) under --quick or on CPU, where they are skipped by default")
    p.add_argument("--steps", type=int, default=None, help="steps of each correctness comparison (default 3; 2 "
                   "under --quick)")
    p.add_argument("--seconds", type=float, default=None, help="seconds each timing runs for (default 5; 1 under "
                   "--quick)")
    p.add_argument("--output", default="augself_selfcheck.json", help="the JSON file to write (default: "
                   "augself_selfcheck.json)")
    return p


@dataclasses.dataclass(frozen=True)
class Settings:
    """The parsed and checked flags."""

    quick: bool
    cpu_replicas: int
    strategy: str
    tpu: str | None
    methods: tuple[str, ...]
    sections: tuple[str, ...]
    paper_size: bool
    steps: int
    seconds: float
    output: str


def parse(argv: list[str]) -> Settings:
    """The settings of ``argv`` (without the program name); a bad flag is one line on stderr and exit 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()  # after --help and the flags argparse rejects; before anything imports TensorFlow
    from augself_tf.methods import METHODS

    methods = tuple(m for m in (args.methods or ",".join(QUICK_METHODS if args.quick else METHODS)).split(",") if m)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        parser.error(f"--methods: unknown method {unknown[0] if unknown else '(none given)'}; choose from "
                     f"{', '.join(METHODS)}")
    sections = tuple(s for s in args.sections.split(",") if s)
    if not sections or any(s not in SECTION_NAMES for s in sections):
        parser.error(f"--sections={args.sections}: choose among {','.join(SECTION_NAMES)}")
    if args.cpu_replicas < 1:
        parser.error(f"--cpu_replicas={args.cpu_replicas}: must be at least 1")
    steps = args.steps if args.steps is not None else (2 if args.quick else 3)
    seconds = args.seconds if args.seconds is not None else (1.0 if args.quick else 5.0)
    if steps < 1 or seconds <= 0:
        parser.error("--steps must be at least 1 and --seconds above 0")
    output_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(output_dir):
        parser.error(f"--output={args.output}: no directory {output_dir}")
    return Settings(args.quick, args.cpu_replicas, args.strategy, args.tpu, methods, sections, args.paper_size,
                    steps, seconds, args.output)


def main(argv: list[str] | None = None, tamper: Callable[[object], None] | None = None) -> int:
    """Runs the self-check; returns the exit status. ``tamper`` changes the multi-replica model of each
    all-replicas-against-one-device comparison and the model of the placement's traced step before their steps
    are built (a test plants a per-replica difference or a host op with it)."""
    argv = sys.argv[1:] if argv is None else argv
    settings = parse(argv)
    import tensorflow as tf

    # Each check builds its own step function from the same Python function, which TF reports as "retracing";
    # every one is traced once, on purpose (as bench/common.py silences it too).
    tf.get_logger().setLevel("ERROR")

    from augself_tf.runtime.strategy import make_strategy
    from augself_tf.selfcheck import correctness, environment, placement, speed
    from augself_tf.selfcheck.harness import Setup
    from augself_tf.selfcheck.verdicts import Report

    t0 = time.perf_counter()
    try:
        strategy = make_strategy(settings.strategy, settings.cpu_replicas, settings.tpu)
    except (ValueError, RuntimeError) as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return EXIT_BAD_FLAG
    report = Report()
    print(f"{PROGRAM}: {strategy.num_replicas_in_sync} replica(s) of {type(strategy).__name__}, TensorFlow "
          f"{tf.__version__}; methods {','.join(settings.methods)}{' (--quick)' if settings.quick else ''}", flush=True)
    peaks: dict[str, float] = {}
    if "environment" in settings.sections:
        for check in environment.checks(strategy, settings.seconds / 2, report.facts):
            report.add(check)
        peaks = report.facts.get("peak_flops", {})
    fast = report.facts.get("fast_dtype") or _fast_dtype(strategy)
    # The small setting of the correctness and placement checks: the run's model and step at 1/16 width, 16 px.
    small = Setup(method=settings.methods[0])
    if "correctness" in settings.sections:
        correctness.run(report, strategy, settings.methods, small, settings.steps, tamper, settings.quick)
    replicas = strategy.num_replicas_in_sync
    default = speed.default_setup(settings.methods[0], replicas, settings.quick, 0)

    def step_rate() -> float:
        return speed.measure(strategy, default, settings.seconds, peaks).pairs_per_sec

    if "placement" in settings.sections:
        placement.run(report, strategy, settings.methods[0], small, default, settings.seconds, step_rate, tamper)
    if "speed" in settings.sections:
        on_cpu = not placement.accelerators(strategy)
        paper = settings.paper_size or not (settings.quick or on_cpu)
        speed.run(report, strategy, settings.methods, quick=settings.quick, seconds=settings.seconds, peaks=peaks,
                  fast=fast, paper_size=paper)
    seconds = time.perf_counter() - t0
    print(f"\n{report.summary()} in {seconds:.0f} s", flush=True)
    report.write(settings.output, command=[PROGRAM, *argv], settings=dataclasses.asdict(settings), seconds=seconds,
                 replicas=replicas, strategy=type(strategy).__name__)
    print(f"Wrote {settings.output}: share it with the report of a problem.")
    return report.exit_status()


def _fast_dtype(strategy) -> str:
    from augself_tf.runtime.strategy import preferred_mixed_precision

    tpu = any("TPU" in d.upper() for d in strategy.extended.worker_devices)
    return "bfloat16" if tpu else preferred_mixed_precision()


def cli() -> None:
    """The ``augself-selfcheck`` command."""
    sys.exit(main())
