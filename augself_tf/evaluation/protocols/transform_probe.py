"""The pretext probes' shared part: which transform an image shows, predicted by a linear probe.

Every image appears under every transform (balanced classes). Used by ``rotation`` and ``colorperm``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.transforms import ImageTransform


@dataclasses.dataclass
class NoOptions:
    """The probes take no options of their own (the solver's are the shared ``ProbeOptions``)."""


def transform_probe(
    context: EvalContext, model: LoadedModel, dataset: str, name: str, transforms: Sequence[ImageTransform]
) -> tuple[dict, dict]:
    """Fit and score the probe; returns (record fields, settings) for the caller to complete."""
    parts = context.train_val_test(model, dataset, transforms)
    sets = []
    for per_transform in ([p.train for p in parts], [p.val for p in parts], [p.test for p in parts]):
        feats = np.concatenate([fs.features for fs in per_transform])
        labels = np.concatenate([np.full(len(fs), j) for j, fs in enumerate(per_transform)])  # class = transform
        sets.append((feats, labels))
    res = context.linear_probe(*sets, metric="top1")
    settings = {
        **context.base_settings(), "classes": [t.name for t in transforms], "validation": parts[0].validation,
        "backend": context.settings.probe.backend,
        "views": "every image under every transform (balanced classes)", **res.summary(),
    }
    fields = dict(
        model=model.name, protocol=name, dataset=dataset, metric="accuracy_%", value=100.0 * res.test_score,
        n_train=len(sets[0][0]) + len(sets[1][0]), n_test=len(sets[2][0]), seconds=res.seconds,
    )
    return fields, settings
