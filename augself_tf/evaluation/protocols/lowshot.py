"""``lowshot``: k labelled images of every class, a linear classifier, mean ± std over draws (LooC's protocol).

The maths (draws, the regulariser's cross-validation inside the k-shot set, the fits) is in
:mod:`augself_tf.evaluation.estimators.lowshot_draws`. The k images are drawn from the labelled images that are not
test: the train split and the dataset's own validation split when it has one (tfds Flowers-102 has 10
train + 10 validation images per class, so 10-shot needs both); the test split is scored whole.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from augself_tf.data.catalog import linear_metric
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators import lowshot_draws
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option

SELECTION = ("cross-validation inside the k-shot set: shot position j of every class in fold j mod F, "
             "F = min(folds, k); the linear protocol's grid swept strong to weak per fold; best mean held-out "
             "score (ties: stronger); refit on all k images per class")
RULE = "every class needs at least k + 1 pool images (else an error), so that draws differ"


@dataclasses.dataclass
class LowshotOptions:
    """k values, draws, folds and metric (eval_main's ``--lowshot_*``; the solver's are ``--linear_*``)."""

    shots: tuple[int, ...] = option((5, 10), "k of lowshot: labelled images of EVERY class (LooC: 5 and 10).")
    draws: int = option(5, "Random draws of the k images per class, for each k (mean ± std over them).")
    folds: int = option(5, "Cross-validation folds inside the k-shot set that choose the regulariser (at most k).")
    metric: str = option("auto", "Lowshot test metric (auto: the dataset's linear metric).",
                         choices=("auto", "top1", "mean_per_class"))

    def __post_init__(self) -> None:
        if not self.shots or any(int(k) < 2 for k in self.shots):
            raise EvalError(f"--lowshot_shots must be integers >= 2 (cross-validation needs 2), got {self.shots}")
        if self.draws < 1:
            raise EvalError(f"--lowshot_draws must be positive, got {self.draws}")
        if self.folds < 2:
            raise EvalError(f"--lowshot_folds must be at least 2, got {self.folds}")


def run(context: EvalContext, model: LoadedModel, dataset: str, options: LowshotOptions) -> Records:
    """One record per k: the mean test score over draws, its 95% t-interval, the std in the settings."""
    s, o = context.settings, options
    plan = context.splits(dataset)
    pools = [context.features(model, dataset, plan.train)]
    if plan.val is not None:
        pools.append(context.features(model, dataset, plan.val))
    test = context.features(model, dataset, plan.test)
    key = s.label_key
    x_pool = np.concatenate([p.features for p in pools])
    y_pool = np.concatenate([p.labels(key) for p in pools])
    metric = linear_metric(dataset, o.metric)
    p = s.probe
    out = []
    for shots in o.shots:
        res = lowshot_draws.lowshot_eval(
            x_pool, y_pool, test.features, test.labels(key), shots=int(shots), draws=o.draws, seed=s.seed,
            regs=p.grid(), folds=o.folds, metric=metric, backend=p.backend, max_iter=p.max_iter, gtol=p.gtol,
            log=context.log if s.verbose else None,
        )
        context.log(f"  lowshot {shots}-shot: {100 * res.mean:.2f} ± {100 * res.std:.2f} (std over {o.draws} "
                    f"draws, {res.classes} classes, {res.seconds:.1f}s)")
        out.append(make_record(
            model=model.name, protocol=f"lowshot_{shots}shot", dataset=dataset, metric=f"{metric}_%",
            value=100.0 * res.mean, ci95=100.0 * res.ci95, n_train=res.n_train, n_test=len(test),
            settings={
                **context.base_settings(), "label_key": key, "shots": int(shots), "draws": o.draws,
                "std_%": 100.0 * res.std, "ci95": "Student-t 95% half-width over draws (std_% is LooC's ±)",
                "per_draw_%": [100.0 * v for v in res.scores], "best_regs": res.best_regs,
                "folds": res.folds, "classes": res.classes,
                "pool": "+".join([plan.train] + ([plan.val] if plan.val else [])), "pool_size": len(y_pool),
                "regulariser_selection": SELECTION, "class_rule": RULE,
                "backend": p.backend, "regs": len(p.grid()), "gtol": p.gtol, "max_iter": p.max_iter,
                "regulariser": "sum CE + reg*||W||^2 (sklearn C = 1/(2 reg)); features not standardised",
            },
            seconds=res.seconds,
        ))
    return out


# Not in `all`: 5 draws x 5 folds of the 45-value sweep per k cost ~30x the linear protocol's solve (2 min of
# the tiny-imagenet-mini run whose other `all` protocols take 1.7 min together: docs/analyses.md).
PROTOCOL = Protocol(LowshotOptions, run, in_all=False,
                    summary="k labelled images of every class, linear (LooC's low-shot)")
