"""Evaluate exported AugSelf backbones (SavedModels) with the paper's transfer protocols.

The same program is `python -m augself_tf.evaluate`, and `python eval_main.py` in a checkout. Examples:

  augself-eval --saved_model runs/simsiam/saved_model,runs/augself/saved_model \\
      --protocol linear --dataset cifar10 --image_size 96
  augself-eval --saved_model runs/augself/saved_model --protocol all --dataset shapes --max_examples 500
  augself-eval --saved_model m --protocol fewshot --dataset fc100 --fewshot_shots 1,5
  augself-eval --saved_model m --protocol linear --dataset shapes --label_key color
  augself-eval --saved_model runs/looc/saved_model --signature looc_plus_features   # LooC++

Writes one JSON record per (model, protocol, dataset) to --output (merged with records already there),
pictures beside it, and prints a markdown table with one column per model and the paper's figures.
Bad input (missing model, unusable signature, dataset unfit for the protocol) ends with one error line
on stderr and exit status 2. Progress goes to stderr: one line per regularisation sweep (every swept value
with --verbose) and a bar for a long feature extraction or fine-tuning; --quiet prints none.

The protocols, their --<protocol>_<option> flags and the set run by --protocol all come from the registry
in augself_tf/evaluation/protocols (docs/architecture.md, "Evaluation protocols").
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

from absl import flags, logging

from augself_tf.startup import import_tensorflow_quietly, run_program

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.evaluation import report  # noqa: E402
from augself_tf.evaluation.context import EvalContext, EvalSettings, ProbeOptions, log_stderr  # noqa: E402
from augself_tf.evaluation.datasets import DataAccess  # noqa: E402
from augself_tf.evaluation.estimators.errors import EvalError  # noqa: E402
from augself_tf.evaluation.loading import DEFAULT_SIGNATURE, LoadedModel, load_model  # noqa: E402
from augself_tf.evaluation.protocols import PROTOCOLS, all_protocols, run_protocol, unfit_reason  # noqa: E402
from augself_tf.flag_fields import define_flags, option, options_from_flags, values_from_flags  # noqa: E402
from augself_tf.runtime import files  # noqa: E402

PROTOCOL_CHOICES = (*PROTOCOLS, "all")


@dataclasses.dataclass
class EvalCommand:
    """eval_main's own flags: what to evaluate, where results go, how it runs (`EvalSettings` holds the
    settings the protocols share)."""

    saved_model: str | None = option(None, "SavedModel directory, or several separated by commas (one column "
                                           "each).")
    signature: str = option("serving_default", "SavedModel signature whose features are evaluated: serving_default = "
                                               "the backbone's (every export); looc_plus_features = LooC++, every "
                                               "LooC space's head output concatenated (--method=looc exports).")
    protocol: str = option("linear", lambda: "One protocol, or several separated by commas: " + "; ".join(
        f"{name} = {p.summary}" for name, p in PROTOCOLS.items()) + f"; all = {', '.join(all_protocols())}.")
    dataset: str = option("shapes", "Dataset spec: shapes, folder:PATH, a tfds name, or fc100.")
    data_dir: str | None = option(None, "tensorflow-datasets data directory.")
    output: str | None = option(None, "Results JSON (default <first saved_model>/../eval/results.json).")
    strategy: str = option("auto", "tf.distribute strategy of fine-tuning (auto: mirrored over all GPUs, or over "
                                   "--cpu_replicas CPUs).", choices=("auto", "one_device", "mirrored"))
    cpu_replicas: int = option(1, "Logical CPU devices to split the CPU into (mirrored runs without GPUs).",
                               minimum=1)
    log_to: str | None = option(None, "Also write the results as TensorBoard scalars (eval/<protocol>/<dataset>/"
                                      "<metric>) into a training run, where the HParams dashboard lists them beside "
                                      "its settings: a model_dir (one --saved_model), or 'auto' = each SavedModel's "
                                      "own run (the directory holding it).")
    quiet: bool = option(False, "No progress lines on stderr.")
    deterministic: bool = option(False, "Bit-identical reruns: op determinism and, on CPU, one thread per op "
                                        "(slower; matters for fine-tuning and the InfoNCE critic).")


FLAGS = flags.FLAGS
# Importing this module defines the program's flags on absl's global FLAGS, one per option of every protocol
# registered by then (augself_tf.train's share names with them: a process imports one of the two). absl's
# --help lists the flags of the running program, sys.argv[0]: they are this program's whichever entry point
# imported it (augself-eval, eval_main.py, -m).
PROGRAM = sys.argv[0] if sys.argv and sys.argv[0] else __name__
define_flags("", EvalCommand, FLAGS, PROGRAM)
define_flags("", EvalSettings, FLAGS, PROGRAM)
# The linear probe's solver is shared by linear, rotation, colorperm and robustness: --linear_backend, ...
define_flags("linear", ProbeOptions, FLAGS, PROGRAM)
for _name, _protocol in PROTOCOLS.items():  # --<protocol>_<option> for every option of every protocol
    define_flags(_name, _protocol.options, FLAGS, PROGRAM)


def eval_settings_from_flags(flag_values, output_dir: str = ".") -> EvalSettings:
    """The shared `EvalSettings` from eval_main's parsed flags (``--linear_*`` for the probe).

    Raises:
      ValueError: a value below its minimum (a non-positive --image_size, ...).
    """
    return EvalSettings(**values_from_flags("", EvalSettings, flag_values), output_dir=output_dir,
                        probe=options_from_flags("linear", ProbeOptions, flag_values))


def program_name() -> str:
    """The command's name for error lines: ``augself-eval``, or ``eval_main`` when run as eval_main.py."""
    name = os.path.splitext(os.path.basename(PROGRAM))[0]
    if not name or name.startswith("-") or os.path.abspath(PROGRAM) == os.path.abspath(__file__):
        return "augself-eval"  # python -c / python -m augself_tf.evaluate: the program is the command's
    return name


