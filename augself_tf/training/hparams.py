"""Runs side by side in TensorBoard's HParams dashboard.

Each pretraining run writes its settings once, as an HParams session in its TensorBoard directory; its
losses and monitors are scalars there already and the dashboard lists them as metrics. eval_main's
``--log_to`` adds the transfer results as scalars in the ``eval`` subdirectory of the same run, which the
dashboard shows as metrics of the ``eval`` group. ``tensorboard --logdir`` over a sweep's directory then
shows one row per run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import tensorflow as tf
from tensorboard.plugins.hparams import api as hp

from augself_tf.training.config import TrainConfig, flag_values_of

# Settings that say where and how often, not what is trained: left out of the table.
BOOKKEEPING = frozenset({
    "model_dir", "data_dir", "log_every", "checkpoint_every", "keep_checkpoints", "cache_source", "export",
    "max_steps",
})
EVAL_SUBDIR = "eval"

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


def tensorboard_dir(run: str) -> str:
    """A run's TensorBoard directory: ``RUN/tensorboard`` when RUN is a model_dir, else RUN itself."""
    nested = os.path.join(run, "tensorboard")
    return nested if os.path.isdir(nested) else run


def trained_steps(run: str) -> int:
    """The step of a model_dir's latest checkpoint (0 when there is none): where eval results are drawn."""
    latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def metric_tag(record: dict) -> str:
    """``eval/<protocol>/<dataset>/<metric>`` with characters TensorBoard tags dislike replaced."""
    parts = ("eval", record["protocol"], record["dataset"], record["metric"])
    return "/".join(re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(p)) for p in parts)


def log_eval_records(run: str, records: Iterable[dict]) -> str:
    """Writes eval records as scalars under the run's TensorBoard ``eval`` group; returns the directory."""
    log_dir = os.path.join(tensorboard_dir(run), EVAL_SUBDIR)
    step = trained_steps(run)
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for record in records:
            if record.get("value") is not None:
                tf.summary.scalar(metric_tag(record), record["value"], step=step)
    writer.flush()
    writer.close()
    return log_dir
