"""``shapes``: a small synthetic dataset generated in-process (no files, no network).

Every 64×64 RGB image holds exactly one flat-coloured object on a textured, muted background:

* ``label`` — the object's shape, one of :data:`SHAPE_NAMES`;
* ``color`` — the object's hue, one of :data:`COLOR_NAMES` (a little per-image brightness variation);
* ``bbox``  — the object's tight box ``(ymin, xmin, ymax, xmax)`` as fractions of the image, with
  the exclusive-end convention ``(row_min / H, col_min / W, (row_max + 1) / H, (col_max + 1) / W)``.

Shape and colour are independent and balanced (each (shape, colour) pair occurs equally often, up to
one). Object size is 20%–60% of the side, the object lies fully inside the image, edges are hard (no
anti-aliasing). Background colours are muted: every background pixel has a channel spread
(max − min over R, G, B) of at most :data:`BACKGROUND_MAX_SPREAD`, while every object pixel has a spread of
at least :data:`OBJECT_MIN_SPREAD`, so ``spread > 80`` recovers the object mask exactly.

Splits: ``train`` (5000 images, seed 0) and ``test`` (1000 images, seed 1). Generation is deterministic
(numpy PCG64 from a fixed seed), takes well under a second per split and is cached per process.

Purpose: pretraining runs anywhere in minutes, and the paper's claim can be checked offline — a
representation made invariant to strong colour jitter loses ``color`` while AugSelf keeps it.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from augself_tf.data.source_base import SourceInfo, split_parts, unknown_dataset_error, unknown_split_error

IMAGE_SIZE = 64
SHAPE_NAMES: tuple[str, ...] = ("circle", "square", "triangle", "cross", "ring")
COLOR_NAMES: tuple[str, ...] = ("red", "yellow", "green", "cyan", "blue", "magenta")
# Fully saturated hues 60° apart; the brightness factor (0.7–1.0) scales them per image.
_PALETTE = np.array(
    [
        [235, 35, 35],  # red      0°
        [235, 235, 35],  # yellow  60°
        [35, 235, 35],  # green  120°
        [35, 235, 235],  # cyan   180°
        [35, 35, 235],  # blue   240°
        [235, 35, 235],  # magenta 300°
    ],
    dtype=np.float32,
)
SPLITS: dict[str, tuple[int, int]] = {"train": (5000, 0), "test": (1000, 1)}  # name -> (size, seed)
BACKGROUND_MAX_SPREAD = 60
OBJECT_MIN_SPREAD = 100
_MIN_SIZE, _MAX_SIZE = 0.2, 0.6  # object side as a fraction of the image side
_CHUNK = 250  # images rendered per vectorised chunk (small chunks stay in cache and reuse memory)


def _interp_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Linear-interpolation matrix [n_out, n_in] that upsamples a length-n_in signal to n_out."""
    pos = (np.arange(n_out) + 0.5) / n_out * (n_in - 1)
    lo = np.floor(pos).astype(int).clip(0, n_in - 2)
    frac = pos - lo
    m = np.zeros((n_out, n_in), np.float32)
    m[np.arange(n_out), lo] = 1 - frac
    m[np.arange(n_out), lo + 1] = frac
    return m


def _backgrounds(rng: np.random.Generator, n: int) -> np.ndarray:
    """Muted textured backgrounds, float32 channels-first [n, 3, S, S] in [0, 255].

    Two tints of one grey mixed by a low-frequency noise field or by stripes (one or the other).
    """
    s = IMAGE_SIZE
    grid = 5
    interp = _interp_matrix(grid, s)
    noise = interp @ rng.random((n, grid, grid), dtype=np.float32) @ interp.T  # [n, S, S]
    lo, hi = noise.min(axis=(1, 2), keepdims=True), noise.max(axis=(1, 2), keepdims=True)
    noise = (noise - lo) / (hi - lo + 1e-6)
    # Stripes 0.5 + 0.5 sin(u(x) + v(y)), expanded as sin u cos v + cos u sin v (separable, cheap).
    coords = np.arange(s, dtype=np.float32)[None, :]
    theta = rng.uniform(0, np.pi, (n, 1)).astype(np.float32)
    freq = rng.uniform(2, 6, (n, 1)).astype(np.float32) * (2 * np.pi / s)  # 2-6 stripes per side
    phase = rng.uniform(0, 2 * np.pi, (n, 1)).astype(np.float32)
    u = freq * np.cos(theta) * coords + phase  # [n, S] over x
    v = freq * np.sin(theta) * coords  # [n, S] over y
    stripes = np.sin(v)[:, :, None] * np.cos(u)[:, None, :] + np.cos(v)[:, :, None] * np.sin(u)[:, None, :]
    use_stripes = (rng.random(n) < 0.5)[:, None, None]
    field = np.where(use_stripes, 0.5 + 0.5 * stripes, noise)[:, None]  # [n, 1, S, S] in [0, 1]
    grey = rng.uniform(70, 180, (n, 1, 1, 1)).astype(np.float32)
    # Tints within ±BACKGROUND_MAX_SPREAD/4 per channel -> any mix has spread <= BACKGROUND_MAX_SPREAD/2.
    tint = BACKGROUND_MAX_SPREAD / 4
    col_a = grey + rng.uniform(-tint, tint, (n, 3, 1, 1)).astype(np.float32)
    col_b = grey + rng.uniform(-tint, tint, (n, 3, 1, 1)).astype(np.float32)
    return col_a + (col_b - col_a) * field


