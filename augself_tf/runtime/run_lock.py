"""One run per ``--model_dir``: a lock file naming its holder, refreshed by a heartbeat, taken over when stale.

Two runs on one directory (a job requeued while the old one still runs, the same command started twice) would
both write ``ckpt-N`` into it, interleave their TensorBoard events and race to export. The chief of a run holds
``<model_dir>/run.lock``, a small JSON file naming its host, pid and start time, for as long as it runs; a
second run reads it and stops with one line naming the holder.

- **Create-exclusive.** On a local or NFS path the file is written under a private name, then hard-linked to
  ``run.lock`` (``link`` fails when the name exists; it is atomic on NFS too, and the file appears with its
  content complete); where hard links are refused, ``O_CREAT | O_EXCL`` (atomic on local disks and NFSv3+).
  ``tf.io.gfile`` paths (``gs://``, ...) have neither: the lock is written if absent, then read back after
  :data:`SETTLE_SECONDS`; two runs starting within that window can both proceed (docs/distributed.md).
- **Staleness.** The holder rewrites its ``heartbeat`` time every :data:`HEARTBEAT_SECONDS` (a daemon thread:
  a long step, a monitor pass or a save does not delay it). A holder on this machine (same host name, boot id
  and pid namespace) is dead when its pid is gone or now belongs to another process (its start time
  differs); on another machine, when its heartbeat is older than :data:`STALE_INTERVALS` intervals (pid
  liveness cannot be read across hosts). A stale lock is taken over with one log line.
- **Lost lock.** A holder whose file was taken over (paused past the stale limit, say) sees another token at
  its next heartbeat; :meth:`RunLock.check` then raises :class:`RunLockLostError`, and the loop calls it before
  every save, so that it never writes over the new holder's files.
- **A heartbeat never writes over a takeover.** On a local or NFS path a heartbeat (and the release) holds the
  takeover guard, ``run.lock.takeover``, for its read and its write, so a takeover cannot land between them; it
  also reads the token again just before the atomic replace. The residual window: a holder paused for longer
  than the guard's stale limit (60 s) between taking the guard and the replace, whose guard a taker then
  removes as left behind. On a ``tf.io.gfile`` path there is no guard (no create-exclusive), and the window is
  the time between that last read and the write.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from augself_tf.runtime import files

LOCK_NAME = "run.lock"
#: Seconds between heartbeats; a holder on another host is stale after STALE_INTERVALS of them without one.
HEARTBEAT_SECONDS = 30.0
STALE_INTERVALS = 4
#: tf.io.gfile paths: how long a writer waits before reading its lock back (longer than one small write).
SETTLE_SECONDS = 2.0
#: A takeover guard older than this was left by a run killed mid-takeover (a takeover takes milliseconds).
_GUARD_STALE_SECONDS = 60.0


class RunDirBusyError(ValueError):
    """Another live run holds the model directory; the message is one line naming it (host, pid, since when)."""


class RunLockLostError(RuntimeError):
    """This run's lock was taken over by another run; the message is one line naming it."""


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _proc_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), '' where unreadable."""
    try:
        return _read_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _machine() -> dict[str, str]:
    """What tells this machine and pid namespace from another: pids are comparable only when all three agree."""
    try:
        boot_id = _read_text("/proc/sys/kernel/random/boot_id").strip()
    except OSError:
        boot_id = ""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    return {"host": socket.gethostname(), "boot_id": boot_id, "pid_ns": pid_ns}


@dataclasses.dataclass(frozen=True)
class Holder:
    """What a lock file says about the run holding it."""

    host: str
    pid: int
    since: float
    heartbeat: float
    token: str
    boot_id: str = ""
    pid_ns: str = ""
    start: str = ""

    def describe(self, now: float | None = None) -> str:
        """``host h, pid 12, since 2025-06-01T10:00:00+00:00, heartbeat 3 s ago``."""
        since = datetime.datetime.fromtimestamp(self.since).astimezone().isoformat(timespec="seconds")
        age = max(0.0, (time.time() if now is None else now) - self.heartbeat)
        return f"host {self.host}, pid {self.pid}, since {since}, heartbeat {age:.0f} s ago"

    def text(self) -> str:
        """The lock file's content."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _parse(text: str) -> Holder | None:
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):
        return None


