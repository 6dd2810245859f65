"""``folder:PATH``: image trees on disk.

Layout (decided per tree, top-down from PATH):

* **split level** — a directory whose subdirectory names include a split name (``train``, ``training``,
  ``val``, ``valid``, ``validation``, ``dev``, ``test``, ``testing``, ``unlabeled``): each split folder
  is a class tree (``PATH/<split>/<class>/*``); its other subdirectories are ignored (with a warning).
  Splits are the split folders present, plus ``all`` (their union). ``val``/``valid``/``validation``/
  ``dev``, ``train``/``training`` and ``test``/``testing`` are aliases of each other.
* **single wrapper** — a directory holding no images and exactly one subdirectory that itself has
  subdirectories is skipped (``tiny-imagenet-mini/images/<wnid>/*`` -> class tree ``images``).
* otherwise a **class level / pool** — ``PATH/<class>/*``: split ``all`` is every image; ``train``,
  ``val`` and ``test`` are a deterministic stratified partition: per class, the sorted files are
  permuted with a seed derived from the class name (crc32) and cut 70% / 10% / 20% (rounded half
  up, the rest to test) — see :data:`POOL_FRACTIONS`. The partition of a class does not change when
  other classes or unreadable files come and go.

Images are files with extension jpg, jpeg, png, bmp, gif or webp (case-insensitive) anywhere below a
class folder (nested folders included); hidden files and folders are ignored. Labels are the sorted
class folder names (union over all splits) -> 0..K-1, identical across splits. Images decode to RGB
uint8 (grayscale is replicated, alpha dropped, first frame of a GIF).

Unreadable files are skipped, never fatal: each split's files are test-decoded once per process (in
parallel with the decoder used for training, JPEGs at 1/8 scale), and one warning reports how many
were skipped and names the first few.

Boxes: an optional ``PATH/boxes.csv`` with header ``filename,label,xmin,ymin,xmax,ymax`` (filename
relative to PATH; pixel coordinates, inclusive; ``label`` is not used) gives each example
``bbox = (ymin/H, xmin/W, (ymax+1)/H, (xmax+1)/W)`` — fractions with an exclusive end, the tfds
``BBoxFeature`` convention — with H, W read from the decoded image and the result clipped to [0, 1].
Images without a row get ``bbox`` NaN (counted in a warning).

The examples come in a fixed pseudo-random order (seeded permutation), so a finite shuffle buffer
mixes classes; consumers still shuffle per epoch.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import os
import zlib
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from augself_tf.data.source_base import SourceInfo, split_parts, unknown_split_error

IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
POOL_FRACTIONS: dict[str, float] = {"train": 0.7, "val": 0.1, "test": 0.2}
_SPLIT_ALIASES: dict[str, str] = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
    "unlabeled": "unlabeled",
    "unlabelled": "unlabeled",
}
_ORDER_SEED = 20211206
_MAX_LISTED = 5  # file names quoted in a warning


@dataclasses.dataclass(frozen=True)
class _Tree:
    root: str  # absolute PATH of the spec
    class_dir_note: str  # human description of the layout
    pool: bool  # True: no split folders, the partition applies
    class_names: tuple[str, ...]
    files: dict[str, tuple[tuple[str, int], ...]]  # split folder name (pool: "all") -> (path, label)
    boxes: dict[str, tuple[int, int, int, int]] | None  # abs path -> (xmin, ymin, xmax, ymax)


def _resolve(path: str, data_dir: str | None) -> str:
    if not path:
        raise ValueError("dataset spec 'folder:' needs a path, e.g. 'folder:/data/my_images'")
    path = os.path.expanduser(path)
    if not os.path.isabs(path) and data_dir and os.path.isdir(os.path.join(data_dir, path)):
        path = os.path.join(data_dir, path)
    return os.path.abspath(path)


def _subdirs(d: str) -> list[str]:
    with os.scandir(d) as it:
        return sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))


def _is_image(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _has_images(d: str) -> bool:
    with os.scandir(d) as it:
        return any(e.is_file() and _is_image(e.name) for e in it)


def _unwrap(d: str) -> str:
    """Skip single wrapper folders: no images here and one subfolder that has subfolders."""
    for _ in range(8):
        subs = _subdirs(d)
        if len(subs) == 1 and not _has_images(d) and _subdirs(os.path.join(d, subs[0])):
            if any(s.lower() in _SPLIT_ALIASES for s in subs):
                break  # a lone split folder is a split level, not a wrapper
            d = os.path.join(d, subs[0])
        else:
            break
    return d


def _images_below(d: str) -> list[str]:
    """Image files below ``d``, following symlinked folders but entering each real folder once: a link back up
    the tree (a loop) would otherwise list every file again at each level, tens of times."""
    out = []
    visited: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(d, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in visited:
            dirnames[:] = []
            continue
        visited.add(real)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames) if _is_image(f))
    return out


def _once_each(trees: dict[str, dict[str, list[str]]], top: str) -> dict[str, dict[str, list[str]]]:
    """``trees`` with every file whose real path was already listed (in any split or class) dropped, so that a
    linked file cannot sit in the train and the test split at once."""
    seen: set[str] = set()
    out: dict[str, dict[str, list[str]]] = {s: {} for s in trees}
    for split in sorted(trees):
        for c in sorted(trees[split]):
            kept = [f for f in trees[split][c] if not (os.path.realpath(f) in seen or seen.add(os.path.realpath(f)))]
            out[split].update({c: kept} if kept else {})
    dropped = sum(len(f) for t in trees.values() for f in t.values()) - len(seen)
    if dropped:
        logging.warning("folder %s: %d file(s) reached twice through symbolic links were listed once", top, dropped)
    return out


def _class_tree(d: str) -> dict[str, list[str]]:
    """class folder name -> its image files (sorted), for class folders holding at least one image."""
    d = _unwrap(d)
    tree = {c: _images_below(os.path.join(d, c)) for c in _subdirs(d)}
    return {c: f for c, f in tree.items() if f}


def _read_boxes(root: str) -> dict[str, tuple[int, int, int, int]] | None:
    path = os.path.join(root, "boxes.csv")
    if not os.path.isfile(path):
        return None
    boxes: dict[str, tuple[int, int, int, int]] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"filename", "xmin", "ymin", "xmax", "ymax"}
        if not need <= set(reader.fieldnames or ()):
            raise ValueError(f"{path}: expected a header with columns filename,label,xmin,ymin,xmax,ymax")
        for line, row in enumerate(reader, start=2):
            try:
                box = tuple(int(float(row[k])) for k in ("xmin", "ymin", "xmax", "ymax"))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: bad box coordinates {row}") from None
            boxes[os.path.normpath(os.path.join(root, row["filename"]))] = box  # type: ignore[assignment]
    return boxes


@functools.cache
def _scan(root: str) -> _Tree:
    """Read the layout of the tree at ``root`` (absolute). Cached per process."""
    if not os.path.isdir(root):
        raise ValueError(f"folder dataset {root!r} does not exist or is not a directory")
    top = _unwrap(root)
    subs = _subdirs(top)
    split_dirs = [s for s in subs if s.lower() in _SPLIT_ALIASES]
    if split_dirs:
        others = [s for s in subs if s not in split_dirs]
        if others:
            logging.warning(
                "folder %s: ignoring %d non-split folder(s) next to the split folders: %s",
                top,
                len(others),
                ", ".join(others[:_MAX_LISTED]),
            )
        trees = {s: _class_tree(os.path.join(top, s)) for s in split_dirs}
        note = f"split folders {', '.join(split_dirs)} under {top}"
    else:
        trees = {"all": _class_tree(top)}
        note = f"class folders under {top}, no split folders: stratified 70/10/20 train/val/test partition"
    trees = _once_each(trees, top)
    class_names = tuple(sorted({c for t in trees.values() for c in t}))
    if not class_names:
        raise ValueError(
            f"folder dataset {root!r} holds no images: expected PATH/<class>/*.jpg or "
            f"PATH/<split>/<class>/*.jpg (extensions {', '.join(e[1:] for e in IMAGE_EXTENSIONS)})"
        )
    label = {c: i for i, c in enumerate(class_names)}
    files = {s: tuple((f, label[c]) for c in sorted(t) for f in t[c]) for s, t in trees.items()}
    return _Tree(root, note, not split_dirs, class_names, files, _read_boxes(root))


def _valid_splits(tree: _Tree) -> list[str]:
    if tree.pool:
        return ["all", *POOL_FRACTIONS]
    return ["all", *tree.files]


def _pool_part(files: tuple[tuple[str, int], ...], part: str, class_names: tuple[str, ...]) -> list:
    by_class: dict[int, list[tuple[str, int]]] = {}
    for item in files:
        by_class.setdefault(item[1], []).append(item)
    out = []
    for lab, items in sorted(by_class.items()):
        n = len(items)
        rng = np.random.default_rng([zlib.crc32(class_names[lab].encode()), 7])
        perm = rng.permutation(n)
        n_train = int(np.floor(POOL_FRACTIONS["train"] * n + 0.5))
        n_val = min(int(np.floor(POOL_FRACTIONS["val"] * n + 0.5)), n - n_train)
        bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, n)}
        lo, hi = bounds[part]
        out.extend(items[i] for i in sorted(perm[lo:hi]))
    return out


def _split_files(tree: _Tree, split: str) -> list[tuple[str, int]]:
    """(path, label) of a split expression, in the fixed pseudo-random order."""
    valid = _valid_splits(tree)
    name = f"folder:{tree.root}"
    chosen: list[tuple[str, int]] = []
    for part in split_parts(split):
        key = part.lower()
        if key == "all":
            chosen.extend(item for files in tree.files.values() for item in files)
        elif tree.pool:
            if key not in _SPLIT_ALIASES or _SPLIT_ALIASES[key] not in POOL_FRACTIONS:
                raise unknown_split_error(name, split, valid)
            chosen.extend(_pool_part(tree.files["all"], _SPLIT_ALIASES[key], tree.class_names))
        else:
            match = [s for s in tree.files if s.lower() == key]
            if not match and key in _SPLIT_ALIASES:
                match = [s for s in tree.files if _SPLIT_ALIASES[s.lower()] == _SPLIT_ALIASES[key]]
            if not match:
                raise unknown_split_error(name, split, valid)
            chosen.extend(tree.files[match[0]])
    chosen = sorted(set(chosen))
    order = np.random.default_rng(_ORDER_SEED).permutation(len(chosen))
    return [chosen[i] for i in order]


# (path, size, mtime_ns) -> decodable
_DECODABLE: dict[tuple[str, int, int], bool] = {}


def _probe_decode(paths: list[str]) -> list[bool]:
    """Test-decode files with TensorFlow (JPEG at 1/8 scale), in parallel; True where decodable."""
    if not paths:
        return []

    def probe(i: tf.Tensor, path: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        data = tf.io.read_file(path)
        img = tf.cond(
            tf.io.is_jpeg(data),
            lambda: tf.io.decode_jpeg(data, channels=3, ratio=8),
            lambda: tf.io.decode_image(data, channels=3, expand_animations=False),
        )
        return i, tf.shape(img)  # the shape keeps the decode from being pruned

    ds = tf.data.Dataset.from_tensor_slices((tf.range(len(paths), dtype=tf.int64), tf.constant(paths)))
    ds = ds.map(probe, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).ignore_errors()
    ok = np.zeros(len(paths), bool)
    for idx, _ in ds.batch(4096).as_numpy_iterator():
        ok[idx] = True
    return ok.tolist()


def _usable(paths: list[str]) -> list[bool]:
    """Decodability of each path (cached per process by path, size and mtime)."""
    keys = []
    for p in paths:
        try:
            st = os.stat(p)
            keys.append((p, st.st_size, st.st_mtime_ns))
        except OSError:
            keys.append((p, -1, -1))
    todo = [k for k in keys if k not in _DECODABLE and k[1] >= 0]
    for k, ok in zip(todo, _probe_decode([k[0] for k in todo]), strict=True):
        _DECODABLE[k] = ok
    return [k[1] >= 0 and _DECODABLE[k] for k in keys]


_WARNED: set[tuple] = set()


def _warn_once(key: tuple, msg: str, *args: object) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logging.warning(msg, *args)


def _good_files(tree: _Tree, split: str) -> list[tuple[str, int]]:
    files = _split_files(tree, split)
    ok = _usable([f for f, _ in files])
    bad = sorted(os.path.relpath(f, tree.root) for (f, _), good in zip(files, ok, strict=True) if not good)
    if bad:
        _warn_once(
            ("bad", tree.root, split, tuple(bad)),
            "folder:%s split %r: skipped %d unreadable image file(s) of %d: %s%s",
            tree.root,
            split,
            len(bad),
            len(files),
            ", ".join(bad[:_MAX_LISTED]),
            ", ..." if len(bad) > _MAX_LISTED else "",
        )
    good = [item for item, g in zip(files, ok, strict=True) if g]
    if not good:
        raise ValueError(f"folder:{tree.root} split {split!r} has no readable images")
    return good


def files(path: str, split: str, *, data_dir: str | None = None) -> list[tuple[str, int]]:
    """(file path, label) of the readable images of a split of ``folder:PATH``, in the fixed example order.

    Unreadable files are left out (test-decoded once per process, with one warning); PATH is resolved as in
    :func:`load`.
    """
    return _good_files(_scan(_resolve(path, data_dir)), split)


def info(path: str, split: str, *, data_dir: str | None = None) -> SourceInfo:
    """SourceInfo of a split of ``folder:PATH`` (test-decodes its files once per process)."""
    tree = _scan(_resolve(path, data_dir))
    n = len(_good_files(tree, split))
    notes = tree.class_dir_note
    if tree.boxes is not None:
        notes += "; bbox from boxes.csv: (ymin/H, xmin/W, (ymax+1)/H, (xmax+1)/W), NaN if no row"
    return SourceInfo(
        name=f"folder:{tree.root}",
        split=split,
        num_examples=n,
        num_classes=len(tree.class_names),
        class_names=list(tree.class_names),
        has_bbox=tree.boxes is not None,
        image_size=None,
        splits=tuple(_valid_splits(tree)),
        notes=notes,
    )


def _decode(path: tf.Tensor) -> tf.Tensor:
    img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    img.set_shape([None, None, 3])
    return img


def records(path: str, split: str, *, data_dir: str | None = None) -> tuple[dict[str, np.ndarray], Callable]:
    """A split of ``folder:PATH`` as cheap records (``{"path", "label"[, "box"]}`` arrays, one row per image) and
    the function mapping one record to its example ``{"image", "label"[, "bbox"]}``: a pipeline permutes the
    records (file names, not images) and decodes after (augself_tf.data.pretrain's full per-epoch shuffle)."""
    tree = _scan(_resolve(path, data_dir))
    files = _good_files(tree, split)
    paths = np.array([f for f, _ in files], object)
    rows = {"path": paths, "label": np.array([lab for _, lab in files], np.int64)}
    if tree.boxes is None:
        return rows, lambda r: {"image": _decode(r["path"]), "label": r["label"]}
    missing = [p for p in paths if os.path.normpath(p) not in tree.boxes]
    if missing:
        _warn_once(("nobox", tree.root, split), "folder:%s split %r: %d image(s) have no row in boxes.csv (bbox "
                   "NaN): %s", tree.root, split, len(missing),
                   ", ".join(os.path.relpath(p, tree.root) for p in missing[:_MAX_LISTED]))
    nan = (np.nan,) * 4
    rows["box"] = np.array([tree.boxes.get(os.path.normpath(p), nan) for p in paths], np.float32).reshape(-1, 4)

    def with_box(r: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        img = _decode(r["path"])
        hw = tf.cast(tf.shape(img)[:2], tf.float32)
        xmin, ymin, xmax, ymax = tf.unstack(r["box"])
        frac = tf.stack([ymin / hw[0], xmin / hw[1], (ymax + 1) / hw[0], (xmax + 1) / hw[1]])
        bbox = tf.where(tf.math.is_finite(frac), tf.clip_by_value(frac, 0.0, 1.0), frac)
        return {"image": img, "label": r["label"], "bbox": bbox}

    return rows, with_box


def load(path: str, split: str, *, data_dir: str | None = None) -> tf.data.Dataset:
    """``tf.data.Dataset`` of ``{"image", "label"[, "bbox"]}`` for a split of ``folder:PATH``."""
    rows, decode = records(path, split, data_dir=data_dir)
    return tf.data.Dataset.from_tensor_slices(rows).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