def _masks(shape_ids: np.ndarray, cy: np.ndarray, cx: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Boolean object masks [n, S, S] for shapes centred at (cy, cx) (pixel units) with half-side r."""
    coords = np.arange(IMAGE_SIZE, dtype=np.float32) + 0.5  # pixel centres
    dy = coords[None, :, None] - cy[:, None, None]
    dx = coords[None, None, :] - cx[:, None, None]
    r = r[:, None, None]
    ady, adx = np.abs(dy), np.abs(dx)
    d2 = dy * dy + dx * dx
    inside_box = (ady <= r) & (adx <= r)
    masks = {
        "circle": d2 <= r * r,
        "square": inside_box,
        # Apex at the top (dy = -r), base at the bottom (dy = +r).
        "triangle": inside_box & (adx <= (dy + r) / 2),
        "cross": inside_box & ((ady <= r / 3) | (adx <= r / 3)),
        "ring": (d2 <= r * r) & (d2 >= (0.55 * r) ** 2),
    }
    out = np.zeros(dy.shape[:1] + (IMAGE_SIZE, IMAGE_SIZE), bool)
    for k, name in enumerate(SHAPE_NAMES):
        sel = shape_ids == k
        out[sel] = masks[name][sel]
    return out


def _tight_boxes(masks: np.ndarray) -> np.ndarray:
    """Tight boxes (ymin, xmin, ymax, xmax) as fractions, exclusive end, of non-empty masks [n, S, S]."""
    rows, cols = masks.any(axis=2), masks.any(axis=1)
    s = IMAGE_SIZE
    ymin, ymax = rows.argmax(axis=1), s - 1 - rows[:, ::-1].argmax(axis=1)
    xmin, xmax = cols.argmax(axis=1), s - 1 - cols[:, ::-1].argmax(axis=1)
    return (np.stack([ymin, xmin, ymax + 1, xmax + 1], axis=1) / s).astype(np.float32)


@functools.cache
def generate(split: str) -> dict[str, np.ndarray]:
    """Render one split as numpy arrays (cached per process; the arrays are read-only).

    Returns ``{"image": uint8 [N,64,64,3], "label": int64 [N], "color": int64 [N],
    "bbox": float32 [N,4]}``.
    """
    if split not in SPLITS:
        raise unknown_split_error("shapes", split, list(SPLITS))
    n, seed = SPLITS[split]
    rng = np.random.default_rng(seed)
    n_shapes, n_colors = len(SHAPE_NAMES), len(COLOR_NAMES)
    # Balanced and independent: walk the (shape, colour) grid cyclically, then shuffle.
    idx = np.arange(n)
    pairs = rng.permutation(idx % (n_shapes * n_colors))
    labels = (pairs % n_shapes).astype(np.int64)
    colors = (pairs // n_shapes).astype(np.int64)

    side = rng.uniform(_MIN_SIZE, _MAX_SIZE, n).astype(np.float32) * IMAGE_SIZE
    r = side / 2
    cy = rng.uniform(r, IMAGE_SIZE - r).astype(np.float32)
    cx = rng.uniform(r, IMAGE_SIZE - r).astype(np.float32)
    brightness = rng.uniform(0.7, 1.0, n).astype(np.float32)

    images = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    boxes = np.empty((n, 4), np.float32)
    for start in range(0, n, _CHUNK):
        sl = slice(start, min(start + _CHUNK, n))
        m = len(range(n)[sl])
        bg = _backgrounds(rng, m)
        mask = _masks(labels[sl], cy[sl], cx[sl], r[sl])
        obj = np.round(_PALETTE[colors[sl]] * brightness[sl, None])[:, :, None, None]
        # Channels-first while computing (broadcasts over contiguous rows), channels-last at the end.
        images[sl] = np.where(mask[:, None], obj, np.round(bg)).astype(np.uint8).transpose(0, 2, 3, 1)
        boxes[sl] = _tight_boxes(mask)
    out = {"image": images, "label": labels, "color": colors, "bbox": boxes}
    for v in out.values():
        v.setflags(write=False)
    return out


def _check_arg(arg: str) -> None:
    if arg:  # the spec is exactly 'shapes': there is one embedded dataset, no variants
        raise unknown_dataset_error(f"shapes:{arg}")


def info(arg: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
    """SourceInfo of a ``shapes`` split (``train``, ``test`` or e.g. ``train+test``); ``arg`` must be empty.

    ``data_dir`` is unused (nothing is read from disk); it is part of the
    :class:`~augself_tf.data.source_base.Source` API.
    """
    _check_arg(arg)
    parts = split_parts(split)
    for p in parts:
        if p not in SPLITS:
            raise unknown_split_error("shapes", split, list(SPLITS))
    return SourceInfo(
        name="shapes",
        split=split,
        num_examples=sum(SPLITS[p][0] for p in parts),
        num_classes=len(SHAPE_NAMES),
        class_names=list(SHAPE_NAMES),
        has_bbox=True,
        extra_labels={"color": list(COLOR_NAMES)},
        image_size=(IMAGE_SIZE, IMAGE_SIZE),
        splits=tuple(SPLITS),
        notes="synthetic: label = shape, color = hue class; bbox exclusive-end fractions",
    )


def load(arg: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
    """``tf.data.Dataset`` of ``{"image", "label", "color", "bbox"}`` for a ``shapes`` split (``arg`` empty)."""
    info(arg, split)  # validates the spec and the split
    arrays = [generate(p) for p in split_parts(split)]
    data = {k: np.concatenate([a[k] for a in arrays]) if len(arrays) > 1 else arrays[0][k] for k in arrays[0]}
    return tf.data.Dataset.from_tensor_slices(data)
