"""``fewshot``: N-way K-shot episodes, logistic regression on the support features (the paper's few-shot)."""

from __future__ import annotations

import dataclasses

import numpy as np

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.datasets import fewshot_split
from augself_tf.evaluation.estimators import fewshot_episodes
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class FewshotOptions:
    """Episodes: N, the K values, Q, how many, and the solver."""

    ways: int = option(5, "N of N-way episodes.")
    shots: tuple[int, ...] = option((1, 5), "K values of K-shot episodes.")
    queries: int = option(16, "Query images per class per episode.")
    episodes: int = option(2000, "Episodes per (N, K).")
    solver: str = option("newton", "Few-shot logistic-regression solver.", choices=fewshot_episodes.SOLVERS)


def run(context: EvalContext, model: LoadedModel, dataset: str, options: FewshotOptions) -> Records:
    """One record per K: mean query accuracy over episodes ± 95% interval."""
    s, o = context.settings, options
    split = fewshot_split(context.access, dataset)
    pool = context.features(model, dataset, split)
    labels = pool.labels(s.label_key)
    out = []
    for shots in o.shots:
        res = fewshot_episodes.fewshot_eval(
            pool.features, labels, ways=o.ways, shots=shots, queries=o.queries, episodes=o.episodes, seed=s.seed,
            solver=o.solver,
        )
        context.log(f"  {o.ways}-way {shots}-shot: {100 * res.mean:.2f} ± {100 * res.ci95:.2f} ({res.seconds:.1f}s)")
        out.append(make_record(
            model=model.name, protocol=f"fewshot_{o.ways}way_{shots}shot", dataset=dataset,
            metric="accuracy_%", value=100.0 * res.mean, ci95=100.0 * res.ci95, n_train=None, n_test=len(pool),
            settings={
                **context.base_settings(), "pool_split": split, "label_key": s.label_key,
                "ways": o.ways, "shots": shots, "queries": o.queries, "episodes": o.episodes, "solver": o.solver,
                "classifier": "multinomial logistic regression, C=1 (sklearn default objective)",
                "classes_in_pool": int(len(np.unique(labels[labels >= 0]))),
            },
            seconds=res.seconds,
        ))
    return out


PROTOCOL = Protocol(FewshotOptions, run, summary="N-way K-shot episodes (few-shot transfer)")
