"""Few-shot evaluation: N-way K-shot episodes, logistic regression on frozen support features.

Protocol (paper appendix, reference ``transfer_few_shot.py``): each episode draws N classes, K support
and Q query images per class (classes with ≤ K images are never drawn; when a class has fewer than
K+Q images, its queries are drawn with replacement from the images left after the support — as the
reference sampler does), fits logistic regression on the N·K support features and scores the N·Q
queries. Reported: mean accuracy over episodes ± 1.96·std/√episodes (std with ddof=0, as the
reference code).

Classifier: scikit-learn's default ``LogisticRegression()`` objective — multinomial, C = 1,
``C·Σ CE + ½‖W‖²``, intercept not penalised. The default solver (``"newton"``) solves that exact
problem for all episodes at once: since the minimiser's W lies in the row space of the support
features (W = −C·Xᵀ(P − Y)), each episode is rewritten on its ≤ N·K-dimensional SVD basis and solved
by batched Newton steps with backtracking (:mod:`augself_tf.evaluation.estimators.newton_logreg`) — 2000 episodes
take a few seconds instead of a minute of per-episode sklearn fits. ``solver="sklearn"`` fits
``LogisticRegression`` per episode (slow, for checking). (The reference code used
``LogisticRegression(solver="liblinear")``: one-vs-rest with a penalised intercept — a slightly different
classifier than the multinomial default we follow.)
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from threadpoolctl import threadpool_limits

from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.intervals import normal_ci95
from augself_tf.evaluation.estimators.newton_logreg import episode_basis, fit_batched_logreg

SOLVERS: tuple[str, ...] = ("newton", "sklearn")


@dataclasses.dataclass
class Episodes:
    """Indices of sampled episodes.

    Attributes:
      support: int [E, N·K] indices into the pool, class-major (class 0's K, then class 1's, ...).
      query: int [E, N·Q] indices, class-major.
      classes: int [E, N] the pool labels drawn (episode label j = classes[:, j]).
      ways, shots, queries: N, K, Q.
    """

    support: np.ndarray
    query: np.ndarray
    classes: np.ndarray
    ways: int
    shots: int
    queries: int

    @property
    def support_labels(self) -> np.ndarray:
        """Episode labels [N·K] of the support rows (0..N-1)."""
        return np.repeat(np.arange(self.ways), self.shots)

    @property
    def query_labels(self) -> np.ndarray:
        """Episode labels [N·Q] of the query rows (0..N-1)."""
        return np.repeat(np.arange(self.ways), self.queries)


def sample_episodes(
    labels: np.ndarray, *, ways: int, shots: int, queries: int, episodes: int, seed: int = 0
) -> Episodes:
    """Sample ``episodes`` N-way K-shot episodes with Q queries per class from a labelled pool.

    Raises:
      EvalError: fewer than ``ways`` classes with at least K+1 images, or bad N/K/Q/episodes.
    """
    if ways < 2 or shots < 1 or queries < 1 or episodes < 1:
        raise EvalError(
            f"few-shot needs ways >= 2, shots >= 1, queries >= 1, episodes >= 1 (got {ways}, {shots}, "
            f"{queries}, {episodes})"
        )
    labels = np.asarray(labels).astype(np.int64)
    valid = labels >= 0
    classes, counts = np.unique(labels[valid], return_counts=True)
    eligible = classes[counts > shots]
    if len(eligible) < ways:
        raise EvalError(
            f"{ways}-way {shots}-shot episodes need {ways} classes with at least {shots + 1} images each; "
            f"the pool has {len(eligible)} such classes ({len(classes)} classes, {int(valid.sum())} images)"
        )
    by_class = {int(c): np.flatnonzero(labels == c) for c in eligible}
    rng = np.random.default_rng(seed)
    support = np.empty((episodes, ways * shots), np.int64)
    query = np.empty((episodes, ways * queries), np.int64)
    drawn = np.empty((episodes, ways), np.int64)
    for e in range(episodes):
        chosen = rng.choice(eligible, size=ways, replace=False)
        drawn[e] = chosen
        for j, c in enumerate(chosen):
            pool = by_class[int(c)]
            if len(pool) >= shots + queries:
                pick = rng.choice(pool, size=shots + queries, replace=False)
                s, q = pick[:shots], pick[shots:]
            else:
                perm = rng.permutation(pool)
                s, q = perm[:shots], rng.choice(perm[shots:], size=queries, replace=True)
            support[e, j * shots : (j + 1) * shots] = s
            query[e, j * queries : (j + 1) * queries] = q
    return Episodes(support, query, drawn, ways, shots, queries)


def episode_accuracies(
    features: np.ndarray,
    episodes: Episodes,
    *,
    c: float = 1.0,
    solver: str = "newton",
    chunk: int = 250,
) -> np.ndarray:
    """Query accuracy [E] of logistic regression fitted on each episode's support features."""
    if solver not in SOLVERS:
        raise EvalError(f"unknown few-shot solver {solver!r}: use one of {', '.join(SOLVERS)}")
    features = np.asarray(features, np.float32)
    y_s, y_q = episodes.support_labels, episodes.query_labels
    out = np.empty(len(episodes.support))
    if solver == "sklearn":
        from sklearn.linear_model import LogisticRegression

        with threadpool_limits(1, user_api="blas"):
            for e in range(len(out)):
                clf = LogisticRegression(C=c, max_iter=1000).fit(features[episodes.support[e]], y_s)
                out[e] = np.mean(clf.predict(features[episodes.query[e]]) == y_q)
        return out
    # Many small LAPACK calls: one BLAS thread avoids thread thrash (10x slower on a busy 2-core box).
    with threadpool_limits(1, user_api="blas"):
        for start in range(0, len(out), chunk):
            sl = slice(start, start + chunk)
            xs = features[episodes.support[sl]].astype(np.float64)
            xq = features[episodes.query[sl]].astype(np.float64)
            fs, fq, _ = episode_basis(xs, xq)
            theta = fit_batched_logreg(fs, y_s, episodes.ways, c=c)
            logits = fq @ theta[:, :-1] + theta[:, -1:]
            out[sl] = np.mean(np.argmax(logits, axis=-1) == y_q[None], axis=1)
    return out


@dataclasses.dataclass
class FewShotResult:
    """Mean query accuracy (fraction) over episodes and its 95% half-width."""

    mean: float
    ci95: float
    accuracies: np.ndarray
    ways: int
    shots: int
    queries: int
    episodes: int
    seconds: float


def fewshot_eval(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    ways: int = 5,
    shots: int = 1,
    queries: int = 16,
    episodes: int = 2000,
    seed: int = 0,
    c: float = 1.0,
    solver: str = "newton",
) -> FewShotResult:
    """Sample episodes from (features, labels) and report mean accuracy ± 95% CI."""
    start = time.perf_counter()
    if len(features) != len(labels):
        raise EvalError(f"{len(features)} features but {len(labels)} labels")
    eps = sample_episodes(labels, ways=ways, shots=shots, queries=queries, episodes=episodes, seed=seed)
    accs = episode_accuracies(features, eps, c=c, solver=solver)
    return FewShotResult(
        float(accs.mean()), normal_ci95(accs), accs, ways, shots, queries, episodes, time.perf_counter() - start
    )
