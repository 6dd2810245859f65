"""The package's layout, read from its source (nothing is imported): unique module names, dependency directions."""

from __future__ import annotations

import collections
import os

from package_source import imported_modules, modules


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_no_module_name_is_used_twice():
    names = collections.defaultdict(list)
    for module, path in modules().items():
        if os.path.basename(path) != "__init__.py":  # a package's own name is its directory's
            names[module.rsplit(".", 1)[-1]].append(module)
    assert len(names["catalog"]) == 1  # the walk works
    twins = {leaf: sorted(found) for leaf, found in names.items() if len(found) > 1}
    assert not twins


def test_dependencies_point_one_way():
    """evaluation reads SavedModels and data, never training; data, models and runtime serve both programs."""
    forbidden = {
        "augself_tf.evaluation": ("augself_tf.training", "augself_tf.methods", "augself_tf.train"),
        "augself_tf.evaluate": ("augself_tf.training", "augself_tf.methods", "augself_tf.train"),
        "augself_tf.data": ("augself_tf.training", "augself_tf.evaluation", "augself_tf.methods"),
        "augself_tf.runtime": ("augself_tf.training", "augself_tf.evaluation", "augself_tf.methods"),
        "augself_tf.training.monitors": ("augself_tf.evaluation",),
    }
    found = modules()
    assert "augself_tf.evaluation.context" in found and "augself_tf.data.catalog" in found  # the walk works
    wrong = []
    for module, path in found.items():
        for owner, banned in forbidden.items():
            if _within(module, owner):
                wrong += [(module, name) for name in imported_modules(module, path)
                          if any(_within(name, b) for b in banned)]
    assert not wrong


def test_the_import_reader_sees_imports_inside_functions(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from augself_tf.training.strategy import x\n\nfrom . import sibling\n")
    assert imported_modules("augself_tf.evaluation.m", str(path)) == {
        "augself_tf.training.strategy", "augself_tf.training.strategy.x", "augself_tf.evaluation",
        "augself_tf.evaluation.sibling",
    }


def test_evaluation_stands_in_floors():
    """estimators (pure maths) < the machinery (evaluation/*.py) < protocols: no import runs back up a floor."""
    floors = ["augself_tf.evaluation.estimators", "augself_tf.evaluation", "augself_tf.evaluation.protocols"]

    def floor(name: str) -> int:
        return max(i for i, f in enumerate(floors) if _within(name, f))

    found = modules()
    assert "augself_tf.evaluation.estimators.logreg" in found  # the walk sees the bottom floor
    upward = []
    for module, path in found.items():
        if not _within(module, "augself_tf.evaluation"):
            continue
        for name in imported_modules(module, path):
            # ``from augself_tf.evaluation import x`` reads as the package itself: judge the module x it names.
            if _within(name, "augself_tf.evaluation") and name not in floors and floor(name) > floor(module):
                upward.append((module, name))
    assert not upward


def test_estimators_hold_no_savedmodel_or_dataset_code():
    """The bottom floor is arrays in, numbers out: no SavedModel loading, no data sources, no reports."""
    banned = ("augself_tf.data", "augself_tf.evaluation.loading", "augself_tf.evaluation.context",
              "augself_tf.evaluation.extraction", "augself_tf.evaluation.report")
    found = modules()
    wrong = [(m, n) for m, p in found.items() if _within(m, "augself_tf.evaluation.estimators")
             for n in imported_modules(m, p) if any(_within(n, b) for b in banned)]
    assert not wrong
