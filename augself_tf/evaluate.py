"""Evaluate exported AugSelf backbones (SavedModels) with the paper's transfer protocols.

The same program is `python -m augself_tf.evaluate`, and `python eval_main.py` in a checkout. Examples:

  augself-eval --saved_model runs/simsiam/saved_model,runs/augself/saved_model \\
      --protocol linear --dataset cifar10 --image_size 96
  augself-eval --saved_model runs/augself/saved_model --protocol all --dataset shapes --max_examples 500
  augself-eval --saved_model m --protocol fewshot --dataset fc100 --fewshot_shots 1,5
  augself-eval --saved_model m --protocol linear --dataset shapes --label_key color

Writes one JSON record per (model, protocol, dataset) to --output (merged with records already there),
pictures beside it, and prints a markdown table with one column per model and the paper's figures.
Bad input (missing model, unusable signature, dataset unfit for the protocol) ends with one error line
on stderr and exit status 2. Progress goes to stderr: one line per regularisation sweep (every swept value
with --verbose) and a bar for a long feature extraction or fine-tuning; --quiet prints none.

The protocols, their --<protocol>_<option> flags and the set run by --protocol all come from the registry
in augself_tf/evaluation/protocols (docs/architecture.md, "Evaluation protocols").
"""

from __future__ import annotations

import os
import sys

from absl import flags, logging

from augself_tf.startup import import_tensorflow_quietly, run_program

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.evaluation.context import EvalSettings, ProbeOptions  # noqa: E402
from augself_tf.evaluation.protocols import PROTOCOLS, all_protocols  # noqa: E402
from augself_tf.flag_fields import define_flags, options_from_flags  # noqa: E402

PROTOCOL_CHOICES = (*PROTOCOLS, "all")

FLAGS = flags.FLAGS
# Importing this module defines the program's flags on absl's global FLAGS, one per option of every protocol
# registered by then (augself_tf.train's share names with them: a process imports one of the two). absl's
# --help lists the flags of the running program, sys.argv[0]: they are this program's whichever entry point
# imported it (augself-eval, eval_main.py, -m).
PROGRAM = sys.argv[0] if sys.argv and sys.argv[0] else __name__
_IN_HELP = {"module_name": PROGRAM}
flags.DEFINE_string("saved_model", None, "SavedModel directory, or several separated by commas (one column each).",
                   **_IN_HELP)
flags.DEFINE_string(
    "protocol", "linear",
    "One protocol, or several separated by commas: "
    + "; ".join(f"{name} = {p.summary}" for name, p in PROTOCOLS.items())
    + f"; all = {', '.join(all_protocols())}.",
    **_IN_HELP,
)
flags.DEFINE_string("dataset", "shapes", "Dataset spec: shapes, folder:PATH, a tfds name, or fc100.", **_IN_HELP)
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data directory.", **_IN_HELP)
_DEFAULTS = EvalSettings()  # the defaults are EvalSettings' own, written once there
flags.DEFINE_integer("image_size", _DEFAULTS.image_size, "Eval resolution: shorter side resized to it, then a "
                     "centre crop.", **_IN_HELP)
flags.DEFINE_string("output", None, "Results JSON (default <first saved_model>/../eval/results.json).", **_IN_HELP)
flags.DEFINE_integer("batch_size", _DEFAULTS.batch_size, "Images per model call.", **_IN_HELP)
flags.DEFINE_integer("max_examples", _DEFAULTS.max_examples, "Use at most this many examples per split "
                     "(fixed-seed subset).", **_IN_HELP)
flags.DEFINE_integer("seed", _DEFAULTS.seed, "Seed of subsets, validation hold-out, episodes, queries and "
                     "augmentations.", **_IN_HELP)
flags.DEFINE_string("label_key", _DEFAULTS.label_key, "Integer label to classify/probe (e.g. color for shapes).",
                    **_IN_HELP)
# The linear probe's solver is shared by linear, rotation, colorperm and robustness: --linear_backend, ...
define_flags("linear", ProbeOptions, FLAGS, PROGRAM)
for _name, _protocol in PROTOCOLS.items():  # --<protocol>_<option> for every option of every protocol
    define_flags(_name, _protocol.options, FLAGS, PROGRAM)
flags.DEFINE_enum(
    "strategy", "auto", ["auto", "one_device", "mirrored"],
    "tf.distribute strategy of fine-tuning (auto: mirrored over all GPUs, or over --cpu_replicas CPUs).",
    **_IN_HELP,
)
flags.DEFINE_integer("cpu_replicas", 1, "Logical CPU devices to split the CPU into (mirrored runs without GPUs).",
                     **_IN_HELP)
flags.DEFINE_string(
    "log_to", None,
    "Also write the results as TensorBoard scalars (eval/<protocol>/<dataset>/<metric>) into a training run, "
    "where the HParams dashboard lists them beside its settings: a model_dir (one --saved_model), or 'auto' = "
    "each SavedModel's own run (the directory holding it).",
    **_IN_HELP,
)
flags.DEFINE_bool("quiet", False, "No progress lines on stderr.", **_IN_HELP)
flags.DEFINE_bool("verbose", False, "Progress lines for every value of a regularisation sweep, not one per sweep.",
                  **_IN_HELP)
