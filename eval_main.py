"""Evaluate exported AugSelf backbones (SavedModels) with the paper's transfer protocols.

Examples:

  python eval_main.py --saved_model runs/simsiam/saved_model,runs/augself/saved_model \\
      --protocol linear --dataset cifar10 --image_size 96
  python eval_main.py --saved_model runs/augself/saved_model --protocol all --dataset shapes --max_examples 500
  python eval_main.py --saved_model m --protocol fewshot --dataset fc100 --fewshot_shots 1,5
  python eval_main.py --saved_model m --protocol linear --dataset shapes --label_key color

Writes one JSON record per (model, protocol, dataset) to --output (merged with records already there),
pictures beside it, and prints a markdown table with one column per model and the paper's figures.
Bad input (missing model, unusable signature, dataset unfit for the protocol) ends with one error line
on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags, logging

PROTOCOL_CHOICES = (
    "linear", "fewshot", "localization", "rotation", "colorperm", "retrieval", "invariance", "colorinfo", "robustness",
    "finetune", "all",
)
# Analyses (docs/analyses.md): run only when named; their options are the flags with these prefixes.
ANALYSES = ("colorinfo", "robustness", "finetune")
ANALYSIS_FLAG_PREFIXES = ("colorinfo_", "robustness_", "finetune_")

FLAGS = flags.FLAGS
flags.DEFINE_string("saved_model", None, "SavedModel directory, or several separated by commas (one column each).")
flags.DEFINE_string("protocol", "linear", f"One of {', '.join(PROTOCOL_CHOICES)}, or several separated by commas.")
flags.DEFINE_string("dataset", "shapes", "Dataset spec: shapes, folder:PATH, a tfds name, or fc100.")
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data directory.")
flags.DEFINE_integer("image_size", 96, "Eval resolution: shorter side resized to it, then a centre crop.")
flags.DEFINE_string("output", None, "Results JSON (default <first saved_model>/../eval/results.json).")
flags.DEFINE_integer("batch_size", 128, "Images per model call.")
flags.DEFINE_integer("max_examples", None, "Use at most this many examples per split (fixed-seed subset).")
flags.DEFINE_integer("seed", 0, "Seed of subsets, validation hold-out, episodes, queries and augmentations.")
flags.DEFINE_string("label_key", "label", "Integer label to classify/probe (e.g. color for shapes).")
flags.DEFINE_enum("linear_metric", "auto", ["auto", "top1", "mean_per_class"], "Linear test metric.")
flags.DEFINE_enum(
    "linear_backend", "auto", ["auto", "numpy", "tf", "sklearn"],
    "Logistic-regression solver: auto = TF matmuls for large problems, numpy for small (bench/bench_linear.py).",
)
flags.DEFINE_integer("linear_regs", 45, "Regularisation values swept in [1e-6, 1e5] (paper: 45).")
flags.DEFINE_float("linear_gtol", 1e-4, "L-BFGS gradient tolerance on the mean-scaled objective.")
flags.DEFINE_integer("linear_max_iter", 5000, "L-BFGS iterations per fit at most (paper: 5000).")
flags.DEFINE_integer("fewshot_ways", 5, "N of N-way episodes.")
flags.DEFINE_list("fewshot_shots", ["1", "5"], "K values of K-shot episodes.")
flags.DEFINE_integer("fewshot_queries", 16, "Query images per class per episode.")
flags.DEFINE_integer("fewshot_episodes", 2000, "Episodes per (N, K).")
flags.DEFINE_enum("fewshot_solver", "newton", ["newton", "sklearn"], "Few-shot logistic-regression solver.")
flags.DEFINE_integer("retrieval_k", 4, "Neighbours per retrieval query.")
flags.DEFINE_integer("retrieval_queries", 8, "Queries pictured in the retrieval figure.")
flags.DEFINE_integer("invariance_views", 1, "Augmented views per test image for the invariance metric.")
flags.DEFINE_integer("colorinfo_bins", 4, "Colour histogram bins per RGB channel (bins^3 cells).")
flags.DEFINE_integer("colorinfo_batch", 128, "N of the InfoNCE bound (the bound is at most log N).")
flags.DEFINE_integer("colorinfo_steps", 300, "Adam steps of the InfoNCE critic.")
flags.DEFINE_integer("colorinfo_seeds", 3, "Independent critic trainings.")
flags.DEFINE_integer("colorinfo_eval_batches", 10, "Random test batches per critic.")
flags.DEFINE_list("robustness_eps", ["1", "2", "4"], "FGSM step sizes in units of 1/255.")
flags.DEFINE_list("robustness_corruptions", ["fog", "frost", "snow"], "Weather corruptions to apply.")
flags.DEFINE_list("robustness_severities", ["1", "2", "3", "4", "5"], "Corruption severities averaged (1..5).")
flags.DEFINE_list("finetune_alphas", ["0.001", "0.01", "0.1", "1"], "L2SP alpha grid (backbone term).")
flags.DEFINE_list("finetune_lrs", ["0.005", "0.01", "0.02"], "Fine-tuning learning-rate grid.")
flags.DEFINE_float("finetune_beta", 0.01, "L2SP beta (classifier weights).")
flags.DEFINE_integer("finetune_steps", 1000, "SGD steps per fine-tuning run.")
flags.DEFINE_integer("finetune_batch_size", 64, "Images per fine-tuning step.")
flags.DEFINE_integer("finetune_trials", 5, "Seeds of the final train+val runs (95% t-interval).")
flags.DEFINE_enum("finetune_head_init", "zeros", ["zeros", "probe"], "Initial classifier.")
flags.DEFINE_enum(
    "strategy", "auto", ["auto", "one_device", "mirrored"],
    "tf.distribute strategy of fine-tuning (auto: mirrored over all GPUs, or over --cpu_replicas CPUs).",
)
flags.DEFINE_integer("cpu_replicas", 1, "Logical CPU devices to split the CPU into (mirrored runs without GPUs).")
flags.DEFINE_bool("quiet", False, "No progress lines on stderr.")
flags.DEFINE_bool("deterministic", False, "Bit-identical reruns: op determinism and, on CPU, one thread per op "
                  "(slower; matters for fine-tuning and the InfoNCE critic).")


def fail(message: str) -> None:
    """Print one error line on stderr and exit with status 2 (bad input, no traceback)."""
    print(f"eval_main: error: {message}", file=sys.stderr)
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
    """Comma-separated protocol names ('all' expands to every protocol)."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        fail("--protocol is empty")
    protocols = [p for p in PROTOCOL_CHOICES if p != "all"]
    out: list[str] = []
    for name in names:
        if name == "all":  # the analyses (colorinfo, ...) run only when named
            out.extend(p for p in protocols if p not in out and p not in ANALYSES)
        elif name in protocols:
            if name not in out:
                out.append(name)
        else:
            fail(f"unknown --protocol {name!r}: use {', '.join(PROTOCOL_CHOICES)}")
    return out


