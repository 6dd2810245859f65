"""``retrieval``: top-k cosine neighbours among the test images, precision@k and a picture."""

from __future__ import annotations

import dataclasses

from augself_tf.evaluation import plots
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators import neighbours
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class RetrievalOptions:
    """Neighbours per query, and how many queries the figure shows."""

    k: int = option(4, "Neighbours per retrieval query.")
    queries: int = option(8, "Queries pictured in the retrieval figure.")


def run(context: EvalContext, model: LoadedModel, dataset: str, options: RetrievalOptions) -> Records:
    """precision@k over every test image as a query."""
    s = context.settings
    plan = context.splits(dataset)
    test = context.features(model, dataset, plan.test, keep_images=True)
    labels = test.labels(s.label_key)
    res = neighbours.retrieval_eval(test.features, labels, k=options.k, num_queries=options.queries, seed=s.seed)
    path = plots.draw_retrieval(
        test.images, res.shown_queries, res.shown_neighbours, labels,
        context.figure_path(model, "retrieval", dataset),
        title=f"{model.name} on {dataset}: top-{res.k} cosine neighbours",
        class_names=context.class_names(dataset, plan.test),
    )
    return [make_record(
        model=model.name, protocol="retrieval", dataset=dataset, metric=f"precision@{res.k}_%",
        value=100.0 * res.precision, n_test=res.n, seconds=res.seconds,
        settings={
            **context.base_settings(), "label_key": s.label_key, "k": res.k,
            "queries": "every test image (self excluded)", "shown_queries": res.shown_queries,
            "shown_precision_%": 100.0 * res.shown_precision, "figure": path,
        },
    )]


PROTOCOL = Protocol(RetrievalOptions, run, summary="cosine nearest neighbours, precision@k (figure)")
