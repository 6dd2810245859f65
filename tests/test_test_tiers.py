"""The two test tiers stay what README.md and docs/development.md say: the README's command is the fast tier,
`.ci/run` runs it and then the slow tier, and every test that starts a whole training process is in the slow one.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = '-m "not slow"'


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _pytest_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if "python -m pytest" in line and not line.lstrip().startswith("#")]


def test_the_readme_runs_the_fast_tier_and_ci_runs_it_then_the_slow_tier():
    (readme,) = [line for line in _pytest_lines(_read("README.md"))]
    command = readme[readme.index("python -m pytest"):]
    assert FAST in command, readme
    ci = _pytest_lines(_read(".ci/run"))
    assert [FAST in line for line in ci] == [True, False], ci
    assert ci[0] == command, "the README's test command and .ci/run's fast tier differ"
    assert ci[1] == command.replace(FAST, "-m slow"), "the slow tier must run the same tests with -m slow"


def test_the_slow_marker_is_registered():
    markers = re.search(r"markers = \[(.*?)\]", _read("pyproject.toml"), re.S).group(1)
    assert re.search(r'"slow: ', markers), markers


def _starts_training_process(node: ast.FunctionDef) -> bool:
    """True when the test's own body calls subprocess.run/Popen and names a training program: train_main.py,
    the reproduction or the sweep (both start train_main.py); asking a program for its help trains nothing."""
    body = ast.unparse(node)
    if not any(name in body for name in ("train_main", "reproduce_small", "reproduce.sweep")) or "--help" in body:
        return False
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("run", "Popen") and getattr(call.func.value, "id", "") == "subprocess"):
            continue
        return True
    return False


def _slow(node: ast.FunctionDef, module_marked: bool) -> bool:
    return module_marked or any("mark.slow" in ast.unparse(d) for d in node.decorator_list)


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(ROOT, "tests"))
                                        if n.startswith("test_") and n.endswith(".py")))
def test_tests_that_start_training_processes_are_slow(name):
    tree = ast.parse(_read(os.path.join("tests", name)))
    module_marked = any(isinstance(s, ast.Assign) and "mark.slow" in ast.unparse(s) for s in tree.body)
    fast = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and not _slow(node, module_marked):
            if _starts_training_process(node):
                fast.append(node.name)
    assert not fast, f"{name}: tests that start training processes without @pytest.mark.slow: {fast}"
