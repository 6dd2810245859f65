"""The package as a library user gets it: `pip install .` into a fresh venv, then `augself-train` and
`augself-eval` from a directory outside the checkout (and `augself-reproduce`, which needs a checkout, saying
so in one line); and every entry point of a program has the same flags
(`augself-train`, `python -m augself_tf.train` and the checkout's `train_main.py`; likewise for eval).

The venv sees the site-packages of the interpreter running the tests (a ``.pth`` file lists them), whether
that interpreter is itself a venv or the system's, and has no pip or setuptools of its own; pip runs with
``--no-index --no-build-isolation``: the dependencies and the build backend come from what
``pip install -r requirements-dev.txt`` installed there, so nothing is downloaded, and the install also checks
that the ranges pyproject.toml declares admit the pinned versions. (``venv --system-site-packages`` would see
the *base* interpreter's packages instead, not a user's venv, and Python 3.11 seeds a venv with setuptools
65.5, which cannot build a wheel without the ``wheel`` package: ``invalid command 'bdist_wheel'``.) The
package itself is installed into the venv from a copy of the project's files.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import site
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tiny run: the default shapes data at 1/16 width, small batches, no online monitors.
TINY_TRAIN = ["--batch_size=32", "--width=0.0625", "--monitor=none"]
PROGRAMS = {"train": ("train_main.py", "augself_tf.train", "augself-train"),
            "evaluate": ("eval_main.py", "augself_tf.evaluate", "augself-eval")}


def _env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing into a checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _run(cmd: list[str], cwd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


@functools.cache
def _script_flags(script: str) -> str:
    """The checkout script's ``--helpfull`` flags part, from its snapshot, which tests/test_settings.py holds
    equal to what the script prints (each run of a program imports TensorFlow: one comparison is enough)."""
    name = os.path.splitext(os.path.basename(script))[0]
    with open(os.path.join(REPO, "tests", "snapshots", f"{name}_helpfull.txt")) as f:
        return _flags_section(f.read())


def _flags_part(cmd: list[str], cwd: str) -> str:
    """The flags part of ``cmd --helpfull`` (:func:`_flags_section`)."""
    proc = _run([*cmd, "--helpfull"], cwd)
    assert proc.returncode == 1, proc.stderr[-2000:]  # absl exits 1 after --helpfull
    return _flags_section(proc.stdout)


def _flags_section(helpfull: str) -> str:
    """``--helpfull`` from the first module header on, with that header (the program's path) blanked.

    absl lists the program's own flags under ``sys.argv[0]``, which differs by entry point; the usage text
    above the flags is the entry point's docstring.
    """
    lines = helpfull.splitlines()
    start = lines.index("flags:")
    program = start + 2  # "flags:", a blank line, then the running program's own flags come first
    assert lines[program - 1] == "" and lines[program].endswith(":"), lines[start:program + 1]
    lines[program] = "<program>:"
    return "\n".join(lines[start:])


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_python_m_has_exactly_the_scripts_flags(program):
    script, module, _ = PROGRAMS[program]
    by_script = _script_flags(script)
    by_module = _flags_part([sys.executable, "-m", module], REPO)
    assert "--method" in by_script or "--saved_model" in by_script
    assert by_module == by_script


def _copy_project(dest: str) -> str:
    """The files a build reads, copied: building writes build/ and *.egg-info beside its sources."""
    os.makedirs(dest)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), dest)
    for package in ("augself_tf", "reproduce"):
        shutil.copytree(os.path.join(REPO, package), os.path.join(dest, package),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _site_dirs() -> list[str]:
    """Where this interpreter's installed packages are (a venv's own, or the system's, plus the user's)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def _venv_over_this_interpreter(venv: str) -> str:
    """A fresh venv (its python returned) whose imports fall back on this interpreter's site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=300)
    python = os.path.join(venv, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "_tested_interpreter.pth"), "w") as f:
        f.write("\n".join(_site_dirs()) + "\n")
    return python


# The build backend of a --no-build-isolation build, as pyproject.toml's [build-system] and requirements-dev.txt
# declare it: setuptools from 70.1 builds wheels itself, an older one needs the `wheel` package.
BACKEND_CHECK = """import importlib.util, setuptools
major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
ok = (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None
print("ok" if ok else f"setuptools {setuptools.__version__} without the wheel package")"""


@pytest.mark.slow
@pytest.mark.install
def test_pip_install_then_train_and_eval_outside_the_checkout(tmp_path):
    t0 = time.perf_counter()
    src = _copy_project(str(tmp_path / "src"))
    venv = str(tmp_path / "venv")
    python = _venv_over_this_interpreter(venv)
    bin_dir = os.path.join(venv, "bin")
    work = str(tmp_path / "work")  # a user's directory: no checkout in it or above it
    os.makedirs(work)
    backend = _run([python, "-c", BACKEND_CHECK], work)
    assert backend.stdout.strip() == "ok", (f"no wheel-building backend ({backend.stdout.strip()}"
                                            f"{backend.stderr[-500:]}): pip install -r requirements-dev.txt")
    proc = _run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-input", "-q", src],
                work)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    installed = _run([python, "-c", "import augself_tf, sys; print(augself_tf.__file__); print(sys.prefix)"], work)
    assert installed.returncode == 0, installed.stderr
    package_file, prefix = installed.stdout.split()
    assert os.path.realpath(prefix) == os.path.realpath(venv)
    assert os.path.realpath(package_file).startswith(os.path.realpath(venv) + os.sep), package_file  # not the checkout

    for program, (script, _, command) in PROGRAMS.items():  # the commands have exactly the scripts' flags
        assert _flags_part([os.path.join(bin_dir, command)], work) == _script_flags(script), program

    model_dir = os.path.join(work, "run")
    train = _run([os.path.join(bin_dir, "augself-train"), "--method=moco", "--augself=crop,color", "--max_steps=5",
                  f"--model_dir={model_dir}", *TINY_TRAIN], work)
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    saved_model = os.path.join(model_dir, "saved_model")
    assert os.path.exists(os.path.join(saved_model, "saved_model.pb"))
    assert "moco + AugSelf[crop,color]" in train.stdout + train.stderr

    output = os.path.join(work, "eval", "results.json")
    evaluate = _run([os.path.join(bin_dir, "augself-eval"), f"--saved_model={saved_model}", "--protocol=linear",
                     "--dataset=shapes", "--image_size=32", "--max_examples=200", "--linear_regs=3",
                     "--linear_max_iter=100", f"--output={output}", "--quiet"], work)
    assert evaluate.returncode == 0, evaluate.stdout[-2000:] + evaluate.stderr[-3000:]
    [record] = json.load(open(output))
    assert (record["model"], record["protocol"], record["dataset"]) == ("run", "linear", "shapes")
    assert record["n_test"] == 200 and 0.0 <= record["value"] <= 100.0
    assert "| linear | shapes | top1_% |" in evaluate.stdout
    # The error path of the installed command: one line naming the command, exit status 2.
    missing = _run([os.path.join(bin_dir, "augself-eval"), "--saved_model=/nonexistent/model"], work)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == ["augself-eval: error: SavedModel not found: /nonexistent/model"]
    # The reproduction runs in a checkout (its ledger, docs/results.md, train_main.py): installed, it says so.
    reproduce = _run([os.path.join(bin_dir, "augself-reproduce"), "--list"], work)
    assert reproduce.returncode == 2, reproduce.stdout[-2000:] + reproduce.stderr[-3000:]
    [line] = reproduce.stderr.strip().splitlines()
    assert line.startswith("augself-reproduce: error: ") and line.endswith(
        " is not an augself-tf checkout (no train_main.py, eval_main.py, reproduce/ledger/, docs/results.md): in a "
        "checkout, run `python -m reproduce.reproduce_small` from its root, or `pip install -e .` there and then "
        "`augself-reproduce`"), line
    print(f"\ninstall + train + eval outside the checkout: {time.perf_counter() - t0:.0f} s")
