"""Run-directory file calls for local paths and tf.io.gfile URLs (``gs://``, ...): the run's files, its exports and
evaluation outputs.

tf.io.gfile has no create-exclusive and its rename is no atomic replace on an object store, so a local path keeps
the os calls it always had (``os.replace``, ``O_EXCL``, ``fsync``) and only a URL (``scheme://...``) goes through
tf.io.gfile. tf.io.gfile errors surface as ``OSError`` (``FileNotFoundError`` for a missing file), as os's do.

What is left of atomicity on a URL:

- :func:`replace_text` writes a fresh temporary object, then renames it over the file. On GCS the rename is a
  server-side copy then a delete, and the copy replaces the object whole (as a single upload would), so a reader
  sees the old or the new content, never a mix; a kill between the two leaves a stray ``*.tmp-<hex>``
  (:func:`remove_leftovers`, called when the next run takes the directory's lock). A direct
  write would give GCS readers the same, but not a file system whose writes show as they go (HDFS), nor
  TensorFlow's ``ram://``, whose writes append to an existing file.
- :func:`replace_dir` (the export): the new tree is written beside the old one, so a failed write keeps the old;
  then the old is removed and the new moved in file by file, ``saved_model.pb`` last: a reader finds no SavedModel
  for that moment, never a partial one.
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator


def is_url(path: str) -> bool:
    """True for a tf.io.gfile URL (``gs://bucket/run``, ``ram://...``), False for a local path."""
    return "://" in path


@contextlib.contextmanager
def _gfile(path: str) -> Iterator:
    """tf.io.gfile, its errors on ``path`` raised as os's are (FileNotFoundError when it is absent)."""
    import tensorflow as tf  # only for URLs: the local paths' callers need not load it

    try:
        yield tf.io.gfile
    except tf.errors.NotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, err.message or "No such file or directory", path) from None
    except tf.errors.OpError as err:
        raise OSError(errno.EIO, err.message or type(err).__name__, path) from None


