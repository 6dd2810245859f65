"""``linear``: logistic regression on frozen features (the paper's linear transfer protocol)."""

from __future__ import annotations

import dataclasses

from augself_tf.data.catalog import linear_metric
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class LinearOptions:
    """The linear protocol's own option (the solver's are the shared ``ProbeOptions``)."""

    metric: str = option("auto", "Linear test metric.", choices=("auto", "top1", "mean_per_class"))


def run(context: EvalContext, model: LoadedModel, dataset: str, options: LinearOptions) -> Records:
    """Sweep on validation, refit on train+val, the dataset's metric on test."""
    s = context.settings
    (split,) = context.train_val_test(model, dataset)
    train, val, test = split.train, split.val, split.test
    key = s.label_key
    metric = linear_metric(dataset, options.metric)
    res = context.linear_probe(
        (train.features, train.labels(key)), (val.features, val.labels(key)), (test.features, test.labels(key)), metric
    )
    p = s.probe
    settings = {
        **context.base_settings(), "label_key": key, "validation": split.validation, "n_val": len(val),
        "backend": p.backend, "gtol": p.gtol, "max_iter": p.max_iter,
        "regulariser": "sum CE + reg*||W||^2 (sklearn C = 1/(2 reg)); features not standardised",
        **res.summary(),
    }
    return [make_record(
        model=model.name, protocol="linear", dataset=dataset, metric=f"{metric}_%",
        value=100.0 * res.test_score, n_train=len(train) + len(val), n_test=len(test),
        settings=settings, seconds=res.seconds,
    )]


PROTOCOL = Protocol(LinearOptions, run, summary="logistic regression on frozen features (transfer)")
