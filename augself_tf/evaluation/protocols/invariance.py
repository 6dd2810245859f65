"""``invariance``: cosine similarity of augmented views' features to the original's (the paper's table)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators import view_similarity
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class InvarianceOptions:
    """Augmented views drawn per test image."""

    views: int = option(1, "Augmented views per test image for the invariance metric.")

    def __post_init__(self) -> None:
        if self.views < 1:
            raise EvalError(f"--invariance_views must be positive, got {self.views}")


def run(context: EvalContext, model: LoadedModel, dataset: str, options: InvarianceOptions) -> Records:
    """Mean cosine over (test image, view) pairs ± 95% interval."""
    s, views_per_image = context.settings, options.views
    plan = context.splits(dataset)
    start = time.perf_counter()
    original = context.features(model, dataset, plan.test)
    views = []
    for v in range(views_per_image):
        fn = view_similarity.make_view_fn(s.image_size, s.seed, v, views_per_image)
        fs = context.features(model, dataset, plan.test, view=fn, view_name=f"aug{v}of{views_per_image}s{s.seed}")
        if not np.array_equal(fs.fields["index"], original.fields["index"]):
            raise EvalError("invariance: augmented views are not aligned with the originals")
        views.append(fs.features)
    res = view_similarity.invariance_from_features(original.features, views)
    return [make_record(
        model=model.name, protocol="invariance", dataset=dataset, metric="cosine", value=res.mean,
        ci95=res.ci95, n_test=res.images, seconds=time.perf_counter() - start,
        settings={
            **context.base_settings(), "views_per_image": res.views, "samples": res.samples,
            "augmentation": f"AugmentConfig(image_size={s.image_size}) defaults",
            "space": "backbone f (the paper measures the projector g∘f)",
        },
    )]


PROTOCOL = Protocol(InvarianceOptions, run, summary="cosine of augmented views to the original (invariance)")
