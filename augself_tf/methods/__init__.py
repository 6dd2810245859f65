"""Pretraining methods: one short file per method over `AugSelfModel`, and one line per method in `METHODS`.

How to add one: docs/architecture.md, "Adding a method".
"""

from __future__ import annotations

import inspect

from augself_tf.methods.base import AugSelfModel
from augself_tf.methods.byol import BYOL
from augself_tf.methods.moco import MoCo
from augself_tf.methods.simclr import SimCLR
from augself_tf.methods.simsiam import SimSiam
from augself_tf.methods.supervised import Supervised
from augself_tf.methods.swav import SwAV

METHODS: dict[str, type[AugSelfModel]] = {
    "none": AugSelfModel,
    "simsiam": SimSiam,
    "moco": MoCo,
    "byol": BYOL,
    "simclr": SimCLR,
    "swav": SwAV,
    "supervised": Supervised,
}


def build_method(name: str, backbone, *, options: dict | None = None, **common) -> AugSelfModel:
    """Instantiates method `name`; `options` entries the method's constructor does not take are ignored."""
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; choose from {', '.join(METHODS)}")
    cls = METHODS[name]
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in (options or {}).items() if v is not None and k in accepted}
    return cls(backbone, **kwargs, **common)
