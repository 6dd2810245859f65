"""Runs side by side in TensorBoard's HParams dashboard.

Each pretraining run writes its settings once, as an HParams session in its TensorBoard directory; its
losses and monitors are scalars there already and the dashboard lists them as metrics. eval_main's
``--log_to`` adds the transfer results as scalars in the ``eval`` subdirectory of the same run
(:mod:`augself_tf.runtime.tensorboard`), which the dashboard shows as metrics of the ``eval`` group.
``tensorboard --logdir`` over a sweep's directory then shows one row per run.
"""

from __future__ import annotations

import tensorflow as tf
from tensorboard.plugins.hparams import api as hp

from augself_tf.augment import registry
from augself_tf.augment.config import DEFAULT_JITTER_STRENGTH
from augself_tf.flag_fields import flag_fields
from augself_tf.training.config import TrainConfig

# Settings that say where and how often, not what is trained: left out of the table.
BOOKKEEPING = frozenset({
    "model_dir", "data_dir", "log_every", "checkpoint_every", "keep_checkpoints", "cache_source", "export",
    "max_steps",
})

HParamValue = bool | int | float | str


def run_hparams(cfg: TrainConfig) -> dict[str, HParamValue]:
    """The hyperparameters of a run as the dashboard's columns (unset settings are left out)."""
    values: dict[str, HParamValue] = {
        f.name: getattr(cfg, f.name)
        for f in flag_fields(TrainConfig)
        if f.name not in BOOKKEEPING and getattr(cfg, f.name) is not None
    }
    values["augself"] = ",".join(cfg.augself) or "none"
    values["condition"] = ",".join(cfg.condition) or "none"
    values["image_size"] = cfg.augment.image_size
    values["crop_min_scale"] = cfg.augment.crop_scale[0]
    values["color_strength"] = cfg.augment.jitter_strength[0] / DEFAULT_JITTER_STRENGTH[0]
    for knob in registry.probabilities():
        values[knob.field] = cfg.augment.probability(knob.field)
    values.update({k: v for k, v in cfg.method_options.items() if isinstance(v, (bool, int, float, str))})
    return values


def write_run_hparams(writer: tf.summary.SummaryWriter, cfg: TrainConfig, trial_id: str) -> None:
    """Writes the run's HParams session (once, when the run starts)."""
    with writer.as_default():
        hp.hparams(run_hparams(cfg), trial_id=trial_id)
    writer.flush()
