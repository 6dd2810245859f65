"""``finetune``: backbone + linear classifier trained with L2SP (paper appendix, Table 10).

The training machinery is :mod:`augself_tf.evaluation.estimators.l2sp_finetune`; images are held in memory (use
``--max_examples`` on big datasets).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.l2sp_finetune import finetune_eval, total_steps
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class FinetuneOptions:
    """Knobs of fine-tuning (eval_main's ``--finetune_*`` flags).

    Attributes:
      alphas: α grid of the backbone's L2SP term.
      lrs: learning-rate grid.
      beta: β of the classifier's weight penalty.
      steps: SGD steps per run.
      batch_size: images per step.
      trials: seeds of the final train+val runs.
      momentum: SGD momentum.
      head_init: ``zeros`` or ``probe`` (linear probe on frozen features as the starting classifier).
      flip: random horizontal flips during fine-tuning.
    """

    alphas: tuple[float, ...] = option((0.001, 0.01, 0.1, 1.0), "L2SP alpha grid (backbone term).")
    lrs: tuple[float, ...] = option((0.005, 0.01, 0.02), "Fine-tuning learning-rate grid.")
    beta: float = option(0.01, "L2SP beta (classifier weights).")
    steps: int = option(1000, "SGD steps per fine-tuning run.")
    batch_size: int = option(64, "Images per fine-tuning step.")
    trials: int = option(5, "Seeds of the final train+val runs (95% t-interval).")
    momentum: float = 0.9
    head_init: str = option("zeros", "Initial classifier.", choices=("zeros", "probe"))
    flip: bool = True

    def __post_init__(self) -> None:
        if self.head_init not in ("zeros", "probe"):
            raise EvalError(f"--finetune_head_init must be zeros or probe, got {self.head_init!r}")
        if not self.alphas or not self.lrs or self.steps < 1 or self.trials < 1 or self.batch_size < 1:
            raise EvalError("fine-tuning needs non-empty α and lr grids and positive steps, trials, batch size")


def _images_labels(context: EvalContext, dataset: str, split: str, key: str) -> tuple[np.ndarray, ...]:
    xs, ys, ids = [], [], []
    for b in context.extractor.examples(dataset, split).batch(256):
        if key not in b:
            raise EvalError(f"finetune: examples of {dataset!r} have no {key!r} label")
        xs.append(b["image"].numpy())
        ys.append(b[key].numpy())
        ids.append(b["index"].numpy())
    if not xs:
        raise EvalError(f"finetune: {dataset}/{split} is empty")
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ids)


def run(context: EvalContext, model: LoadedModel, dataset: str, options: FinetuneOptions) -> Records:
    """Grid (α, lr) on validation, then ``trials`` seeds on train+val; mean test accuracy ± t-interval."""
    s, o = context.settings, options
    plan = context.splits(dataset)
    key = s.label_key
    xtr, ytr, itr = _images_labels(context, dataset, plan.train, key)
    xte, yte, _ = _images_labels(context, dataset, plan.test, key)
    if plan.val is not None:
        xva, yva, _ = _images_labels(context, dataset, plan.val, key)
        val_src = f"split '{plan.val}'"
    else:
        is_val, val_src = context.validation_mask(plan, itr)
        xva, yva = xtr[is_val], ytr[is_val]
        xtr, ytr = xtr[~is_val], ytr[~is_val]
    with context.progress(total_steps(o), f"[finetune] {model.name} {dataset}") as bar:
        res = finetune_eval(
            model.path, (xtr, ytr), (xva, yva), (xte, yte), o, seed=s.seed, input_name=model.input_name,
            output_key=model.output_key, log=context.log, progress=bar, strategy=s.strategy,
        )
    return [make_record(
        model=model.name, protocol="finetune", dataset=dataset, metric="top1_%", value=100.0 * res.mean,
        ci95=100.0 * res.ci95, n_train=len(ytr) + len(yva), n_test=len(yte), seconds=res.seconds,
        settings={
            **context.base_settings(), "label_key": key,
            "validation": val_src, **dataclasses.asdict(o), "best_alpha": res.best_alpha, "best_lr": res.best_lr,
            "grid_alpha_lr_val": res.grid, "trials_%": [100.0 * a for a in res.trials],
            "regulariser": "L2SP: alpha/2*||theta-theta0||^2 (backbone) + beta/2*||W||^2 (classifier weights)",
            "batch_norm": res.batch_norm, "replicas": res.replicas,
            "interval": "95% Student-t over trials",
        },
    )]


PROTOCOL = Protocol(FinetuneOptions, run, in_all=False, summary="fine-tuning with L2SP (Table 10)")
