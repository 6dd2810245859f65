"""``localization``: linear regression from frozen features to the object's box (the paper's CUB200 table)."""

from __future__ import annotations

import dataclasses

import numpy as np

from augself_tf.evaluation import plots
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators import box_regression
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record


@dataclasses.dataclass
class LocalizationOptions:
    """No options: the regressor is sklearn's plain ``LinearRegression``."""


def unfit(context: EvalContext, dataset: str) -> str | None:
    """Why ``all`` skips localization on ``dataset`` (no boxes), or None."""
    return None if context.has_boxes(dataset) else f"dataset {dataset!r} has no boxes"


def run(context: EvalContext, model: LoadedModel, dataset: str, options: LocalizationOptions) -> Records:
    """Fit on train boxes, squared error on test boxes, and a picture of 16 test predictions."""
    if not context.has_boxes(dataset):
        raise EvalError(
            f"localization needs boxes, but dataset {dataset!r} has no 'bbox' (use caltech_birds2011, shapes, "
            "or a folder with boxes.csv)"
        )
    plan = context.splits(dataset)
    train = context.features(model, dataset, plan.train)
    test = context.features(model, dataset, plan.test, keep_images=True)
    res = box_regression.localization_eval(train.features, train.fields["bbox"], test.features, test.fields["bbox"])
    rng = np.random.default_rng(context.settings.seed)
    shown = np.sort(rng.choice(len(res.test_rows), size=min(16, len(res.test_rows)), replace=False))
    path = plots.draw_boxes(
        test.images[res.test_rows[shown]], res.targets[shown], res.predictions[shown],
        context.figure_path(model, "localization", dataset),
        title=f"{model.name} on {dataset}: mse {res.mse:.5f}",
    )
    return [make_record(
        model=model.name, protocol="localization", dataset=dataset, metric="mse", value=res.mse,
        n_train=res.n_train, n_test=res.n_test, seconds=res.seconds,
        settings={
            **context.base_settings(), "target": "(x_topleft, y_topleft, width, height) fractions of the crop",
            "mse": res.mse, "mean_squared_l2": res.mean_sq_l2, "mean_l2": res.mean_l2,
            "mean_iou": res.mean_iou, "regressor": "sklearn LinearRegression", "figure": path,
        },
    )]


PROTOCOL = Protocol(LocalizationOptions, run, unfit=unfit, summary="box regression from features (CUB200)")
