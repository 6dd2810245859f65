"""The checkpoint files on disk: which one a run resumes from, a verified save, and what a failed save leaves.

TensorFlow's `CheckpointManager` trusts the ``checkpoint`` state file: when it (or the newest ``.index``) is
missing, ``latest_checkpoint`` is None and a rerun silently starts again at step 0, overwriting the older
checkpoints; a truncated or bit-flipped data file ends in a ``DataLossError`` traceback; a kill during a save
leaves a ``ckpt-N_temp`` folder forever, and a full disk leaves a partial one that keeps the disk full.

Here the files themselves are the truth. A run resumes from the newest checkpoint that is *intact*: its index
and data files read back completely (TensorFlow checks every tensor's CRC32C on read) and every float value is
finite and below :data:`LIMIT`. Newer checkpoints that fail are renamed ``*.bad`` with one line naming the
file and why; if files are there but none is intact the run stops with one line rather than start over. A save
writes the checkpoint, reads it back the same way, and only then names it in the state file and drops the
checkpoints beyond ``keep``, so a bad save never costs an older good one.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from augself_tf.runtime import files

#: The magnitude past which a weight, BN statistic or momentum buffer means a diverged run, though finite.
#: Healthy runs hold at most a few units (measured: largest |value| 1.3-3.4 in three tiny runs' checkpoints);
#: ``--lr=1e6`` reached 1.4e17 at step 2; past 1.8e19 a square (BN variance, L2) overflows float32.
LIMIT = 1e8
_FILE = re.compile(r"^ckpt-(\d+)\.(index|data-\d+-of-\d+)$")


class CheckpointFileError(RuntimeError):
    """A checkpoint that cannot be written or no intact one to resume; the message is one line."""


def checkpoint_reader(prefix: str):  # TensorFlow's CheckpointReader (not exported by name)
    """A reader of checkpoint ``prefix`` itself (``tf.train.load_checkpoint`` first asks whether the prefix is a
    directory, which TensorFlow's ``ram://`` answers yes for any prefix of a file's name)."""
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def clean_temp(ckpt_dir: str, log: Callable[[str], None]) -> None:
    """Removes the ``ckpt-N_temp`` folders a killed or failed save left behind."""
    for temp in sorted(files.glob(os.path.join(ckpt_dir, "ckpt-*_temp"))):
        files.rmtree(temp) if files.isdir(temp) else files.remove(temp)
        log(f"Removed {temp}, left by an interrupted save")


def checkpoint_steps(ckpt_dir: str) -> list[int]:
    """Steps of every ``ckpt-N`` that has any file (index or data) in ``ckpt_dir``, newest first."""
    if not files.isdir(ckpt_dir):
        return []
    steps = {int(m.group(1)) for m in map(_FILE.match, files.listdir(ckpt_dir)) if m}
    return sorted(steps, reverse=True)


def _files(prefix: str) -> list[str]:
    return sorted(files.glob(glob.escape(prefix) + ".index") + files.glob(glob.escape(prefix) + ".data-*"))


def problem(prefix: str) -> str | None:
    """Why checkpoint ``prefix`` cannot be resumed (missing or damaged file, a value beyond :data:`LIMIT`), or
    None when every tensor reads back, passes its checksum and is finite."""
    if not files.exists(prefix + ".index"):
        return f"{os.path.basename(prefix)}.index is missing"
    if not files.glob(glob.escape(prefix) + ".data-*"):
        return f"{os.path.basename(prefix)}.data-* is missing"
    try:
        reader = checkpoint_reader(prefix)
        for name in sorted(reader.get_variable_to_shape_map()):
            value = reader.get_tensor(name)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                if not np.all(np.abs(value.astype(np.float64)) <= LIMIT):
                    return f"{name.split('/.ATTRIBUTES')[0]} holds NaN/Inf or values beyond {LIMIT:.1e}"
    except (tf.errors.OpError, IndexError, ValueError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"unreadable ({type(err).__name__}: {first[:200]})"
    return None


def _set_aside(prefix: str) -> list[str]:
    moved = []
    for path in _files(prefix):
        files.rename(path, path + ".bad")
        moved.append(os.path.basename(path) + ".bad")
    return moved


def _write_state(ckpt_dir: str, prefixes: list[str]) -> None:
    """The ``checkpoint`` state file naming ``prefixes`` (oldest first; the last is the latest), atomically."""
    path = os.path.join(ckpt_dir, "checkpoint")
    if not prefixes:
        if files.exists(path):
            files.remove(path)
        return
    # CheckpointState's text format, paths relative to ckpt_dir (what tf.train.get_checkpoint_state reads back).
    names = [os.path.basename(p) for p in prefixes]
    text = f'model_checkpoint_path: "{names[-1]}"\n' + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names)
    files.replace_text(path, text)


def intact_checkpoint(ckpt_dir: str, log: Callable[[str], None], *, repair: bool = True) -> str | None:
    """The newest intact checkpoint of ``ckpt_dir`` (None when it holds none at all).

    Newer ones that are not intact are logged (one line each, naming the file and why) and, with ``repair``,
    renamed ``*.bad``; the state file is rewritten to name the intact ones, so that a missing or stale state
    file is recovered from the files present.

    Raises:
      CheckpointFileError: checkpoint files are there but none is intact (one line naming them).
    """
    steps = checkpoint_steps(ckpt_dir)
    bad: list[str] = []
    chosen = None
    for step in steps:
        prefix = os.path.join(ckpt_dir, f"ckpt-{step}")
        why = problem(prefix)
        if why is None:
            chosen = step
            break
        bad.append(f"{prefix} ({why})")
        if repair:
            moved = _set_aside(prefix)
            log(f"Checkpoint {prefix} is not usable: {why}; renamed {', '.join(moved)} and resuming from an older one")
        else:
            log(f"Checkpoint {prefix} is not usable: {why}; resuming from an older one")
    if chosen is None:
        if bad:
            raise CheckpointFileError(f"no intact checkpoint in {ckpt_dir}: {'; '.join(bad)}; move the folder away "
                                      "to start over, or use a new --model_dir")
        return None
    state = tf.train.get_checkpoint_state(ckpt_dir)
    latest = os.path.join(ckpt_dir, f"ckpt-{chosen}")
    if state is None or os.path.basename(state.model_checkpoint_path) != os.path.basename(latest):
        log(f"The checkpoint state file of {ckpt_dir} was missing or stale; found {latest} from the files present")
    if repair:
        kept = [os.path.join(ckpt_dir, f"ckpt-{s}") for s in sorted(steps) if s <= chosen]
        _write_state(ckpt_dir, [p for p in kept if files.exists(p + ".index")])
    return latest


def _remove_partial(prefix: str) -> None:
    files.rmtree(prefix + "_temp")
    for path in _files(prefix):
        files.remove(path)


def save_verified(checkpoint: tf.train.Checkpoint, ckpt_dir: str, step: int, keep: int, *, chief: bool = True) -> str:
    """Writes ``ckpt-<step>``, reads it back (:func:`problem`), then names it in the state file and removes
    all but the newest ``keep`` checkpoints. Returns its prefix.

    Raises:
      CheckpointFileError: the write failed (a full disk, say; its partial files are removed) or the
        checkpoint read back wrong; the older checkpoints are untouched.
    """
    prefix = os.path.join(ckpt_dir, f"ckpt-{step}")
    files.makedirs(ckpt_dir)
    try:
        checkpoint.save_counter.assign_add(1)  # stored as `save` would: `restore` expects every object bound
        checkpoint.write(prefix)
    except (tf.errors.OpError, OSError) as err:
        if chief:
            _remove_partial(prefix)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointFileError(f"could not write checkpoint {prefix} ({first[:200]}); removed its partial files; "
                                  "free space and rerun the same command to resume from the last checkpoint") from None
    if not chief:
        return prefix
    why = problem(prefix)
    if why is not None:
        _remove_partial(prefix)
        raise CheckpointFileError(f"checkpoint {prefix} read back wrong ({why}); removed it; the older checkpoints "
                                  "are untouched")
    steps = [s for s in checkpoint_steps(ckpt_dir) if s <= step]
    for old in steps[keep:]:
        _remove_partial(os.path.join(ckpt_dir, f"ckpt-{old}"))
    _write_state(ckpt_dir, [os.path.join(ckpt_dir, f"ckpt-{s}") for s in sorted(steps[:keep])])
    return prefix
