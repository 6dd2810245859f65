"""The paper's reported numbers as data, keyed like our result records (protocol, dataset).

Transcribed from ``paper/augself-neurips2021.tex`` (tables ``transfer_linear``, ``transfer_fewshot``,
``bird_local``, ``pretext``, ``invariance``, ``single_task``, ``combination``, ``framework``,
``looc_comparison``);
``tests/test_eval_paper.py`` re-parses the .tex when it is available and checks every number.
Units as in the paper: accuracies in %, localization error as printed, invariance as a cosine.

Notes on provenance:
* ``localization``: the table has MoCo and supervised rows, which exist only for ImageNet100
  pretraining, so the pretraining is recorded as ImageNet100 ResNet-50 (the text does not say).
* ``rotation`` / ``colorperm``: the text does not name the probe's dataset; the models are the STL10
  SimSiam ones (ablation section) — the entries match any dataset (``dataset=None``).
* STL10 as a *downstream* linear dataset appears only in the ablation tables (STL10 ResNet-18).
* ``looc_comparison``: LooC's setup (ImageNet-100 ResNet-50 pretraining, its recipe); the Flowers-102 5- and
  10-shot columns are our ``lowshot_5shot`` / ``lowshot_10shot``, their ± a standard deviation over draws
  (``std``, not a 95% interval); ImageNet100 and CUB200 are linear. The rows marked * in the paper are LooC's
  own figures ("MoCo (LooC's figure)", "LooC (...)"); the others are the AugSelf authors' reproduction.
"""

from __future__ import annotations

import dataclasses
import re

from augself_tf.data.catalog import canonical_key


@dataclasses.dataclass(frozen=True)
class PaperEntry:
    """One number of the paper.

    Attributes:
      protocol: our protocol key (``linear``, ``fewshot_5way_1shot``, ``localization``, ...).
      dataset: our dataset key (``cifar10``, ``caltech_birds2011``, ...), None = not stated.
      pretrain: "ImageNet100 ResNet-50" or "STL10 ResNet-18".
      method: "SimSiam", "SimSiam+AugSelf", "MoCo v2", ...
      value: the reported figure; ``ci95`` its ± when given as a 95% interval, ``std`` when given as a
        standard deviation (LooC's table).
      table: the .tex label of its table.
    """

    protocol: str
    dataset: str | None
    pretrain: str
    method: str
    value: float
    ci95: float | None
    table: str
    std: float | None = None


IN100 = "ImageNet100 ResNet-50"
STL = "STL10 ResNet-18"
IN100_LOOC = "ImageNet100 ResNet-50, LooC setup"

#: Column order of Table transfer_linear, as our dataset keys (tfds names; MIT67/Aircraft are folders).
LINEAR_DATASETS: tuple[str, ...] = (
    "cifar10", "cifar100", "food101", "mit67", "oxford_iiit_pet", "oxford_flowers102", "caltech101",
    "cars196", "aircraft", "dtd", "sun397",
)
LINEAR_TRANSFER: dict[tuple[str, str], tuple[float, ...]] = {
    (IN100, "SimSiam"): (86.89, 66.33, 61.48, 65.75, 74.69, 88.06, 84.13, 48.20, 48.63, 65.11, 50.60),
    (IN100, "SimSiam+AugSelf"): (88.80, 70.27, 65.63, 67.76, 76.34, 90.70, 85.30, 47.52, 49.76, 67.29, 52.28),
    (IN100, "MoCo v2"): (84.60, 61.60, 59.37, 61.64, 70.08, 82.43, 77.25, 33.86, 41.21, 64.47, 46.50),
    (IN100, "MoCo v2+AugSelf"): (85.26, 63.90, 60.78, 63.36, 73.46, 85.70, 78.93, 37.35, 39.47, 66.22, 48.52),
    (IN100, "Supervised"): (86.16, 62.70, 53.89, 52.91, 73.50, 76.09, 77.53, 30.61, 36.78, 61.91, 40.59),
    (IN100, "Supervised+AugSelf"): (86.06, 63.77, 55.84, 54.63, 74.81, 78.22, 77.47, 31.26, 38.02, 62.07, 41.49),
    (STL, "SimSiam"): (82.35, 54.90, 33.99, 39.15, 44.90, 59.19, 66.33, 16.85, 26.06, 42.57, 29.05),
    (STL, "SimSiam+AugSelf"): (82.76, 58.65, 41.58, 45.67, 48.42, 72.18, 72.75, 21.17, 33.17, 47.02, 34.14),
    (STL, "MoCo v2"): (81.18, 53.75, 33.69, 39.01, 42.34, 61.01, 64.15, 16.09, 26.63, 41.20, 28.50),
    (STL, "MoCo v2+AugSelf"): (82.45, 57.17, 36.91, 41.67, 43.80, 66.96, 66.02, 17.53, 28.02, 45.21, 30.93),
}

