"""Docs that cannot drift: every repository file, folder and module that README.md and docs/*.md cite exists.

What counts as a citation (the rule, explicit so that a reader can predict what is checked):

- a markdown link ``[text](target)`` whose target is not a URL or an anchor: the target, resolved against the
  document's folder, must exist;
- inside inline code spans and fenced code blocks, split on whitespace, quotes, brackets and commas:
  * a *path*: a token with a ``/`` between two names, or ending in ``/`` after a name with a file extension or
    a second segment (``augself_tf/training/optim.py``, ``reproduce/ledger/``, ``flags/*_cassle.cfg``). It
    exists when some file or folder of the repository is that path or ends with it on a folder boundary
    (docs cite package files from their package folder: ``training/optim.py``); a glob must match one;
  * a *module file name*: a bare ``name.py``, which some file of the repository must be named;
  * a *dotted module*: ``augself_tf.x.y`` (or under ``bench.`` / ``reproduce.``): its longest prefix that is a
    module must exist, and the next name, if any, must occur in that module's source (an attribute);
  * a pytest node ``path.py::test_name``: the path exists and defines that function or class;
  * a trailing ``:LINE`` is dropped (``file.py:120``).
- Not checked: URLs; flags (``--x``, ``-m``); absolute or home paths; what a user's run writes (``runs/...``,
  ``OUT/...``, ``MODEL_DIR/...``: a first segment in capitals or ``runs``); placeholders (``<...>``, ``{...}``,
  ``$X``, ``...``); ``scheme:value`` tokens (``folder:PATH``); and the files of other repositories that
  the docs name, listed in :data:`EXTERNAL` with where they live.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re

import pytest
from repo_files import repo_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(REPO, "docs"))
                              if n.endswith(".md"))
# What the docs cite from other code bases, by where it lives: not ours, so not looked up in this tree.
EXTERNAL = {
    "hankook/AugSelf (the paper's code)": {"models.py", "trainers.py", "transfer_linear_eval.py",
                                            "transfer_few_shot.py"},
    "mprzewie/AugSelf (CASSLE)": {"pretrain_cond.py", "cond_utils.py", "trainers_cond.py"},
    "ADevillers/EquiMod": {"src/model.py", "src/loss.py", "src/transforms.py", "src/dataset.py", "src/main.py",
                           "main.py"},
    "rdangovs/essl (E-SSL)": {"imagenet/simclr/main.py", "imagenet/simsiam/main.py", "cifar10/main.py",
                              "imagenet/simsiam/README.md"},
    "vturrisi/solo-learn": {"scripts/pretrain/cifar/simsiam.yaml", "scripts/pretrain/cifar/dino.yaml",
                            "solo/methods/dino.py"},
    "kornia": {"random_generator.py"},
    "facebookresearch/moco-v3 (MoCo v3)": {"vits.py", "builder.py", "moco/builder.py", "moco/optimizer.py",
                                            "main_moco.py"},
    "facebookresearch/dino (DINO)": {"main_dino.py", "vision_transformer.py", "utils.py"},
    "NVIDIA/DeepLearningExamples": {"TensorFlow/Classification/ConvNets/resnet50v1.5/README.md"},
}
# Files the docs' how-to sections write as examples ("adding a source is one file: ..."): they name new files.
EXAMPLES = {"augself_tf/data/solid.py", "augself_tf/methods/mymethod.py", "augself_tf/objectives/myobjective.py",
            "augself_tf/evaluation/protocols/featdim.py"}
NOT_OURS = set().union(*EXTERNAL.values()) | EXAMPLES
EXTENSIONS = (".py", ".md", ".cfg", ".txt", ".toml", ".png", ".json", ".csv", ".sh", ".yml", ".yaml", ".tex")
PACKAGES = ("augself_tf", "bench", "reproduce", "tests")


@functools.cache
def top_folders() -> frozenset[str]:
    """The repository's top-level folders (augself_tf, bench, docs, flags, reproduce, tests, .ci, ...)."""
    return frozenset(p for p in repo_paths() if "/" not in p and os.path.isdir(os.path.join(REPO, p)))


@functools.cache
def repo_paths() -> frozenset[str]:
    """Every file of the checkout (tracked or not ignored) and every folder above one, '/'-separated."""
    files = repo_files()
    paths = set(files)
    for f in files:
        parts = f.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(paths)


def path_exists(cited: str) -> bool:
    """``cited`` is a path of the repository or the tail of one, on a folder boundary; globs must match one."""
    cited = cited.rstrip("/").removeprefix("./")
    if any(c in cited for c in "*?["):
        return any(fnmatch.fnmatch(p, cited) or fnmatch.fnmatch(p, "*/" + cited) for p in repo_paths())
    return any(p == cited or p.endswith("/" + cited) for p in repo_paths())


def node_exists(node: str) -> bool:
    """``path.py::name[::name]``: the file exists and defines each name (a test function, a class, a method)."""
    path, *names = node.split("::")
    files = [p for p in repo_paths() if p == path or p.endswith("/" + path)]
    if not files:
        return False
    with open(os.path.join(REPO, files[0]), encoding="utf-8") as f:
        source = f.read()
    return all(re.search(rf"^\s*(async def|def|class) {re.escape(n)}\b", source, re.M) for n in names)


