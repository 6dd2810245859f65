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
by batched Newton steps with backtracking — 2000 episodes take a few seconds instead of a minute of
per-episode sklearn fits. ``solver="sklearn"`` fits ``LogisticRegression`` per episode (slow, for
checking). (The reference code used ``LogisticRegression(solver="liblinear")``: one-vs-rest with a
penalised intercept — a slightly different classifier than the multinomial default we follow.)
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from threadpoolctl import threadpool_limits

from augself_tf.evaluation.errors import EvalError

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


def confidence95(values: np.ndarray) -> float:
    """Half-width of the normal 95% interval of the mean: 1.96 · std(values) / √n (ddof=0)."""
    values = np.asarray(values, np.float64)
    return float(1.96 * values.std() / np.sqrt(len(values))) if len(values) else float("nan")


# ----------------------------------------------------------------------------------------------------
# Batched multinomial logistic regression (sklearn's objective) by Newton's method


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def _objective(fa: np.ndarray, y1h: np.ndarray, theta: np.ndarray, c: float) -> np.ndarray:
    """Per-episode C·Σ CE + ½‖Z‖² for params theta [E, r+1, N] (last row = intercept)."""
    z = fa @ theta
    z = z - z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    ce = lse - np.sum(z * y1h, axis=-1)
    return c * ce.sum(axis=-1) + 0.5 * np.sum(theta[:, :-1] ** 2, axis=(1, 2))


def fit_batched_logreg(
    feats: np.ndarray, labels: np.ndarray, ways: int, *, c: float = 1.0, max_iter: int = 100, tol: float = 1e-8
) -> np.ndarray:
    """Solve E independent multinomial logistic regressions min C·Σ CE(f W + b) + ½‖W‖² by Newton.

    Args:
      feats: float64 [E, m, r] features per episode (in practice m support rows in an r-dim basis).
      labels: int [m] labels 0..ways-1 shared by all episodes.
      ways: number of classes N.
      c: inverse regularisation strength (sklearn's C).
      max_iter: Newton iterations at most.
      tol: stop an episode when max |gradient| <= tol · max(1, C·m).

    Returns:
      theta float64 [E, r+1, N]: rows 0..r-1 the weights, row r the intercept (sum over classes 0).
    """
    e, m, r = feats.shape
    n = ways
    fa = np.concatenate([feats, np.ones((e, m, 1))], axis=2)  # [E, m, r+1]
    y1h = np.eye(n)[labels][None]  # [1, m, N]
    theta = np.zeros((e, r + 1, n))
    mask = np.ones((r + 1, 1))
    mask[-1] = 0.0  # intercept not penalised
    p_dim = (r + 1) * n
    eye = np.eye(p_dim)
    ridge = np.zeros(p_dim)
    ridge[-n:] = 1e-10 * max(1.0, c * m)  # softmax is invariant to a common intercept shift
    active = np.ones(e, bool)
    f_cur = _objective(fa, y1h, theta, c)
    scale = tol * max(1.0, c * m)
    for _ in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        fa_a, th = fa[idx], theta[idx]
        p = _softmax(fa_a @ th)  # [A, m, N]
        grad = c * np.einsum("emr,emn->ern", fa_a, p - y1h) + mask * th
        gmax = np.abs(grad).max(axis=(1, 2))
        done = gmax <= scale
        active[idx[done]] = False
        keep = ~done
        if not keep.any():
            break
        idx, fa_a, th, p, grad = idx[keep], fa_a[keep], th[keep], p[keep], grad[keep]
        # Hessian blocks: C Σ_i (diag p_i - p_i p_iᵀ) ⊗ fa_i fa_iᵀ  + penalty (weights only).
        # = C [blockdiag_i Σ_m p_mi f_m f_mᵀ  -  Gᵀ G],  G[m, (r, i)] = f_mr p_mi; all as batched matmuls.
        na = len(idx)
        g_mat = (fa_a[..., :, None] * p[..., None, :]).reshape(na, m, p_dim)
        hess = -np.matmul(g_mat.transpose(0, 2, 1), g_mat).reshape(na, r + 1, n, r + 1, n)
        diag = np.matmul((fa_a[:, None] * p.transpose(0, 2, 1)[..., None]).transpose(0, 1, 3, 2), fa_a[:, None])
        for i in range(n):
            hess[:, :, i, :, i] += diag[:, i]
        hess = c * hess.reshape(na, p_dim, p_dim)
        hess += eye * np.repeat(mask[:, 0], n)[None] + np.diag(ridge)[None]
        step = -np.linalg.solve(hess, grad.reshape(len(idx), p_dim, 1))[..., 0].reshape(len(idx), r + 1, n)
        # Backtracking (Armijo) per episode.
        slope = np.sum(grad * step, axis=(1, 2))
        t = np.ones(len(idx))
        f0 = f_cur[idx]
        pending = np.ones(len(idx), bool)
        new_theta = th.copy()
        new_f = f0.copy()
        for _ls in range(40):
            cand = th[pending] + t[pending, None, None] * step[pending]
            f_c = _objective(fa_a[pending], y1h, cand, c)
            ok = f_c <= f0[pending] + 1e-4 * t[pending] * slope[pending]
            sel = np.flatnonzero(pending)
            new_theta[sel[ok]] = cand[ok]
            new_f[sel[ok]] = f_c[ok]
            pending[sel[ok]] = False
            if not pending.any():
                break
            t[pending] *= 0.5
        stalled = pending  # no decrease found: converged to numerical precision
        theta[idx] = new_theta
        f_cur[idx] = new_f
        active[idx[stalled]] = False
    return theta


def _episode_basis(x_support: np.ndarray, x_query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rewrite support/query features [E, m, d]/[E, q, d] on each episode's support row-space basis.

    With the support Gram matrix X Xᵀ = U Λ Uᵀ, the orthonormal basis is V = Xᵀ U Λ^-½: support rows
    become U Λ^½ and query rows Xq Xᵀ U Λ^-½ (null directions of duplicate images dropped).

    Returns:
      (support [E, m, m], query [E, q, m], projection [E, d, m]) — the last maps basis weights back.
    """
    gram = np.matmul(x_support, x_support.transpose(0, 2, 1))
    lam, u = np.linalg.eigh(gram)
    keep = lam > lam[:, -1:] * 1e-12
    root = np.sqrt(np.where(keep, lam, 1.0))
    inv_root = np.where(keep, 1.0 / root, 0.0)
    support = u * (root * keep)[:, None, :]
    cross = np.matmul(x_query, x_support.transpose(0, 2, 1))  # [E, q, m]
    query = np.matmul(cross, u) * inv_root[:, None, :]
    proj = np.matmul(x_support.transpose(0, 2, 1), u) * inv_root[:, None, :]
    return support, query, proj


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
            fs, fq, _ = _episode_basis(xs, xq)
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
        float(accs.mean()), confidence95(accs), accs, ways, shots, queries, episodes, time.perf_counter() - start
    )
