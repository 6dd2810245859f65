"""A protocol: a name, an options dataclass and ``run(context, model, dataset, options) -> records``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.loading import LoadedModel

Records = list[dict]


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One evaluation protocol, as registered in :data:`augself_tf.evaluation.protocols.PROTOCOLS`.

    Attributes:
      options: a dataclass; its :func:`~augself_tf.flag_fields.option` fields become eval_main's
        ``--<name>_<field>`` flags.
      run: ``run(context, model, dataset, options) -> records``
        (:func:`~augself_tf.evaluation.report.make_record` dicts).
      in_all: part of ``--protocol all`` (the costly analyses are not: they run only when named).
      unfit: ``unfit(context, dataset) -> reason or None``: ``all`` skips a protocol the dataset cannot
        serve (e.g. localization without boxes) instead of failing.
      summary: one line for ``--help``.
    """

    options: type
    run: Callable[[EvalContext, LoadedModel, str, Any], Records]
    in_all: bool = True
    unfit: Callable[[EvalContext, str], str | None] | None = None
    summary: str = ""