#: Table transfer_fewshot columns: (dataset, protocol).
FEWSHOT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("fc100", "fewshot_5way_1shot"), ("fc100", "fewshot_5way_5shot"),
    ("caltech_birds2011", "fewshot_5way_1shot"), ("caltech_birds2011", "fewshot_5way_5shot"),
    ("plant_village", "fewshot_5way_1shot"), ("plant_village", "fewshot_5way_5shot"),
)
FEWSHOT: dict[tuple[str, str], tuple[tuple[float, float], ...]] = {
    (IN100, "SimSiam"): (
        (36.19, 0.36), (50.36, 0.38), (45.56, 0.47),
        (62.48, 0.48), (75.72, 0.46), (89.94, 0.31),
    ),
    (IN100, "SimSiam+AugSelf"): (
        (39.37, 0.40), (55.27, 0.38), (48.08, 0.47),
        (66.27, 0.46), (77.93, 0.46), (91.52, 0.29),
    ),
    (IN100, "MoCo v2"): (
        (31.67, 0.33), (43.88, 0.38), (41.67, 0.47),
        (56.92, 0.47), (65.73, 0.49), (84.98, 0.36),
    ),
    (IN100, "MoCo v2+AugSelf"): (
        (35.02, 0.36), (48.77, 0.39), (44.17, 0.48),
        (57.35, 0.48), (71.80, 0.47), (87.81, 0.33),
    ),
    (IN100, "Supervised"): (
        (33.15, 0.33), (46.59, 0.37), (46.57, 0.48),
        (63.69, 0.46), (68.95, 0.47), (88.77, 0.30),
    ),
    (IN100, "Supervised+AugSelf"): (
        (34.70, 0.35), (48.89, 0.38), (47.58, 0.48),
        (65.31, 0.45), (70.82, 0.46), (89.77, 0.29),
    ),
    (STL, "SimSiam"): (
        (36.72, 0.35), (51.49, 0.36), (37.97, 0.43),
        (50.61, 0.45), (58.13, 0.50), (75.98, 0.40),
    ),
    (STL, "SimSiam+AugSelf"): (
        (40.68, 0.39), (56.26, 0.38), (41.60, 0.42),
        (56.33, 0.44), (62.85, 0.49), (81.14, 0.37),
    ),
    (STL, "MoCo v2"): (
        (35.69, 0.34), (49.26, 0.36), (37.62, 0.42),
        (50.71, 0.44), (57.87, 0.48), (75.98, 0.40),
    ),
    (STL, "MoCo v2+AugSelf"): (
        (39.66, 0.39), (55.58, 0.39), (38.33, 0.41),
        (51.93, 0.44), (60.78, 0.50), (78.76, 0.38),
    ),
}

#: Table bird_local: ℓ2 error of CUB200 box regression (see localization.py for the metric).
LOCALIZATION: dict[str, float] = {
    "SimSiam": 0.00462, "SimSiam+AugSelf": 0.00335,
    "MoCo v2": 0.00487, "MoCo v2+AugSelf": 0.00429,
    "Supervised": 0.00520, "Supervised+AugSelf": 0.00473,
}

#: Table pretext: linear probe accuracy (%) — (rotation, colour permutation).
PRETEXT: dict[str, tuple[float, float]] = {"SimSiam": (59.11, 24.66), "SimSiam+AugSelf": (64.61, 60.49)}

