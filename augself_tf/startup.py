"""Quiet start-up for the entry points.

Importing TensorFlow 2.21 prints, on file descriptor 2 and before Python can intervene, the same oneDNN
notice twice (two shared libraries, each with its own absl logger that ``TF_CPP_MIN_LOG_LEVEL`` does not
reach) plus a CPU-feature notice. The entry points import TensorFlow through `import_tensorflow_quietly`,
which captures descriptor 2 during the import, drops those known notices and passes anything else on.
It first sets the process's host allocator (`pool_host_memory`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import MutableMapping

KNOWN_NOTICES = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
    "cpu_feature_guard.cc",
    "To enable the following instructions",
)


def pool_host_memory(environ: MutableMapping[str, str] | None = None) -> None:
    """Makes TensorFlow's CPU allocator its BFC pool (``TF_CPU_ALLOCATOR_USE_BFC``) unless the caller chose.

    TensorFlow's default CPU allocator is malloc: every large tensor freed goes back to the kernel and the next one
    is faulted in page by page (about 100,000 page faults a second in a 2-core training, a quarter of its CPU
    time). The BFC pool keeps freed memory for the next step: 1.4 times the steps per second of the
    reproduction's training on 2 cores, bit-identical losses, 16% more peak memory (docs/benchmarks.md §5.8).
    Its size limit (``TF_CPU_BFC_MEM_LIMIT_IN_MB``, 64 GB in TensorFlow) is raised to the machine's physical
    memory, so a host with more never runs out of pool before it runs out of memory. Either variable set by the
    caller is kept (``TF_CPU_ALLOCATOR_USE_BFC=false`` is malloc again). Takes effect only before TensorFlow
    makes its first CPU device.
    """
    env = os.environ if environ is None else environ
    env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    if "TF_CPU_BFC_MEM_LIMIT_IN_MB" not in env:
        try:
            physical_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
        except (ValueError, OSError):  # a platform without these names keeps TensorFlow's own limit
            return
        env["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(max(physical_mb, 1 << 16))


def import_tensorflow_quietly() -> None:
    """Imports tensorflow (and keras) with the known start-up notices removed from stderr.

    Lines that are not known notices (a CUDA library missing, say) are written to stderr afterwards.
    A no-op when TensorFlow is already imported.
    """
    if "tensorflow" in sys.modules:
        return
    pool_host_memory()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import keras  # noqa: F401
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
    kept = [line for line in text.splitlines() if line.strip() and not any(n in line for n in KNOWN_NOTICES)]
    if kept:
        sys.stderr.write("\n".join(kept) + "\n")
        sys.stderr.flush()


def run_program(main, doc: str | None) -> None:
    """Runs an absl ``main`` as a command; ``doc`` heads ``--help`` when the entry point has no docstring of its
    own (a console script's ``__main__`` has none)."""
    import sys

    from absl import app

    main_module = sys.modules.get("__main__")
    if main_module is not None and not main_module.__doc__:
        main_module.__doc__ = doc
    app.run(main, flags_parser=parse_flags_or_exit_2)


def parse_flags_or_exit_2(argv: list[str]) -> list[str]:
    """absl's flag parsing, but a bad flag (unknown, misspelt, a value outside its choices) is one line on
    stderr and exit status 2, as every other bad input; absl's own parser prints its usage and exits 1."""
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as err:
        message = " ".join(str(err).split())
        if isinstance(err, flags.CantOpenFlagFileError):  # absl opens an include from the working directory
            sys.stderr.write(f"error: {message} (a --flagfile= inside a flagfile is opened from the directory the "
                             "command runs in; the repository's flags/ include each other from its root)\n")
        else:
            sys.stderr.write(f"error: {message} (--helpshort lists the flags)\n")
        sys.exit(2)
