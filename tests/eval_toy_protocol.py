"""A toy evaluation protocol: everything adding a protocol takes, besides its registry line.

Registered with ``PROTOCOLS["featdim"] = PROTOCOL`` (in ``augself_tf/evaluation/protocols/__init__.py``
for a real one; ``tests/test_eval_protocols.py`` does it at run time). It reports the feature
dimension times ``--featdim_scale`` on the test split.
"""

from __future__ import annotations

import dataclasses

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class FeatDimOptions:
    """Each ``option`` field becomes the flag ``--featdim_<field>``."""

    scale: float = option(1.0, "Multiplies the reported feature dimension.")


def run(context: EvalContext, model: LoadedModel, dataset: str, options: FeatDimOptions) -> Records:
    """One record: the dimension of the test features, scaled."""
    test = context.features(model, dataset, context.splits(dataset).test)
    return [make_record(
        model=model.name, protocol="featdim", dataset=dataset, metric="dims",
        value=options.scale * test.features.shape[1], n_test=len(test),
        settings={**context.base_settings(), "scale": options.scale},
    )]


PROTOCOL = Protocol(FeatDimOptions, run, summary="feature dimension (a toy)")