def analysis_options() -> dict:
    """The analyses' flags (``colorinfo_*``, ...) by name, for :class:`EvalConfig.analysis_options`."""
    return {
        name: FLAGS[name].value for name in FLAGS if isinstance(name, str) and name.startswith(ANALYSIS_FLAG_PREFIXES)
    }


def run(argv_models: list[str], protocols: list[str], explicit: bool) -> int:
    """Evaluate; returns the exit status."""
    from augself_tf.evaluation import report
    from augself_tf.evaluation.datasets import DataAccess
    from augself_tf.evaluation.features import load_model, log_stderr
    from augself_tf.evaluation.protocols import EvalConfig, Evaluator

    try:
        shots = tuple(int(s) for s in FLAGS.fewshot_shots)
    except ValueError:
        fail(f"--fewshot_shots must be integers, got {','.join(FLAGS.fewshot_shots)}")
    output = FLAGS.output or default_output(argv_models[0])
    # Flags named like an EvalConfig field fill it (as train_main's TrainConfig); the rest are assembled here.
    from_flags = {f.name: FLAGS[f.name].value for f in dataclasses.fields(EvalConfig) if f.name in FLAGS}
    config = EvalConfig(**{
        **from_flags,
        "fewshot_shots": shots,
        "output_dir": os.path.dirname(os.path.abspath(output)),
        "analysis_options": analysis_options(),
        "strategy": None,  # --strategy names one; it is built below only when fine-tuning needs it
    })
    log = None if FLAGS.quiet else log_stderr
    if FLAGS.deterministic:  # before TensorFlow runs an op
        from augself_tf.training.determinism import make_deterministic

        make_deterministic()
    if "finetune" in protocols:  # before TensorFlow touches a device: split_cpu must come first
        from augself_tf.training.strategy import make_strategy

        config.strategy = make_strategy(FLAGS.strategy, FLAGS.cpu_replicas)
        if log:
            log(f"[eval] finetune on {config.strategy.num_replicas_in_sync} replica(s) ({FLAGS.strategy})")
    models = [load_model(p) for p in argv_models]  # fail fast on every bad path
    names = [m.name for m in models]
    for i, m in enumerate(models):  # distinct column names
        if names.count(m.name) > 1:
            m.name = f"{m.name}#{i + 1}"
    evaluator = Evaluator(config, DataAccess(FLAGS.data_dir), log=log)
    records: list[dict] = []
    for protocol in protocols:
        if not explicit:
            reason = evaluator.applicable(protocol, FLAGS.dataset)
            if reason:
                if log:
                    log(f"[eval] skipping {protocol}: {reason}")
                continue
        for model in models:
            records.extend(evaluator.run(model, protocol, FLAGS.dataset))
            report.save_records(records, output)  # keep partial results if a later step fails
    report.save_records(records, output)
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
    for path in models:  # before TensorFlow starts: the common mistake fails fast and quietly
        if not os.path.exists(path):
            fail(f"SavedModel not found: {path}")
    for name in ("image_size", "batch_size", "cpu_replicas"):
        if FLAGS[name].value < 1:
            fail(f"--{name} must be positive, got {FLAGS[name].value}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # tf.distribute's INFO lines would bury the progress lines
    if FLAGS.deterministic:
        from augself_tf.training.determinism import restart_without_onednn

        restart_without_onednn()
    protocols = parse_protocols(FLAGS.protocol)
    explicit = "all" not in [p.strip() for p in FLAGS.protocol.split(",")]
    from augself_tf.evaluation.errors import EvalError

    try:
        return run(models, protocols, explicit)
    except EvalError as e:
        fail(str(e))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
