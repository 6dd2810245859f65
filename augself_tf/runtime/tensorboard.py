"""A run's TensorBoard directory: eval results written into it, and its scalars read back.

eval_main's ``--log_to`` adds the transfer results as scalars in the ``eval`` subdirectory of a training
run, which the HParams dashboard shows as metrics of the ``eval`` group beside the run's settings (the
settings themselves are written by the training run, :mod:`augself_tf.training.hparams`).
:func:`read_scalars` is the one reader of scalar summaries (monitors, losses, eval results) for the
benchmarks, the results ledger and the tests.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable

import tensorflow as tf

from augself_tf.runtime import files

EVAL_SUBDIR = "eval"


def tensorboard_dir(run: str) -> str:
    """A run's TensorBoard directory: ``RUN/tensorboard`` when RUN is a model_dir, else RUN itself."""
    nested = os.path.join(run, "tensorboard")
    return nested if files.isdir(nested) else run


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


@dataclasses.dataclass(frozen=True)
class Scalar:
    """One scalar event: its step, value and wall time (seconds since the epoch)."""

    step: int
    value: float
    wall_time: float


TagFilter = Iterable[str] | Callable[[str], bool] | None


def _wanted(tags: TagFilter) -> Callable[[str], bool]:
    if tags is None:
        return lambda _tag: True
    if callable(tags):
        return tags
    names = frozenset(tags)
    return names.__contains__


def _scalar_value(value) -> float | None:  # noqa: ANN001 - a Summary.Value proto
    """The number of a scalar summary value (TF1 ``simple_value`` or a TF2 rank-0 numeric tensor), else None."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor") or value.metadata.plugin_data.plugin_name not in ("scalars", ""):
        return None  # images, histograms, text, HParams
    array = tf.make_ndarray(value.tensor)
    if array.ndim != 0 or array.dtype.kind not in "fiub":
        return None
    return float(array)


def read_scalars(log_dir: str, tags: TagFilter = None) -> dict[str, list[Scalar]]:
    """Every scalar event in the event files directly inside ``log_dir``, by tag.

    Args:
      log_dir: a TensorBoard directory (a model_dir's ``tensorboard``; subdirectories such as ``eval`` are
        runs of their own and are not read).
      tags: the tags wanted (names, or a predicate on the tag); None = all.

    Returns:
      ``{tag: [Scalar, ...]}`` in the order written (files by name, which starts with their creation time,
      then records in file order). A step written twice (a resumed run redoing it) appears twice; see
      :func:`last_per_step`.
    """
    wanted = _wanted(tags)
    out: dict[str, list[Scalar]] = {}
    for path in sorted(files.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if not wanted(value.tag):
                    continue
                number = _scalar_value(value)
                if number is not None:
                    out.setdefault(value.tag, []).append(Scalar(int(event.step), number, float(event.wall_time)))
    return out


def last_per_step(events: Iterable[Scalar]) -> list[tuple[int, float]]:
    """``[(step, value)]`` sorted by step, the last value written for a step kept (a resumed run rewrites it)."""
    points: dict[int, float] = {}
    for e in events:
        points[e.step] = e.value
    return sorted(points.items())
