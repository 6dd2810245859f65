"""``colorperm``: which of the six RGB channel orders an image shows (the paper's pretext probe)."""

from __future__ import annotations

from augself_tf.data.eval_view import CHANNEL_PERMUTATIONS
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.protocols.transform_probe import NoOptions, transform_probe
from augself_tf.evaluation.report import make_record
from augself_tf.evaluation.transforms import CHANNEL_ORDERS


def run(context: EvalContext, model: LoadedModel, dataset: str, options: NoOptions) -> Records:
    """Linear probe of the channel order over every image under every order."""
    fields, settings = transform_probe(context, model, dataset, "colorperm", CHANNEL_ORDERS)
    settings["permutations"] = [list(p) for p in CHANNEL_PERMUTATIONS]
    return [make_record(settings=settings, **fields)]


PROTOCOL = Protocol(NoOptions, run, summary="linear probe of the RGB channel order (pretext)")
