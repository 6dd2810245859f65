"""``rotation``: which of the four 90° rotations an image shows (the paper's pretext probe)."""

from __future__ import annotations

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.protocols.transform_probe import NoOptions, transform_probe
from augself_tf.evaluation.report import make_record
from augself_tf.evaluation.transforms import ROTATIONS


def run(context: EvalContext, model: LoadedModel, dataset: str, options: NoOptions) -> Records:
    """Linear probe of the rotation class over every image under every rotation."""
    fields, settings = transform_probe(context, model, dataset, "rotation", ROTATIONS)
    return [make_record(settings=settings, **fields)]


PROTOCOL = Protocol(NoOptions, run, summary="linear probe of the 90° rotation (pretext)")
