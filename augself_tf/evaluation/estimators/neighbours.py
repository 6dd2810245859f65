"""Retrieval: top-k cosine nearest neighbours of test images among the other test images.

The paper (Figure "nn") shows top-4 neighbours by cosine similarity of f(x) for a few queries. We draw
the same picture for ``num_queries`` fixed-seed queries and report precision@k — the fraction of the k
neighbours sharing the query's label — averaged over every test image used as a query (the pictured
queries' own precision is recorded too).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from augself_tf.evaluation.estimators.errors import EvalError


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows scaled to unit ℓ2 norm (zero rows stay zero)."""
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), eps)


def cosine_neighbours(features: np.ndarray, queries: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """Indices [len(queries), k] of each query's k most cosine-similar rows of ``features`` (self excluded).

    Ties are broken by the lower index.
    """
    feats = l2_normalize(features)
    queries = np.asarray(queries, np.int64)
    n = len(feats)
    if k >= n:
        raise EvalError(f"retrieval of {k} neighbours needs more than {k} images, got {n}")
    out = np.empty((len(queries), k), np.int64)
    for start in range(0, len(queries), chunk):
        q = queries[start : start + chunk]
        sims = feats[q] @ feats.T
        sims[np.arange(len(q)), q] = -np.inf
        part = np.argpartition(-sims, k, axis=1)[:, : k + 1]
        # exact order among the candidates: by similarity, then index
        cand_s = np.take_along_axis(sims, part, axis=1)
        order = np.lexsort((part, -cand_s), axis=1)[:, :k]
        out[start : start + len(q)] = np.take_along_axis(part, order, axis=1)
    return out


@dataclasses.dataclass
class RetrievalResult:
    """precision@k over all queries, and the pictured queries with their neighbours."""

    precision: float
    shown_queries: np.ndarray
    shown_neighbours: np.ndarray
    shown_precision: float
    k: int
    n: int
    seconds: float


def retrieval_eval(
    features: np.ndarray, labels: np.ndarray, *, k: int = 4, num_queries: int = 8, seed: int = 0
) -> RetrievalResult:
    """Cosine top-k retrieval among ``features``; precision@k over every row as a query."""
    start = time.perf_counter()
    labels = np.asarray(labels)
    n = len(features)
    neigh = cosine_neighbours(features, np.arange(n), k)
    hits = labels[neigh] == labels[:, None]
    shown = np.sort(np.random.default_rng(seed).choice(n, size=min(num_queries, n), replace=False))
    return RetrievalResult(
        precision=float(hits.mean()),
        shown_queries=shown,
        shown_neighbours=neigh[shown],
        shown_precision=float(hits[shown].mean()),
        k=k,
        n=n,
        seconds=time.perf_counter() - start,
    )