def fail(message: str) -> None:
    """Print one error line on stderr and exit with status 2 (bad input, no traceback)."""
    print(f"{program_name()}: error: {message}", file=sys.stderr)
    sys.exit(2)


def default_output(first_model: str) -> str:
    """``<model>/../eval/results.json`` if that directory can be created, else ``./eval_results.json``."""
    out_dir = os.path.join(_parent(first_model), "eval")
    try:
        files.makedirs(out_dir)
        if files.is_url(out_dir) or os.access(out_dir, os.W_OK):
            return os.path.join(out_dir, "results.json")
    except OSError:
        pass
    return os.path.abspath("eval_results.json")


def parse_protocols(text: str) -> list[str]:
    """Comma-separated protocol names ('all' expands to the protocols of :func:`all_protocols`)."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        fail("--protocol is empty")
    out: list[str] = []
    for name in names:
        if name == "all":  # the analyses (colorinfo, ...) run only when named
            out.extend(p for p in all_protocols() if p not in out)
        elif name in PROTOCOLS:
            if name not in out:
                out.append(name)
        else:
            fail(f"unknown --protocol {name!r}: use {', '.join(PROTOCOL_CHOICES)}")
    return out


def log_target(log_to: str, saved_model: str) -> str:
    """The run directory --log_to names for one SavedModel: the directory itself, or with 'auto' its parent."""
    if log_to == "auto":
        return _parent(saved_model)
    return log_to


def _parent(path: str) -> str:
    """The directory holding ``path`` (local: made absolute and normalised first; a URL as given)."""
    return files.parent(path if files.is_url(path) else os.path.normpath(path))


def main(argv: list[str]) -> int:
    """absl entry point: the command line checked (bad input: one error line, exit status 2), then :func:`run`."""
    paths = check_command_line(argv)
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # tf.distribute's INFO lines would bury the progress lines
    if FLAGS.deterministic:
        from augself_tf.runtime.determinism import restart_without_onednn

        restart_without_onednn()
    protocols = parse_protocols(FLAGS.protocol)
    explicit = "all" not in [p.strip() for p in FLAGS.protocol.split(",")]
    try:
        return run(paths, protocols, explicit)
    except EvalError as e:
        fail(str(e))
    return 0


def run(argv_models: list[str], protocols: list[str], explicit: bool) -> int:
    """Evaluate every SavedModel of ``argv_models`` with ``protocols`` (``explicit``: named on the command line, so
    none is skipped as unfit for the dataset); returns the exit status.

    Raises:
      EvalError: bad input found on the way (an unusable SavedModel or signature, a dataset unfit for a protocol
        that was named, a flag value that does not parse).
    """
    plan = prepare(argv_models, protocols, explicit)  # output, settings, each protocol's options, the devices
    models = load_models(plan)  # every SavedModel before anything runs, one distinct column name each
    records = run_protocols(plan, models)  # each protocol (fit for the dataset) on each model, saved as it goes
    write_report(plan, models, records)  # the results JSON, TensorBoard if asked, the markdown table
    return 0


def check_command_line(argv: list[str]) -> list[str]:
    """The SavedModel paths of --saved_model, after the checks that need no model loaded: no stray arguments, every
    path there, --log_to's run directory, the settings' minimums. Each failure ends the program (:func:`fail`)."""
    if len(argv) > 1:
        fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.saved_model:
        fail("--saved_model is required")
    paths = [p.strip() for p in FLAGS.saved_model.split(",") if p.strip()]
    if not paths:
        fail("--saved_model is empty")
    for path in paths:  # before any model loads: the common mistake fails fast and quietly
        if not files.exists(path):
            fail(f"SavedModel not found: {path}")
    if FLAGS.log_to and FLAGS.log_to != "auto":
        if len(paths) > 1:
            fail(f"--log_to={FLAGS.log_to} names one run but {len(paths)} SavedModels were given; "
                 "use --log_to=auto to log each to its own run")
        if not files.isdir(FLAGS.log_to):
            fail(f"--log_to: run directory not found: {FLAGS.log_to}")
    try:  # the minimums the fields declare: a non-positive --image_size, --batch_size or --cpu_replicas
        eval_settings_from_flags(FLAGS)
        options_from_flags("", EvalCommand, FLAGS)
    except ValueError as e:
        fail(str(e))
    return paths


@dataclasses.dataclass
class EvalPlan:
    """One evaluation resolved from the flags: what runs, with which settings, and where its results go."""

    paths: list[str]  # the SavedModels, in --saved_model's order
    protocols: list[str]
    explicit: bool  # the protocols were named: none is skipped as unfit for the dataset
    output: str  # the results JSON
    settings: EvalSettings
    options: dict  # protocol name -> its options
    log: Callable[[str], None] | None  # progress on stderr (None: --quiet)


def prepare(argv_models: list[str], protocols: list[str], explicit: bool) -> EvalPlan:
    """The plan of the run, and TensorFlow set up for it before it runs an op: op determinism, and for fine-tuning
    its distribution strategy (which splits the CPU first)."""
    output = FLAGS.output or default_output(argv_models[0])
    # Options of the protocols that run only: a bad value of another protocol's flag does not matter.
    try:
        options = {name: options_from_flags(name, PROTOCOLS[name].options, FLAGS) for name in protocols}
        settings = eval_settings_from_flags(FLAGS, output_dir=files.parent(output))
    except ValueError as e:  # a list flag whose items do not parse
        raise EvalError(str(e)) from None
    log = None if FLAGS.quiet else log_stderr
    if FLAGS.deterministic:  # before TensorFlow runs an op
        from augself_tf.runtime.determinism import make_deterministic

        make_deterministic()
    if "finetune" in protocols:  # before TensorFlow touches a device: split_cpu must come first
        from augself_tf.runtime.strategy import make_strategy

        settings.strategy = make_strategy(FLAGS.strategy, FLAGS.cpu_replicas)
        if log:
            log(f"[eval] finetune on {settings.strategy.num_replicas_in_sync} replica(s) ({FLAGS.strategy})")
    if "finetune" in protocols and FLAGS.signature != DEFAULT_SIGNATURE:
        raise EvalError(f"--protocol=finetune trains the backbone ({DEFAULT_SIGNATURE}); --signature="
                        f"{FLAGS.signature} is for the frozen-feature protocols")
    return EvalPlan(argv_models, protocols, explicit, output, settings, options, log)


def load_models(plan: EvalPlan) -> list[LoadedModel]:
    """Every SavedModel of the plan loaded (the first bad path fails before anything runs), each named by a distinct
    column: a name two models share gets ``#<position>``."""
    models = [load_model(p, FLAGS.signature) for p in plan.paths]
    names = [m.name for m in models]
    for i, m in enumerate(models):
        if names.count(m.name) > 1:
            m.name = f"{m.name}#{i + 1}"
    return models


