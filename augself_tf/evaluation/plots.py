"""Pictures for the report (matplotlib's Agg canvas directly: no pyplot, no global backend change)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from augself_tf.runtime import files


def _save(fig: Figure, path: str) -> str:
    files.makedirs(files.parent(path))
    FigureCanvasAgg(fig)
    if files.is_url(path):  # matplotlib writes local files only
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=100, format="png")
        files.write_bytes(path, buffer.getvalue())
    else:
        fig.savefig(path, dpi=100)
    return path


def draw_boxes(
    images: np.ndarray,
    true_xywh: np.ndarray,
    pred_xywh: np.ndarray,
    path: str,
    *,
    title: str = "",
    columns: int = 4,
) -> str:
    """Grid of images with true (blue) and predicted (red) boxes, (x, y, w, h) fractions; saves a PNG."""
    n = len(images)
    columns = max(1, min(columns, n))
    rows = max(1, -(-n // columns))
    fig = Figure(figsize=(2.2 * columns, 2.2 * rows + (0.4 if title else 0)))
    for i in range(n):
        ax = fig.add_subplot(rows, columns, i + 1)
        img = images[i]
        h, w = img.shape[:2]
        ax.imshow(img, extent=(0, w, h, 0))
        for box, color in ((true_xywh[i], "blue"), (pred_xywh[i], "red")):
            x, y, bw, bh = (float(v) for v in box)
            ax.add_patch(Rectangle((x * w, y * h), bw * w, bh * h, fill=False, edgecolor=color, linewidth=2))
        ax.set_xlim(0, w)
        ax.set_ylim(h, 0)
        ax.axis("off")
    if title:
        fig.suptitle(title + "  (blue: true, red: predicted)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def draw_retrieval(
    images: np.ndarray,
    queries: Sequence[int],
    neighbours: np.ndarray,
    labels: np.ndarray,
    path: str,
    *,
    title: str = "",
    class_names: Sequence[str] | None = None,
) -> str:
    """One row per query: the query, then its neighbours (green title: same label, red: different)."""
    rows, k = len(queries), neighbours.shape[1]
    fig = Figure(figsize=(1.6 * (k + 1), 1.7 * rows + (0.4 if title else 0)))

    def name(label: int) -> str:
        if class_names is not None and 0 <= label < len(class_names):
            return str(class_names[label])[:14]
        return str(label)

    for r, q in enumerate(queries):
        row = [int(q)] + [int(j) for j in neighbours[r]]
        for c, idx in enumerate(row):
            ax = fig.add_subplot(rows, k + 1, r * (k + 1) + c + 1)
            ax.imshow(images[idx])
            same = labels[idx] == labels[q]
            color = "black" if c == 0 else ("green" if same else "red")
            ax.set_title(("query: " if c == 0 else "") + name(int(labels[idx])), fontsize=7, color=color)
            ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def draw_heatmap(
    values: np.ndarray,
    rows: Sequence[str],
    columns: Sequence[str],
    path: str,
    *,
    labels: np.ndarray | None = None,
    title: str = "",
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> str:
    """A rows × columns heat map of ``values`` (NaN blank), each cell annotated with ``labels`` (default the
    value to 2 decimals); saves a PNG."""
    values = np.asarray(values, np.float64)
    fig = Figure(figsize=(max(4.5, 1.8 + 1.3 * len(columns)), 1.4 + 0.45 * len(rows)))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(columns)), [str(c)[:18] for c in columns], fontsize=8, rotation=20, ha="right")
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    for i in range(len(rows)):
        for j in range(len(columns)):
            text = "" if labels is None else str(labels[i, j])
            if labels is None and np.isfinite(values[i, j]):
                text = f"{values[i, j]:.2f}"
            bright = np.isfinite(values[i, j]) and values[i, j] > vmin + 0.6 * (vmax - vmin)
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="black" if bright else "white")
    fig.colorbar(image, ax=ax, fraction=0.05)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
