"""The package's layout, read from its source (nothing is imported): unique module names, dependency directions."""

from __future__ import annotations

import ast
import collections
import graphlib
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


# ----------------------------------------------------------------------------------------------------
# The reproduction (reproduce/): its modules are scripts' siblings, imported two ways (see reproduce/__init__.py)

REPRODUCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reproduce")
BENCH = os.path.join(os.path.dirname(REPRODUCE), "bench")
MAX_LINES = 400
# The settings rework lets the solver module stay whole (tests/test_settings.py holds the same exception for
# augself_tf/).
LINE_LIMIT_EXCEPTIONS = {"augself_tf/evaluation/estimators/logreg.py"}
# The command and the scripts: nothing imports them. The report side (arms, entries, reports) is a function of
# the ledger's files and never imports the running side (run directories, child processes, estimates, timing).
SCRIPTS = {"reproduce_small", "sweep", "plot_monitors", "probe_vs_head"}
RUNNING = {"ledger_runner", "run_directory", "child_process", "provenance", "time_estimates", "step_times"}
REPORTING = {"arm_settings", "main_arms", "looc_arms", "ledger", "seed_cells", "wall_table", "doc_blocks",
             "main_report", "looc_report"}


def _reproduce_modules() -> dict[str, str]:
    """Module name (a script's sibling name) -> path, for every module of reproduce/ but its __init__."""
    return {n[:-3]: os.path.join(REPRODUCE, n) for n in sorted(os.listdir(REPRODUCE))
            if n.endswith(".py") and n != "__init__.py"}


def _siblings(names: set[str], modules: set[str]) -> set[str]:
    """The reproduce/ modules among imported names: ``reproduce.x`` (package) and ``x`` (script) both read as x."""
    return {n.removeprefix("reproduce.").split(".")[0] for n in names
            if n.removeprefix("reproduce.").split(".")[0] in modules and n != "reproduce"}