#: Table invariance (STL10-pretrained, STL10 test, projector space): (CS, ±95%).
INVARIANCE: dict[str, tuple[float, float]] = {
    "SimSiam": (0.9263, 0.0005), "BYOL": (0.9555, 0.0004), "SimCLR": (0.9378, 0.0006), "MoCo v2": (0.9274, 0.0006),
    "SimSiam+AugSelf": (0.9250, 0.0006), "BYOL+AugSelf": (0.9453, 0.0004), "SimCLR+AugSelf": (0.9385, 0.0005),
    "MoCo v2+AugSelf": (0.9280, 0.0006),
}

#: Ablation tables (STL10 ResNet-18, linear): columns STL10, CIFAR10, CIFAR100, Food, MIT67, Pets, Flowers.
ABLATION_DATASETS: tuple[str, ...] = (
    "stl10", "cifar10", "cifar100", "food101", "mit67", "oxford_iiit_pet", "oxford_flowers102",
)
ABLATION_LINEAR: dict[tuple[str, str], tuple[float, ...]] = {
    ("single_task", "Random init"): (42.72, 47.45, 23.73, 11.54, 12.29, 12.94, 26.06),
    ("single_task", "AugSelf crop only"): (68.28, 70.78, 43.44, 22.26, 26.17, 27.68, 38.21),
    ("single_task", "AugSelf flip only"): (46.45, 53.80, 24.89, 9.69, 11.99, 10.71, 13.04),
    ("single_task", "AugSelf color only"): (61.14, 63.39, 40.38, 28.02, 25.35, 24.49, 54.42),
    ("single_task", "AugSelf blur only"): (48.26, 46.60, 20.44, 8.73, 11.87, 13.07, 17.20),
    ("combination", "SimSiam"): (85.19, 82.35, 54.90, 33.99, 39.15, 44.90, 59.19),
    ("combination", "SimSiam+AugSelf{crop}"): (85.98, 82.82, 55.78, 35.68, 43.21, 47.10, 62.05),
    ("combination", "SimSiam+AugSelf{color}"): (85.55, 82.90, 58.11, 40.32, 43.56, 47.85, 71.08),
    ("combination", "SimSiam+AugSelf"): (85.70, 82.76, 58.65, 41.58, 45.67, 48.42, 72.18),
    ("framework", "SimCLR"): (84.87, 78.93, 48.94, 31.97, 36.82, 43.18, 56.20),
    ("framework", "SimCLR+AugSelf"): (84.99, 80.92, 53.64, 36.21, 40.62, 46.51, 64.31),
    ("framework", "BYOL"): (86.73, 82.66, 55.94, 37.30, 42.78, 50.21, 66.89),
    ("framework", "BYOL+AugSelf"): (86.79, 83.60, 59.66, 42.89, 46.17, 52.45, 74.07),
    ("framework", "SwAV"): (82.21, 81.60, 52.00, 29.78, 36.69, 37.68, 53.01),
    ("framework", "SwAV+AugSelf"): (82.57, 82.00, 55.10, 33.16, 39.13, 40.74, 61.69),
}

#: Table looc_comparison: (ImageNet100 linear, CUB200 linear, (Flowers 5-shot, std), (Flowers 10-shot, std)).
LOOC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("linear", "imagenet100"), ("linear", "caltech_birds2011"),
    ("lowshot_5shot", "oxford_flowers102"), ("lowshot_10shot", "oxford_flowers102"),
)
LOOC: dict[str, tuple[float, float, tuple[float, float], tuple[float, float]]] = {
    "MoCo (LooC's figure)": (81.0, 36.7, (67.9, 0.5), (77.3, 0.1)),
    "LooC (color)": (81.1, 40.1, (68.2, 0.6), (77.6, 0.1)),
    "LooC (rotation)": (80.2, 38.8, (70.1, 0.4), (79.3, 0.1)),
    "LooC (color, rotation)": (79.2, 39.6, (70.9, 0.3), (80.8, 0.2)),
    "MoCo": (81.0, 32.2, (78.5, 0.3), (81.2, 0.3)),
    "MoCo+AugSelf": (82.4, 37.0, (81.7, 0.2), (84.5, 0.2)),
    "SimSiam": (81.6, 38.4, (83.6, 0.3), (85.9, 0.2)),
    "SimSiam+AugSelf": (82.6, 45.3, (86.4, 0.2), (88.3, 0.1)),
}