def run_protocols(plan: EvalPlan, models: list[LoadedModel]) -> list[dict]:
    """Each protocol on each model, in the plan's order: the records, saved to the plan's output after each (a later
    failure keeps the results so far). Under ``--protocol all`` a protocol unfit for the dataset is skipped."""
    context = EvalContext(plan.settings, DataAccess(FLAGS.data_dir), log=plan.log)
    records: list[dict] = []
    for protocol in plan.protocols:
        if not plan.explicit:
            reason = unfit_reason(context, protocol, FLAGS.dataset)
            if reason:
                if plan.log:
                    plan.log(f"[eval] skipping {protocol}: {reason}")
                continue
        for model in models:
            records.extend(run_protocol(context, model, protocol, FLAGS.dataset, plan.options[protocol]))
            report.save_records(records, plan.output)  # keep partial results if a later step fails
    return records


def write_report(plan: EvalPlan, models: list[LoadedModel], records: list[dict]) -> None:
    """The records saved (merged into the results JSON), logged to each model's TensorBoard run with --log_to, and
    their markdown table written beside the JSON (``.md``) and printed."""
    report.save_records(records, plan.output)
    if FLAGS.log_to:
        from augself_tf.runtime.tensorboard import log_eval_records

        for model, path in zip(models, plan.paths, strict=True):
            run_dir = log_target(FLAGS.log_to, path)
            logged = log_eval_records(run_dir, [r for r in records if r["model"] == model.name])
            if plan.log:
                plan.log(f"[eval] {model.name}: results logged to TensorBoard in {logged}")
    table = report.markdown_table(records)
    files.write_text(os.path.splitext(plan.output)[0] + ".md", table + "\n")
    print(table)
    if plan.log:
        plan.log(f"[eval] wrote {plan.output}")


def cli() -> None:
    """The ``augself-eval`` command: parse the command line and run :func:`main`."""
    run_program(main, __doc__)


if __name__ == "__main__":
    cli()
