"""Many small multinomial logistic regressions at once, by batched Newton steps (the few-shot solver).

Each few-shot episode fits scikit-learn's default ``LogisticRegression()`` objective,
``C·Σ CE(f W + b) + ½‖W‖²`` with the intercept not penalised. The minimiser's W lies in the row space
of the support features (W = −C·Xᵀ(P − Y)), so :func:`episode_basis` rewrites every episode on its
≤ N·K-dimensional support basis and :func:`fit_batched_logreg` solves all episodes together with
Newton steps and per-episode backtracking.
"""

from __future__ import annotations

import numpy as np


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


def episode_basis(x_support: np.ndarray, x_query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
