"""The checkout's files, for the tests that read the tree (docs citations, user-facing text); no TensorFlow."""

from __future__ import annotations

import functools
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def repo_files() -> tuple[str, ...]:
    """Every file of the checkout (tracked, or untracked and not ignored), '/'-separated, sorted."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split("\n")
        files = [f for f in out if f and os.path.isfile(os.path.join(REPO, f))]
    except (OSError, subprocess.CalledProcessError):  # no git: walk the tree
        files = [os.path.relpath(os.path.join(d, f), REPO).replace(os.sep, "/") for d, dirs, fs in os.walk(REPO)
                 for f in fs if not any(p in d for p in (".git", "__pycache__", os.sep + "runs", os.sep + "build"))]
    return tuple(sorted(files))
