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

from augself_tf.training.train_config import TrainConfig, flag_values_of

# Settings that say where and how often, not what is trained: left out of the table.
BOOKKEEPING = frozenset({
    "model_dir", "data_dir", "log_every", "checkpoint_every", "keep_checkpoints", "cache_source", "export",
    "max_steps", "steps_per_execution",
})

HParamValue = bool | int | float | str


def run_hparams(cfg: TrainConfig) -> dict[str, HParamValue]:
    """The hyperparameters of a run as the dashboard's columns: every flag's value (unset ones left out)."""
    return {k: v for k, v in flag_values_of(cfg).items()
            if k not in BOOKKEEPING and isinstance(v, bool | int | float | str)}


def write_run_hparams(writer: tf.summary.SummaryWriter, cfg: TrainConfig, trial_id: str) -> None:
    """Writes the run's HParams session (once, when the run starts)."""
    with writer.as_default():
        hp.hparams(run_hparams(cfg), trial_id=trial_id)
    writer.flush()