def module_exists(dotted: str) -> bool:
    """The longest module prefix of ``dotted`` exists, and the name after it occurs in its source."""
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        base = "/".join(parts[:n])
        for path in (base + ".py", base + "/__init__.py"):
            if path in repo_paths():
                if n == len(parts):
                    return True
                with open(os.path.join(REPO, path), encoding="utf-8") as f:
                    return re.search(rf"\b{re.escape(parts[n])}\b", f.read()) is not None
    return False


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
SPLIT = re.compile(r"[\s'\"(),;=\[\]]+")


def code_tokens(text: str) -> list[str]:
    """Whitespace-separated tokens of the fenced blocks and inline code spans of a markdown text."""
    chunks = FENCE.findall(text)
    chunks += INLINE.findall(FENCE.sub("", text))
    return [t for chunk in chunks for t in SPLIT.split(chunk) if t]


def classify(token: str) -> tuple[str, str] | None:
    """(kind, name) of a token that cites something of the repository, or None (see the module docstring)."""
    token = re.sub(r":\d+(-\d+)?(,\d+)*$", "", token.rstrip(".:"))
    if re.fullmatch(r"[\w/.\-]+\.py::\w+(::\w+)?", token):
        return "node", token
    if (not token or token.startswith(("-", "/", "~", "$", "http")) or "://" in token or ":" in token
            or any(c in token for c in "<>{}$") or "..." in token):
        return None
    if "/" in token:
        first, _, rest = token.partition("/")
        if first in ("runs", "..", "") or first.isupper() or not rest.strip("/"):
            return None
        if not re.fullmatch(r"[\w.*?\-/]+", token):
            return None
        if token.endswith(EXTENSIONS) or token.endswith("/") or first in top_folders():
            return ("not ours", token) if token in NOT_OURS else ("path", token)
        return None  # a TensorBoard tag (loss/total), a checkpoint key (model/queue), a ratio (train/val)
    if token.endswith(".py"):
        return ("not ours", token) if token in NOT_OURS else ("path", token)
    if re.fullmatch(r"(" + "|".join(PACKAGES) + r")(\.\w+)+", token) and not token.endswith(EXTENSIONS):
        return "module", token
    return None


def citations(text: str, folder: str) -> list[tuple[str, str]]:
    """(kind, cited) for every citation of the markdown ``text`` of a document in ``folder`` (of the repository)."""
    out = []
    for target in LINK.findall(FENCE.sub("", text)):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        rel = os.path.normpath(os.path.join(folder, target.split("#")[0])).replace(os.sep, "/")
        out.append(("link", rel))
    out += [c for c in map(classify, code_tokens(text)) if c is not None and c[0] != "not ours"]
    return out


def stale(text: str, folder: str) -> list[str]:
    """The citations of the markdown ``text`` of a document in ``folder`` that name nothing in the repository."""
    bad = []
    for kind, cited in citations(text, folder):
        if kind == "link":
            ok = os.path.exists(os.path.join(REPO, cited))
        elif kind == "module":
            ok = module_exists(cited)
        elif kind == "node":
            ok = node_exists(cited)
        else:
            ok = path_exists(cited)
        if not ok:
            bad.append(f"{kind} {cited}")
    return sorted(set(bad))


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_path_exists(doc):
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        text = f.read()
    found = stale(text, os.path.dirname(doc))
    assert found == [], f"{doc} cites what the repository does not hold (fix the doc, or the rule above)"


def test_the_rule_catches_a_stale_path_and_skips_what_is_not_ours():
    text = ("See `models/sync_bn.py`, `tests/test_sync_bn.py`, [old](docs/gone.md), `augself_tf.models.sync_bn`,\n"
            "`augself_tf.training.optim.NoSuchOptimizer` and `no_such_module.py`; fine: `training/optim.py`,\n"
            "`augself_tf.training.optim.TorchSGD`, `flags/*_cassle.cfg`, `reproduce/ledger/`,\n"
            "`runs/moco/saved_model`, [ok](../docs/results.md#reproduce-the-effect-on-a-cpu), `loss/total`,\n"
            "`tests/test_training.py::test_gone` `tests/test_install.py::test_python_m_has_exactly_the_scripts_flags`\n"
            "`--model_dir=runs/x`, `folder:/data/my_images`, `OUT/sweep.md`, `trainers.py`, https://example.org/a.py\n"
            "```bash\npython -m reproduce.reproduce_small --report_only\npython -m bench.gone_bench\n```\n")
    assert stale(text, "tests") == [
        "link tests/docs/gone.md", "module augself_tf.models.sync_bn",
        "module augself_tf.training.optim.NoSuchOptimizer",
        "module bench.gone_bench", "node tests/test_training.py::test_gone", "path models/sync_bn.py",
        "path no_such_module.py", "path tests/test_sync_bn.py"]