flags.DEFINE_bool("deterministic", False, "Bit-identical reruns: op determinism and, on CPU, one thread per op "
                  "(slower; matters for fine-tuning and the InfoNCE critic).", **_IN_HELP)

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
    parent = os.path.dirname(os.path.abspath(os.path.normpath(first_model)))
    out_dir = os.path.join(parent, "eval")
    try:
        os.makedirs(out_dir, exist_ok=True)
        if os.access(out_dir, os.W_OK):
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
        return os.path.dirname(os.path.abspath(os.path.normpath(saved_model)))
    return log_to


def run(argv_models: list[str], protocols: list[str], explicit: bool) -> int:
    """Evaluate; returns the exit status."""
    from augself_tf.evaluation import report
    from augself_tf.evaluation.context import EvalContext, log_stderr
    from augself_tf.evaluation.datasets import DataAccess
    from augself_tf.evaluation.errors import EvalError
    from augself_tf.evaluation.loading import load_model
    from augself_tf.evaluation.protocols import run_protocol, unfit_reason

    output = FLAGS.output or default_output(argv_models[0])
    # Options of the protocols that run only: a bad value of another protocol's flag does not matter.
    try:
        options = {name: options_from_flags(name, PROTOCOLS[name].options, FLAGS) for name in protocols}
        probe = options_from_flags("linear", ProbeOptions, FLAGS)
    except ValueError as e:  # a list flag whose items do not parse
        raise EvalError(str(e)) from None
    settings = EvalSettings(
        image_size=FLAGS.image_size, batch_size=FLAGS.batch_size, max_examples=FLAGS.max_examples, seed=FLAGS.seed,
        label_key=FLAGS.label_key, output_dir=os.path.dirname(os.path.abspath(output)), probe=probe,
        verbose=FLAGS.verbose,
    )
    log = None if FLAGS.quiet else log_stderr
    if FLAGS.deterministic:  # before TensorFlow runs an op
        from augself_tf.runtime.determinism import make_deterministic

        make_deterministic()
    if "finetune" in protocols:  # before TensorFlow touches a device: split_cpu must come first
        from augself_tf.runtime.strategy import make_strategy

        settings.strategy = make_strategy(FLAGS.strategy, FLAGS.cpu_replicas)
        if log:
            log(f"[eval] finetune on {settings.strategy.num_replicas_in_sync} replica(s) ({FLAGS.strategy})")
    models = [load_model(p) for p in argv_models]  # fail fast on every bad path
    names = [m.name for m in models]
    for i, m in enumerate(models):  # distinct column names
        if names.count(m.name) > 1:
            m.name = f"{m.name}#{i + 1}"
    context = EvalContext(settings, DataAccess(FLAGS.data_dir), log=log)
    records: list[dict] = []
    for protocol in protocols:
        if not explicit:
            reason = unfit_reason(context, protocol, FLAGS.dataset)
            if reason:
                if log:
                    log(f"[eval] skipping {protocol}: {reason}")
                continue
        for model in models:
            records.extend(run_protocol(context, model, protocol, FLAGS.dataset, options[protocol]))
            report.save_records(records, output)  # keep partial results if a later step fails
    report.save_records(records, output)
    if FLAGS.log_to:
        from augself_tf.runtime.tensorboard import log_eval_records

        for model, path in zip(models, argv_models, strict=True):
            run_dir = log_target(FLAGS.log_to, path)
            logged = log_eval_records(run_dir, [r for r in records if r["model"] == model.name])
            if log:
                log(f"[eval] {model.name}: results logged to TensorBoard in {logged}")
    table = report.markdown_table(records)
    with open(os.path.splitext(output)[0] + ".md", "w") as f:
        f.write(table + "\n")
    print(table)
    if log:
        log(f"[eval] wrote {output}")
    return 0


def main(argv: list[str]) -> int:
    """absl entry point."""
    if len(argv) > 1:
        fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.saved_model:
        fail("--saved_model is required")
    models = [p.strip() for p in FLAGS.saved_model.split(",") if p.strip()]
    if not models:
        fail("--saved_model is empty")
    for path in models:  # before any model loads: the common mistake fails fast and quietly
        if not os.path.exists(path):
            fail(f"SavedModel not found: {path}")
    if FLAGS.log_to and FLAGS.log_to != "auto":
        if len(models) > 1:
            fail(f"--log_to={FLAGS.log_to} names one run but {len(models)} SavedModels were given; "
                 "use --log_to=auto to log each to its own run")
        if not os.path.isdir(FLAGS.log_to):
            fail(f"--log_to: run directory not found: {FLAGS.log_to}")
    for name in ("image_size", "batch_size", "cpu_replicas"):
        if FLAGS[name].value < 1:
            fail(f"--{name} must be positive, got {FLAGS[name].value}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # tf.distribute's INFO lines would bury the progress lines
    if FLAGS.deterministic:
        from augself_tf.runtime.determinism import restart_without_onednn

        restart_without_onednn()
    protocols = parse_protocols(FLAGS.protocol)
    explicit = "all" not in [p.strip() for p in FLAGS.protocol.split(",")]
    from augself_tf.evaluation.errors import EvalError

    try:
        return run(models, protocols, explicit)
    except EvalError as e:
        fail(str(e))
    return 0


def cli() -> None:
    """The ``augself-eval`` command: parse the command line and run :func:`main`."""
    run_program(main, __doc__)


if __name__ == "__main__":
    cli()
