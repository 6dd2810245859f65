"""Does the ω probe read what an AugSelf model's own heads read? Both on the same pairs of one trained run.

    python -m reproduce.probe_vs_head --run=runs/reproduce_small/tiny-moco-augself-s0-t3ac1d2e0 \
        --dataset=folder:../shared/data/tiny-imagenet-mini --image_size=64

For a run trained with AugSelf (its directory holds ``saved_model/``, ``checkpoints/`` and ``run.json``), the
``omega_probe`` protocol's own view pairs of the dataset's train and test splits are extracted from the
SavedModel; the probe is fitted on the train pairs as the protocol fits it, and the run's AugSelf heads φ (read
from its latest checkpoint, run in NumPy in inference mode: Linear–BN–ReLU ×2, Linear) predict the same test
pairs. Printed per AugSelf task: the head's R² (tanh of its output, as its loss reads it) or accuracy, the
probe's, and the target's variance. A probe far below the head would under-read what the features keep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BN_EPSILON = 1e-5  # augself_tf.models.resnet's batch norm (PyTorch's default)


def head_predictions(checkpoint: str, name: str, pairs: np.ndarray) -> np.ndarray:
    """The run's AugSelf head ``name`` on [f1, f2] rows, in inference mode (BN moving statistics)."""
    import tensorflow as tf

    from augself_tf.training.checkpoints import saved_name

    # Where the heads sit: under the AugSelf objective, or (checkpoints written before the objectives had one home)
    # under the model's augself_heads.
    keys = {k for k, _ in tf.train.list_variables(checkpoint)}
    owners = (f"model/objectives/augself/augself_{name}", f"model/augself_heads/{name}/augself_{name}")
    owner = next((o for o in owners if saved_name(f"{o}/augself_{name}_fc1/kernel") in keys), owners[0])

    def var(layer: str, v: str) -> np.ndarray:
        return tf.train.load_variable(checkpoint, saved_name(f"{owner}/augself_{name}_{layer}/{v}"))

    z = pairs.astype(np.float64)
    for i in (1, 2):
        z = z @ var(f"fc{i}", "kernel")
        mean, variance = var(f"bn{i}", "moving_mean"), var(f"bn{i}", "moving_variance")
        z = (z - mean) / np.sqrt(variance + BN_EPSILON) * var(f"bn{i}", "gamma") + var(f"bn{i}", "beta")
        z = np.maximum(z, 0.0)
    return z @ var("fc3", "kernel") + var("fc3", "bias")


def compare(run: str, dataset: str, image_size: int, max_train_pairs: int, seed: int) -> list[dict]:
    """One row per AugSelf task of the run: head and probe scores on the same test pairs."""
    import tensorflow as tf

    from augself_tf.augment import AUGMENTATIONS, steps
    from augself_tf.evaluation.context import EvalContext, EvalSettings
    from augself_tf.evaluation.estimators import omega_regression
    from augself_tf.evaluation.loading import load_model
    from augself_tf.evaluation.protocols import omega_probe

    with open(os.path.join(run, "run.json")) as f:
        tasks = [t.split(":")[0] for t in json.load(f)["model"]["augself"]]
    if not tasks:
        raise SystemExit(f"{run} was trained without AugSelf: it has no heads to compare the probe with")
    checkpoint = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    context = EvalContext(EvalSettings(image_size=image_size, seed=seed, output_dir=os.path.join(run, "probe_vs_head")))
    model = load_model(os.path.join(run, "saved_model"))
    x_tr, t_tr, groups, x_te, t_te = omega_probe.probe_pairs(context, model, dataset, tuple(tasks), max_train_pairs)
    probe = omega_regression.probe_omega(x_tr, t_tr, groups, x_te, t_te, seed=seed)
    rows = []
    for name in tasks:
        out = head_predictions(checkpoint, name, x_te)
        truth = np.asarray(t_te[name].values)
        if AUGMENTATIONS[name].loss is steps.tanh_mse:
            head = omega_regression.r2_components(truth, np.tanh(out))[1]
            metric, variance = "R2", float(truth.reshape(len(truth), -1).var(axis=0).mean())
        else:
            guess = (out[:, 0] > 0).astype(int) if out.shape[1] == 1 else np.argmax(out, axis=1)
            head, metric, variance = float(np.mean(guess == truth)), "accuracy", None
        rows.append({"task": name, "metric": metric, "head": float(head), "probe": probe[name].value,
                     "target_variance": variance, "test_pairs": len(x_te), "train_pairs": len(x_tr)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a train_main model_dir trained with AugSelf")
    p.add_argument("--dataset", default=f"folder:{os.path.join(ROOT, '..', 'shared', 'data', 'tiny-imagenet-mini')}")
    p.add_argument("--image_size", type=int, default=64)
    p.add_argument("--max_train_pairs", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    for part in ("saved_model", "checkpoints", "run.json"):
        if not os.path.exists(os.path.join(a.run, part)):
            print(f"probe_vs_head: {a.run} has no {part}; give a train_main --model_dir", file=sys.stderr)
            return 2
    from augself_tf.startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    rows = compare(a.run, a.dataset, a.image_size, a.max_train_pairs, a.seed)
    print("| task | metric | run's own head | omega_probe | target variance |\n|---|---|---|---|---|")
    for r in rows:
        var = "" if r["target_variance"] is None else f"{r['target_variance']:.4f}"
        print(f"| {r['task']} | {r['metric']} | {r['head']:.3f} | {r['probe']:.3f} | {var} |")
    if a.output:
        with open(a.output, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
