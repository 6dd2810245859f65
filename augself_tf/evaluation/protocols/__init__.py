"""The evaluation protocols, registered by name: the one list eval_main builds its flags from.

Each protocol is one module of this package exposing ``PROTOCOL`` (:class:`~.base.Protocol`: an options
dataclass and ``run(context, model, dataset, options) -> records``). Adding one is one file plus one
line in :data:`PROTOCOLS`; its ``--protocol`` name, its ``--<name>_<option>`` flags and its place in
``--protocol all`` follow (docs/architecture.md, "Evaluation protocols").
"""

from __future__ import annotations

import time
from typing import Any

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols import (
    colorinfo,
    colorperm,
    fewshot,
    finetune,
    invariance,
    linear,
    localization,
    lowshot,
    omega_probe,
    retrieval,
    robustness,
    rotation,
)
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.registries import Registry

#: Every protocol by name, in the order ``--protocol all`` runs them and the table lists them.
PROTOCOLS: Registry[Protocol] = Registry("protocol", {
    "linear": linear.PROTOCOL,
    "fewshot": fewshot.PROTOCOL,
    "localization": localization.PROTOCOL,
    "rotation": rotation.PROTOCOL,
    "colorperm": colorperm.PROTOCOL,
    "retrieval": retrieval.PROTOCOL,
    "invariance": invariance.PROTOCOL,
    "lowshot": lowshot.PROTOCOL,
    "omega_probe": omega_probe.PROTOCOL,
    "colorinfo": colorinfo.PROTOCOL,
    "robustness": robustness.PROTOCOL,
    "finetune": finetune.PROTOCOL,
})

__all__ = ["PROTOCOLS", "Protocol", "Records", "all_protocols", "run_protocol", "unfit_reason"]


def all_protocols() -> list[str]:
    """The protocols of ``--protocol all`` (the costly analyses run only when named)."""
    return [name for name, p in PROTOCOLS.items() if p.in_all]


def unfit_reason(context: EvalContext, name: str, dataset: str) -> str | None:
    """Why protocol ``name`` cannot run on ``dataset`` (None if it can): ``all`` skips it then."""
    unfit = PROTOCOLS[name].unfit
    return unfit(context, dataset) if unfit else None


def run_protocol(
    context: EvalContext, model: LoadedModel, name: str, dataset: str, options: Any = None
) -> Records:
    """Records of protocol ``name`` for ``model`` on ``dataset`` (``options`` default: the protocol's)."""
    if name not in PROTOCOLS:
        raise EvalError(f"unknown protocol {name!r}: use one of {', '.join(PROTOCOLS)} or all")
    protocol = PROTOCOLS[name]
    model.check_size(context.settings.image_size)
    start = time.perf_counter()
    context.log(f"[eval] {model.name}: {name} on {dataset}")
    records = protocol.run(context, model, dataset, protocol.options() if options is None else options)
    for r in records:
        if not r["seconds"]:
            r["seconds"] = round(time.perf_counter() - start, 3)
    return records