def _entries() -> tuple[PaperEntry, ...]:
    out: list[PaperEntry] = []
    for (pre, method), values in LINEAR_TRANSFER.items():
        for ds, v in zip(LINEAR_DATASETS, values, strict=True):
            out.append(PaperEntry("linear", ds, pre, method, v, None, "transfer_linear"))
    for (pre, method), values in FEWSHOT.items():
        for (ds, proto), (v, ci) in zip(FEWSHOT_COLUMNS, values, strict=True):
            out.append(PaperEntry(proto, ds, pre, method, v, ci, "transfer_fewshot"))
    for method, v in LOCALIZATION.items():
        out.append(PaperEntry("localization", "caltech_birds2011", IN100, method, v, None, "bird_local"))
    for method, (rot, perm) in PRETEXT.items():
        out.append(PaperEntry("rotation", None, STL, method, rot, None, "pretext"))
        out.append(PaperEntry("colorperm", None, STL, method, perm, None, "pretext"))
    for method, (v, ci) in INVARIANCE.items():
        out.append(PaperEntry("invariance", "stl10", STL, method, v, ci, "invariance"))
    for (table, method), values in ABLATION_LINEAR.items():
        for ds, v in zip(ABLATION_DATASETS, values, strict=True):
            if table == "combination" and method == "SimSiam" and ds != "stl10":
                continue  # same numbers as transfer_linear's STL10 SimSiam row
            if table == "combination" and method == "SimSiam+AugSelf" and ds != "stl10":
                continue
            out.append(PaperEntry("linear", ds, STL, method, v, None, table))
    for method, row in LOOC.items():
        for (proto, ds), cell in zip(LOOC_COLUMNS, row, strict=True):
            value, std = cell if isinstance(cell, tuple) else (cell, None)
            out.append(PaperEntry(proto, ds, IN100_LOOC, method, value, None, "looc_comparison", std))
    return tuple(out)


ENTRIES: tuple[PaperEntry, ...] = _entries()


def lookup(protocol: str, dataset: str) -> list[PaperEntry]:
    """Paper entries for a protocol on a dataset (entries without a stated dataset match any); the dataset's
    names are the catalog's (:mod:`augself_tf.data.catalog`: ``folder:/x/CUB200`` is ``caltech_birds2011``)."""
    ds = canonical_key(dataset)
    return [e for e in ENTRIES if e.protocol == protocol and (e.dataset is None or e.dataset == ds)]


# ----------------------------------------------------------------------------------------------------
# Verification against the LaTeX source


def _table_rows(tex: str, label: str) -> list[list[str]]:
    """Cells of the data rows (those with a number) of the table carrying ``\\label{table:label}``."""
    i = tex.index(r"\label{table:" + label + "}")
    start = max(tex.rfind(r"\begin{table", 0, i), tex.rfind(r"\begin{wraptable", 0, i))
    ends = [j for j in (tex.find(r"\end{table", i), tex.find(r"\end{wraptable", i)) if j >= 0]
    end = min(ends)
    rows = []
    for line in tex[start:end].split("\n"):
        if "&" not in line:
            continue
        line = line.split(r"\\")[0]
        line = re.sub(r"\\b?facc\{([\d.]+)\}\{([\d.]+)\}", r" \1 \2 ", line)
        line = line.replace(r"\bf", " ")
        line = re.sub(r"\(\s*[+-]\d+\.\d+\s*\)", " ", line)  # LooC table's gains over the baseline
        nums = re.findall(r"(?<![\w.])\d+\.\d+", line)
        if nums:
            rows.append(nums)
    return rows


def parse_tex(tex: str) -> dict[str, list[list[float]]]:
    """Numbers of each transcribed table, row by row, straight from the LaTeX source."""
    labels = ("transfer_linear", "transfer_fewshot", "bird_local", "pretext", "invariance", "single_task",
              "combination", "framework", "looc_comparison")
    return {lab: [[float(x) for x in row] for row in _table_rows(tex, lab)] for lab in labels}
