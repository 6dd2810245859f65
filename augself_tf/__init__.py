"""AugSelf in TensorFlow 2 / Keras 3.

The Python API (docs/python-api.md); each name is imported on first use, so ``import augself_tf`` loads no
TensorFlow (the programs import it quietly, after their own set-up):

- ``TrainConfig``, ``ModelConfig``, ``AugmentConfig``: a run's settings, one field per ``augself-train`` flag.
- ``pretrain(cfg) -> TrainResult``: the pretraining run ``augself-train`` makes (checkpoints, exact resume,
  pre-emption, the run lock, TensorBoard, the exported backbone); ``augself_tf.training.loop.train`` itself.
- ``evaluate_backbone(saved_model, protocol, dataset) -> list[dict]``: one protocol of ``augself-eval`` on an
  exported backbone.

(``augself_tf.train`` and ``augself_tf.evaluate`` are the two programs' modules, hence the functions' names.)
- ``pair_dataset(cfg)``: the run's two-view stream with ω; ``make_pair_dataset``, ``load_source``: its parts.
- ``build_model(cfg, strategy=None)``: the run's model, compiled and built (its ``train_step`` runs under
  Keras ``fit()``).
- ``METHODS``, ``PROTOCOLS``: the registries of pretraining methods and evaluation protocols.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it (and the name there, where it differs).
_EXPORTS = {
    "TrainConfig": "augself_tf.training.train_config",
    "ModelConfig": "augself_tf.methods.model_config",
    "AugmentConfig": "augself_tf.augment.augment_config",
    "pretrain": "augself_tf.training.loop",
    "TrainResult": "augself_tf.training.loop",
    "evaluate_backbone": "augself_tf.api",
    "build_model": "augself_tf.api",
    "pair_dataset": "augself_tf.api",
    "make_pair_dataset": "augself_tf.data.pretrain",
    "load_source": "augself_tf.data.sources",
    "METHODS": "augself_tf.methods",
    "PROTOCOLS": "augself_tf.evaluation.protocols",
}
_RENAMED = {"pretrain": "train"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Imports a public name's module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'augself_tf' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