def _branch_imports(path: str, modules: set[str]) -> list[tuple[int, set[str], set[str]]]:
    """(line, what the package branch imports, what the script branch imports) of each ``if __package__:``
    block, as sibling names: ``ledger``, ``arm_settings.Arm`` (``from reproduce import ledger`` and
    ``import ledger`` both read ``ledger``)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)

    def local(name: str) -> str:
        return "" if name == "reproduce" else name.removeprefix("reproduce.")

    def names(body: list[ast.stmt]) -> set[str]:
        out = set()
        for node in body:
            if isinstance(node, ast.Import):
                out |= {local(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = local(node.module or "")
                out |= {f"{base}.{a.name}" if base else a.name for a in node.names}
        return {n for n in out if n.split(".")[0] in modules}

    return [(node.lineno, names(node.body), names(node.orelse)) for node in tree.body
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "__package__"]


def _bench_modules() -> dict[str, str]:
    """Dotted name (``bench.common``, ``bench.parity.reference_torch.layers``) -> path, for every module of bench/
    and the folders below it (the parity harness)."""
    root = os.path.dirname(BENCH)
    out = {}
    for folder, _dirs, files in os.walk(BENCH):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                out[os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")] = path
    return out


def test_no_module_over_400_lines_in_the_package_the_reproduction_or_the_benchmarks():
    root = os.path.dirname(REPRODUCE)
    paths = list(modules().values()) + list(_reproduce_modules().values()) + list(_bench_modules().values())
    assert any(p.endswith(os.path.join("reproduce", "ledger.py")) for p in paths)  # the walk sees reproduce/
    assert any(p.endswith(os.path.join("bench", "common.py")) for p in paths)  # ... bench/
    assert any(p.endswith(os.path.join("bench", "parity", "reference_torch", "layers.py")) for p in paths)  # below it
    long = {}
    for path in paths:
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES and rel not in LINE_LIMIT_EXCEPTIONS:
            long[rel] = n
    assert long == {}


def test_reproduction_imports_point_down_and_the_report_never_runs_anything():
    """No import circle; no module imports a script; nothing the reports import, however indirectly, runs arms."""
    found = _reproduce_modules()
    assert REPORTING | RUNNING | SCRIPTS == set(found), "a new reproduce/ module: say which side it is on"
    graph = {m: _siblings(imported_modules(f"reproduce.{m}", p), set(found)) - {m} for m, p in found.items()}
    assert "arm_settings" in graph["main_report"] and "time_estimates" in graph["ledger_runner"]  # the reader works
    tuple(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on an import circle
    assert not {m: graph[m] & SCRIPTS for m in found if graph[m] & SCRIPTS}

    def below(m: str, seen: set[str]) -> set[str]:
        for n in graph[m] - seen:
            seen.add(n)
            below(n, seen)
        return seen

    assert not {m: below(m, set()) & RUNNING for m in REPORTING if below(m, set()) & RUNNING}


def test_reproduction_modules_import_the_same_siblings_both_ways():
    """``python reproduce/x.py`` takes the ``else:`` branch, tests and ``python -m`` the ``if __package__:`` one:
    a name imported in one branch only works one way and fails the other."""
    found = _reproduce_modules()
    blocks = {m: _branch_imports(p, set(found)) for m, p in found.items()}
    assert blocks["ledger_runner"] and blocks["ledger_runner"][0][1]  # the reader sees the blocks and their imports
    differ = {(m, line): (package ^ script) for m, bs in blocks.items() for line, package, script in bs
              if package != script}
    assert differ == {}


def test_reproduction_modules_that_import_augself_tf_import_the_ledger_module():
    """``python reproduce/reproduce_small.py`` reads this checkout's augself_tf because reproduce/ledger.py puts the
    checkout root on sys.path: every module of the command that imports augself_tf must import it (scripts that
    run on their own are not bound by it)."""
    found = _reproduce_modules()
    graph = {m: _siblings(imported_modules(f"reproduce.{m}", p), set(found)) for m, p in found.items()}
    uses = {m for m, p in found.items() if m not in SCRIPTS
            and any(n.split(".")[0] == "augself_tf" for n in imported_modules(f"reproduce.{m}", p))}
    assert {"main_report", "time_estimates"} <= uses  # the reader sees imports inside functions
    assert {m for m in uses if m != "ledger" and "ledger" not in graph[m]} == set()
    assert "ledger" in graph["reproduce_small"]


# ----------------------------------------------------------------------------------------------------
# The benchmarks (bench/): scripts import their siblings as top-level modules (``import common``), the parity
# harness its own as ``bench.parity.x`` (see bench/__init__.py)


def _bench_imports() -> dict[str, set[str]]:
    """bench module -> the bench modules it imports: ``bench.x.y`` read as its longest prefix that is a module,
    a bare ``x`` (a script's sibling) as the module of that name beside the importer."""
    found = _bench_modules()
    graph = {}
    for module, path in found.items():
        here = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        edges = set()
        for name in imported_modules(module, path):
            parts = name.split(".")
            prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            if parts[0] != "bench":
                prefixes = [f"{here}.{p}" for p in prefixes]
            edges.add(next((p for p in prefixes if p in found), None))
        graph[module] = edges - {None, module}
    return graph


def test_bench_imports_form_no_circle():
    graph = _bench_imports()
    assert "bench.device_stage_harness" in graph["bench.device_stage_host"]  # the reader sees a script's siblings
    assert "bench.parity.reference_torch.bugs" in graph["bench.parity.reference_torch.layers"]  # ... and packages
    tuple(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on an import circle


ROOT_ON_PATH = "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))"


def _first_line(path: str, wanted) -> int | None:
    """The first line of PATH holding an import whose module name satisfies WANTED, or None."""
    lines = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            lines += [node.lineno for a in node.names if wanted(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and wanted(node.module or ""):
            lines.append(node.lineno)
    return min(lines, default=None)


def test_bench_scripts_import_this_checkouts_augself_tf():
    """``python bench/x.py`` puts bench/ on sys.path, not the checkout root: every bench module that imports
    augself_tf first imports bench/common.py (which puts the root first), directly or through a sibling that
    does, or puts the root there itself; otherwise a script would time the pip-installed package."""
    graph, found = _bench_imports(), _bench_modules()
    fixed = {m for m, p in found.items() if ROOT_ON_PATH in open(p).read()}
    assert "bench.common" in fixed

    def ready(module: str, seen: frozenset = frozenset()) -> int | None:
        """The first line of MODULE after which the root is on sys.path (an import of a module that puts it)."""
        if module in fixed:
            text = open(found[module]).read()
            return text[: text.index(ROOT_ON_PATH)].count("\n") + 1
        short = {m.rpartition(".")[2]: m for m in graph[module] if m not in seen}
        lines = [line for name, m in short.items() if ready(m, seen | {module}) is not None
                 and (line := _first_line(found[module], lambda n, name=name: n.split(".")[-1] == name))]
        return min(lines, default=None)

    late = {}
    for module, path in found.items():
        first = _first_line(path, lambda n: n.split(".")[0] == "augself_tf")
        if first is not None and not module.startswith("bench.parity"):  # the parity harness runs as `-m`
            at = ready(module)
            if at is None or at > first:
                late[module] = (first, at)
    assert late == {}, f"bench modules importing augself_tf before the checkout root is on sys.path: {late}"