class _Files:
    """The lock's file operations on a local path or a tf.io.gfile URL (augself_tf/runtime/files.py), with the two
    it adds: create-exclusive, and a replace that asks last whether it is still wanted."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.remote = files.is_url(path)

    def read(self, path: str | None = None) -> str | None:
        try:
            return files.read_text(path or self.path)
        except (OSError, UnicodeDecodeError):  # absent (released) or unreadable
            return None

    def write(self, text: str, still_wanted: Callable[[], bool] = lambda: True) -> bool:
        """Replaces the file's content (a reader sees the old or the new content; a URL: files.py's docstring).

        ``still_wanted`` is asked last, just before the replace, and False leaves the file as it is (and returns
        False): the content is staged first so that nothing slow stands between that answer and the replace.
        """
        tmp = files.staged(self.path, text)
        if not still_wanted():
            files.remove(tmp)
            return False
        files.rename(tmp, self.path)
        return True

    def remove(self, path: str | None = None) -> None:
        try:
            files.remove(path or self.path)
        except OSError:  # already gone, or gone with its directory: nothing to release
            pass

    def mtime(self, path: str) -> float | None:
        try:
            return files.mtime(path)
        except OSError:
            return None

    def create(self, text: str, path: str | None = None) -> bool:
        """Writes ``path`` with ``text`` unless it exists; False when it does (see the module's guarantees)."""
        path = path or self.path
        if self.remote:  # no create-exclusive in tf.io.gfile: write if absent, then read back after a settle
            if files.exists(path):
                return False
            files.write_new(path, text)
            time.sleep(SETTLE_SECONDS)
            return self.read(path) == text
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            # NFS: a link whose reply was lost is retried and answers EEXIST though it was made.
            return os.stat(tmp).st_nlink == 2
        except OSError:  # a file system without hard links
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(text)
            return True
        finally:
            os.remove(tmp)


class RunLock:
    """The lock of one run on ``model_dir`` (a context manager: acquired on entry, released on exit).

    ``log`` receives the one line of a takeover. ``heartbeat_seconds`` and ``stale_intervals`` set the
    refresh and the staleness of a holder on another host (tests shorten them). ``clock`` gives the times
    written into the file (tests fix it to tell one heartbeat from the next without waiting).
    """

    def __init__(self, model_dir: str, log: Callable[[str], None] = lambda _m: None, *,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS, stale_intervals: int = STALE_INTERVALS,
                 clock: Callable[[], float] = time.time) -> None:
        self.model_dir = model_dir
        self.path = model_dir.rstrip("/") + "/" + LOCK_NAME
        self.guard = self.path + ".takeover"
        self.files = _Files(self.path)
        self.log = log
        self.clock = clock
        self.heartbeat_seconds = heartbeat_seconds
        self.stale_after = heartbeat_seconds * stale_intervals
        self.holder: Holder | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _new_holder(self) -> Holder:
        now = self.clock()
        return Holder(pid=os.getpid(), since=now, heartbeat=now, token=uuid.uuid4().hex,
                      start=_proc_start(os.getpid()), **_machine())

    def stale_reason(self, holder: Holder | None, now: float | None = None) -> str | None:
        """Why ``holder`` no longer runs (its pid is gone, its heartbeat stopped), or None while it may run.

        None for ``holder`` is an unreadable lock file: stale once its mtime is older than the stale limit.
        """
        now = time.time() if now is None else now
        if holder is None:
            mtime = self.files.mtime(self.path)
            return "it is unreadable and old" if mtime is not None and now - mtime > self.stale_after else None
        here = _machine()
        if here["boot_id"] and here == {"host": holder.host, "boot_id": holder.boot_id, "pid_ns": holder.pid_ns}:
            try:
                os.kill(holder.pid, 0)
            except ProcessLookupError:
                return "its process is gone"
            except PermissionError:  # another user's live process
                pass
            start = _proc_start(holder.pid)
            return "its pid now belongs to another process" if holder.start and start and start != holder.start \
                else None
        age = now - holder.heartbeat
        return f"its heartbeat stopped {age:.0f} s ago" if age > self.stale_after else None

    def acquire(self) -> None:
        """Takes the lock, taking over a stale one with one log line.

        Raises:
          RunDirBusyError: a live run holds it (one line: host, pid, since when).
        """
        if not self.files.remote:
            os.makedirs(self.model_dir, exist_ok=True)
        mine = self._new_holder()
        for _ in range(3):  # a takeover lost to another starting run: look again
            if self.files.create(mine.text()):
                break
            text = self.files.read()
            if text is None:  # released between the two calls
                continue
            holder = _parse(text)
            why = self.stale_reason(holder)
            if why is None:
                who = holder.describe() if holder else "a lock file that cannot be read"
                raise RunDirBusyError(
                    f"--model_dir {self.model_dir} is in use by another run ({who}; {self.path}); wait for it to "
                    "end or stop it, or choose another --model_dir")
            if self._take_over(text, mine):
                who = holder.describe() if holder else "unreadable"
                self.log(f"Took over {self.path} from a run that no longer runs ({who}): {why}")
                break
        else:
            raise RunDirBusyError(f"--model_dir {self.model_dir}: another run is taking over or refreshing {self.path} "
                                  "at the same time; wait for it to end, or choose another --model_dir")
        self.holder = mine
        self._thread = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
        self._thread.start()

    def _take_over(self, stale_text: str, mine: Holder) -> bool:
        """Replaces the stale lock whose content is ``stale_text`` by ``mine``; False if another run got there."""
        if self.files.remote:  # no exclusivity to be had: overwrite, settle, read back
            self.files.write(mine.text())
            time.sleep(SETTLE_SECONDS)
            return self.files.read() == mine.text()
        if not self._take_guard(mine):
            return False
        try:
            if self.files.read() != stale_text:  # replaced or released meanwhile: decide again
                return False
            self.files.remove()
            return self.files.create(mine.text())
        finally:
            self.files.remove(self.guard)

    def _take_guard(self, mine: Holder) -> bool:
        """Creates the takeover guard (local and NFS paths); False while another process holds it.

        Takeovers, heartbeats and the release each read the lock and then change it: holding the guard for both
        keeps another of them from landing in between. A guard older than any of them could take was left by a
        process killed while holding it: removed, and taken once more.
        """
        if self.files.create(mine.text(), self.guard):
            return True
        age = time.time() - (self.files.mtime(self.guard) or time.time())  # file times are wall-clock times
        if age <= _GUARD_STALE_SECONDS:
            return False
        self.files.remove(self.guard)
        return self.files.create(mine.text(), self.guard)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                if not self.beat():
                    return
            except Exception:  # noqa: BLE001 (a transient I/O error: the next beat tries again)
                pass

    def _ours(self) -> bool | None:
        """Whether the lock file holds this run's token; None when it cannot be read (mid-takeover, removed)."""
        current = _parse(self.files.read() or "")
        if current is None:
            return None
        if current.token != self.holder.token:
            self.lost = current.describe()
            return False
        return True

    def beat(self) -> bool:
        """One heartbeat: rewrites this run's ``heartbeat`` time if the file still holds this run's token.

        Returns False once the lock is found taken over (:meth:`check` then raises), True otherwise, including a
        beat skipped because a takeover is in progress (the next beat sees its outcome). The daemon thread calls
        it every ``heartbeat_seconds``; tests call it directly.
        """
        if self.holder is None or self.lost is not None:
            return self.lost is None
        if not self.files.remote and not self._take_guard(self.holder):
            return True
        try:
            if not self._ours():  # another token (lost) or unreadable (only another holder's token is a loss)
                return self.lost is None
            refreshed = dataclasses.replace(self.holder, heartbeat=self.clock())
            # The guard keeps takeovers out on local and NFS paths; the second look covers tf.io.gfile paths.
            if self.files.write(refreshed.text(), still_wanted=lambda: self._ours() is True):
                self.holder = refreshed
            return self.lost is None
        finally:
            if not self.files.remote:
                self.files.remove(self.guard)

    def check(self) -> None:
        """Raises RunLockLostError when another run has taken the lock over (called before every save)."""
        if self.lost is not None:
            raise RunLockLostError(f"another run took over {self.path} ({self.lost}); this run stopped without "
                                   "saving so as not to write over its files")

    def release(self) -> None:
        """Stops the heartbeat and removes the lock file if it is still this run's; safe to call twice.

        A takeover in progress (its guard present) keeps the file: it is the taker's now, or about to be.
        """
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.holder is not None:
            guarded = self.files.remote or self._take_guard(self.holder)
            try:
                if guarded and self._ours():
                    self.files.remove()
            finally:
                if guarded and not self.files.remote:
                    self.files.remove(self.guard)
            self.holder = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
