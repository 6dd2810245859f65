"""The machine and the commit a training session or a ledger entry records (read without importing TensorFlow)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess


def machine_info() -> dict:
    """CPU model, cores, Python / TensorFlow / Keras versions (TensorFlow is not imported)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass

    def version(*packages: str) -> str | None:
        for package in packages:  # the same import under several distribution names
            try:
                return importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass
        return None

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": version("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
            "keras": version("keras"), "system": platform.system()}


def git_info(root: str) -> dict:
    """{"commit": HEAD or None, "dirty": whether tracked files differ from it}."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}