def absolute(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as given, without a trailing slash."""
    if not is_url(path):
        return os.path.abspath(path)
    stripped = path.rstrip("/")
    return path if stripped.endswith(":/") else stripped


def parent(path: str) -> str:
    """The directory holding ``path`` (made absolute first, see :func:`absolute`)."""
    path = absolute(path)
    if not is_url(path):
        return os.path.dirname(path)
    head, _, _ = path.rpartition("/")
    return path if head.endswith(":/") else head


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    with _gfile(path) as gfile:
        return gfile.exists(path)


def mtime(path: str) -> float:
    """The file's modification time in seconds since the epoch."""
    if not is_url(path):
        return os.stat(path).st_mtime
    with _gfile(path) as gfile:
        return gfile.stat(path).mtime_nsec / 1e9


def isdir(path: str) -> bool:
    if not is_url(path):
        return os.path.isdir(path)
    with _gfile(path) as gfile:
        return gfile.isdir(path)


def makedirs(path: str) -> None:
    """Creates ``path`` and its parents; nothing when it exists."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)
        return
    with _gfile(path) as gfile:
        gfile.makedirs(path)


def listdir(path: str) -> list[str]:
    if not is_url(path):
        return os.listdir(path)
    with _gfile(path) as gfile:
        return [name.rstrip("/") for name in gfile.listdir(path)]


def glob(pattern: str) -> list[str]:
    if not is_url(pattern):
        return _glob.glob(pattern)
    with _gfile(pattern) as gfile:
        return gfile.glob(pattern)


def remove(path: str) -> None:
    if not is_url(path):
        os.remove(path)
        return
    with _gfile(path) as gfile:
        gfile.remove(path)


def rmtree(path: str) -> None:
    """Removes a directory tree; nothing when it is absent or cannot be removed (``ignore_errors``)."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    with contextlib.suppress(OSError), _gfile(path) as gfile:
        gfile.rmtree(path)


def rename(src: str, dst: str) -> None:
    """Renames ``src`` to ``dst``, replacing it (``os.replace``; on an object store a copy, then a delete)."""
    if not is_url(src):
        os.replace(src, dst)
        return
    with _gfile(src) as gfile:
        gfile.rename(src, dst, overwrite=True)


def read_text(path: str) -> str:
    if not is_url(path):
        with open(path) as f:
            return f.read()
    with _gfile(path) as gfile, gfile.GFile(path) as f:
        return f.read()


def write_new(path: str, data: str | bytes) -> None:
    """Writes a file under a name that does not exist yet, directly (no staging: nothing to replace)."""
    mode = "wb" if isinstance(data, bytes) else "w"
    if not is_url(path):
        with open(path, mode) as f:
            f.write(data)
        return
    with _gfile(path) as gfile, gfile.GFile(path, mode) as f:
        f.write(data)


def replace_text(path: str, text: str) -> None:
    """Replaces the file's content atomically: written to ``<path>.tmp`` (a URL: ``<path>.tmp-<hex>``), then renamed
    over it (the module's docstring says what a URL keeps of that)."""
    if not is_url(path):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return
    _replace_url(path, text)


def staged(path: str, data: str | bytes) -> str:
    """Writes ``data`` under a new name beside ``path`` (``<path>.tmp-<hex>``) and returns that name, for a
    :func:`rename` over ``path`` (or a :func:`remove` when the replace is no longer wanted)."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"  # a new name: ram:// appends to an existing file
    write_new(tmp, data)
    return tmp


def _replace_url(path: str, data: str | bytes) -> None:
    """A URL's file replaced by a new object renamed over it (the module's docstring)."""
    tmp = staged(path, data)
    try:
        rename(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """Writes the file (a local file in place, as ``open(path, "w")``; a URL as :func:`replace_text`)."""
    if not is_url(path):
        with open(path, "w") as f:
            f.write(text)
        return
    replace_text(path, text)


def write_bytes(path: str, data: bytes) -> None:
    """Writes the file in place (a URL: as :func:`replace_text`)."""
    if not is_url(path):
        with open(path, "wb") as f:
            f.write(data)
        return
    _replace_url(path, data)


def check_writable(directory: str) -> None:
    """Proves ``directory`` writable by creating a file there and removing it.

    Raises:
      OSError: it cannot be written.
    """
    if not is_url(directory):
        with tempfile.TemporaryFile(dir=directory):
            pass
        return
    probe = f"{directory.rstrip('/')}/.write-test-{uuid.uuid4().hex[:8]}"
    write_new(probe, "")
    remove(probe)


def sibling(path: str, label: str) -> str:
    """A new hidden name beside ``path``: ``.<name>.<label>-<hex>`` in its directory."""
    path = absolute(path)
    return os.path.join(parent(path), f".{os.path.basename(path)}.{label}-{uuid.uuid4().hex[:8]}")


#: What :func:`staged` and :func:`sibling` name: ``<name>.tmp-<hex>``, ``.<name>.<label>-<hex>``.
_LEFTOVER = re.compile(r"^(\..+\.[a-z]+|.+\.tmp)-[0-9a-f]{8}$")
#: A :func:`sibling` of ``<name>`` (group 1).
_SIBLING = re.compile(r"^\.(.+)\.[a-z]+-[0-9a-f]{8}$")


def remove_leftovers(directory: str, complete: str = "saved_model.pb") -> tuple[list[str], list[str]]:
    """Clears what a killed writer left in ``directory``: a staged file never renamed, an export's new or old tree
    (:func:`replace_dir`). A tree whose ``<name>`` is missing (a kill between replace_dir's renames) and that holds
    ``complete`` (a SavedModel's last file) is put back in its place instead, the new one before the old.

    Only for a directory no one else writes to (a run holding its lock). An entry that cannot be read or removed is
    left as it is. Returns (the names removed, ``"<name> from <tree>"`` for each tree put back).
    """
    try:  # the new trees (tmp) before the old: a finished new export is put back first
        names = sorted((n for n in listdir(directory) if _LEFTOVER.match(n)), key=lambda n: (".old-" in n, n))
    except OSError:  # absent: nothing left over
        return [], []
    base = directory.rstrip("/")
    removed, restored = [], []
    for name in names:
        path, sib = f"{base}/{name}", _SIBLING.match(name)
        with contextlib.suppress(OSError):
            if not isdir(path):
                remove(path)
            elif sib and not exists(f"{base}/{sib.group(1)}") and exists(f"{path}/{complete}"):
                replace_dir(path, f"{base}/{sib.group(1)}", last=complete)
                restored.append(f"{sib.group(1)} from {name}")
                continue
            else:
                rmtree(path)
        with contextlib.suppress(OSError):
            if not exists(path):
                removed.append(name)
    return sorted(removed), restored


def replace_dir(new: str, path: str, last: str) -> None:
    """Puts the directory ``new`` (a sibling of ``path``) in place of ``path``, removing any old one.

    Local: the old directory renamed away, ``new`` renamed into place (atomic), the old one removed. URL: the old
    tree removed, then ``new``'s files moved one by one, the file named ``last`` after all others, then ``new``
    removed (see the module's docstring).
    """
    if not is_url(path):
        old = None
        if os.path.exists(path):
            old = sibling(path, "old")
            os.rename(path, old)
        os.rename(new, path)
        if old:
            shutil.rmtree(old, ignore_errors=True)
        return
    with _gfile(path) as gfile:
        dirs, moves = [], []
        for root, _subdirs, names in gfile.walk(new):
            rel = root[len(new):].strip("/")
            dirs.append(f"{path}/{rel}" if rel else path)
            moves += [(f"{root.rstrip('/')}/{n}", f"{dirs[-1]}/{n}") for n in names]
        if gfile.exists(path):
            gfile.rmtree(path)
        for target in dirs:  # empty ones too (a SavedModel's assets/)
            gfile.makedirs(target)
        for src, dst in sorted(moves, key=lambda m: os.path.basename(m[0]) == last):
            gfile.rename(src, dst, overwrite=True)
    rmtree(new)
