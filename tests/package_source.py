"""The package read as source (nothing imported): its modules and the imports each makes, for the layout tests."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "augself_tf")


def modules() -> dict[str, str]:
    """Dotted module name -> file path, for every module of the package."""
    out = {}
    for root, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def import_statements(module: str, path: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every import of ``module``, at any depth of its code (function-level imports included), as (base, names):
    ``import a.b`` is ("a.b", ()), ``from a import x, y`` is ("a", ("x", "y")); relative bases are resolved."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out.append((base, tuple(alias.name for alias in node.names)))
    return out


def imported_modules(module: str, path: str) -> set[str]:
    """Every name ``module`` imports: each base, and base.name for each name taken from it."""
    out = set()
    for base, names in import_statements(module, path):
        out.add(base)
        out.update(f"{base}.{name}" for name in names)
    return out
