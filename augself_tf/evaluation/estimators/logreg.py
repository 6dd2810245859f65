"""ℓ2-regularised multinomial logistic regression by L-BFGS, and the regularisation sweep of the linear probe.

The paper's protocol (appendix "Evaluation protocol", after Kornblith et al. 2019): 45 log-spaced
regularisation values in [1e-6, 1e5], each fitted by L-BFGS (at most 5000 iterations) warm-started from
the previous solution, the best one chosen on a validation split, then a refit on train+val and the
test metric (top-1 or mean per-class accuracy).

Regulariser convention. A sweep value ``reg`` (the paper's "regularisation parameter", named ``w`` in
the reference code) means the objective

    J(W, b) = Σ_i CE(x_i W + b, y_i) + reg · ‖W‖²

i.e. scikit-learn's ``LogisticRegression(C=1 / (2 · reg))`` (``C · Σ CE + ½‖W‖²``), intercept not
penalised (sklearn's convention; the reference code also penalises the bias, ``penalize_bias=True``
reproduces that). Internally the objective is divided by n (mean loss) so that the stopping tolerance
does not depend on the data set size — the minimiser is the same.

Features are used raw (not standardised), as in the paper and its reference code. With an unpenalised
intercept the solver centres them internally (x − μ, intercept b + μW): an exact reparametrisation of
the same problem — same minimiser, same predictions — that L-BFGS solves in 2–4× fewer iterations,
because non-negative (post-ReLU) features otherwise couple every weight with the intercept.

Solvers (``backend``): ``"numpy"`` — our own objective/gradient in float32 BLAS matmuls with float64
accumulation, minimised by ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)``; ``"tf"`` — the
same objective as a ``tf.function`` (TensorFlow matmuls), same scipy L-BFGS; ``"sklearn"`` —
``sklearn.linear_model.LogisticRegression(solver="lbfgs", warm_start=True)``. See
``bench/bench_linear.py`` for the comparison. ``"auto"`` (the default) picks the fastest measured there:
``tf`` for large problems (n·d·k ≥ :data:`AUTO_TF_SIZE`; its oneDNN matmuls are ~30% faster per
objective evaluation at 45000×2048×10), ``numpy`` for small ones (TF's per-call overhead dominates).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.optimize
from threadpoolctl import ThreadpoolController

#: The paper's sweep: 45 logarithmically spaced values from 1e-6 to 1e5.
REG_GRID: np.ndarray = np.logspace(-6.0, 5.0, 45)
BACKENDS: tuple[str, ...] = ("auto", "numpy", "tf", "sklearn")
DEFAULT_BACKEND = "auto"
#: n·d·k from which "auto" uses the TF objective (numpy is faster below: 0.4 vs 4.5 ms at 1000×128×5).
AUTO_TF_SIZE = 4_000_000
#: L-BFGS stopping rule on the mean-scaled objective: max |gradient| <= gtol, or relative decrease <= ftol.
DEFAULT_GTOL = 1e-4
DEFAULT_FTOL = 1e-9
MAX_ITER = 5000


@dataclasses.dataclass
class LogRegModel:
    """A fitted multinomial linear classifier: logits = X @ coef + intercept.

    Attributes:
      coef: float32 [d, k] weights.
      intercept: float32 [k] biases.
      classes: the original label of each of the k outputs.
      reg: the regularisation value it was fitted with (see module docstring).
      n_iter: L-BFGS iterations used.
      converged: whether the stopping rule (not the iteration cap) ended the fit.
      seconds: wall time of the fit.
    """

    coef: np.ndarray
    intercept: np.ndarray
    classes: np.ndarray
    reg: float
    n_iter: int = 0
    converged: bool = True
    seconds: float = 0.0

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """Logits [n, k] for features ``x`` [n, d]."""
        return np.asarray(x, np.float32) @ self.coef + self.intercept

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted original labels [n]."""
        return self.classes[np.argmax(self.decision_function(x), axis=1)]


def top1_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of exact matches."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return float(np.mean(y_true == y_pred)) if y_true.size else float("nan")


def mean_per_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over the classes present in ``y_true`` of each class's accuracy (balanced accuracy)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    classes = np.unique(y_true)
    if classes.size == 0:
        return float("nan")
    return float(np.mean([np.mean(y_pred[y_true == c] == c) for c in classes]))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "top1": top1_accuracy,
    "mean_per_class": mean_per_class_accuracy,
}


# ----------------------------------------------------------------------------------------------------
# BLAS threads: L-BFGS-B's own work is many tiny BLAS calls, which multi-threaded OpenBLAS turns into
# thread thrash (17x slower on a busy 2-core machine); the objective's big matmuls want every thread.

_CONTROLLER: ThreadpoolController | None = None


def _blas_controller() -> ThreadpoolController:
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


class _Threaded:
    """Wraps an objective so that it runs with ``threads`` BLAS threads inside a 1-thread region."""

    def __init__(self, fn: Callable[[np.ndarray], tuple[float, np.ndarray]], threads: int):
        self.fn, self.threads = fn, threads

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        with _blas_controller().limit(limits=self.threads, user_api="blas"):
            return self.fn(theta)


def _blas_threads() -> int:
    infos = [i.get("num_threads", 1) for i in _blas_controller().info() if i.get("user_api") == "blas"]
    return max(infos) if infos else 1


# ----------------------------------------------------------------------------------------------------
# Objective


class _NumpyObjective:
    """Mean-scaled multinomial cross-entropy + ℓ2, value and gradient in float32 BLAS, float64 out."""

    def __init__(self, x: np.ndarray, y_idx: np.ndarray, k: int, reg: float, penalize_bias: bool):
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.y = y_idx
        self.n, self.d = self.x.shape
        self.k = k
        self.rows = np.arange(self.n)
        self.set_reg(reg, penalize_bias)

    def set_reg(self, reg: float, penalize_bias: bool) -> None:
        self.alpha = 2.0 * reg / self.n  # gradient of (reg / n)·‖W‖²
        self.penalize_bias = penalize_bias

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        d, k = self.d, self.k
        w64 = theta[: d * k].reshape(d, k)
        b64 = theta[d * k :]
        z = self.x @ w64.astype(np.float32)
        z += b64.astype(np.float32)
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        s = z.sum(axis=1, keepdims=True)
        picked = z[self.rows, self.y]
        loss = float(np.sum(np.log(s, dtype=np.float64)) - np.sum(np.log(picked.astype(np.float64))))
        z /= s  # probabilities
        z[self.rows, self.y] -= 1.0
        gw = (self.x.T @ z).astype(np.float64)
        gw /= self.n
        gb = z.sum(axis=0, dtype=np.float64) / self.n
        f = loss / self.n + 0.5 * self.alpha * float(np.sum(w64 * w64))
        gw += self.alpha * w64
        if self.penalize_bias:
            f += 0.5 * self.alpha * float(np.sum(b64 * b64))
            gb += self.alpha * b64
        return f, np.concatenate([gw.ravel(), gb])


class _TFObjective(_NumpyObjective):
    """The same objective with TensorFlow matmuls (one traced ``tf.function``)."""

    def __init__(self, x: np.ndarray, y_idx: np.ndarray, k: int, reg: float, penalize_bias: bool):
        import tensorflow as tf

        super().__init__(x, y_idx, k, reg, penalize_bias)
        self._tf = tf
        xt = tf.constant(self.x)
        onehot = tf.one_hot(tf.constant(y_idx), k, dtype=tf.float32)
        n = float(self.n)

        @tf.function(
            input_signature=[tf.TensorSpec([self.d, k], tf.float32), tf.TensorSpec([k], tf.float32)],
            jit_compile=False,
        )
        def value_and_grad(w: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            z = tf.matmul(xt, w) + b
            lse = tf.reduce_logsumexp(z, axis=1)
            picked = tf.reduce_sum(z * onehot, axis=1)
            loss = tf.reduce_sum(tf.cast(lse - picked, tf.float64))
            p = tf.nn.softmax(z) - onehot
            gw = tf.matmul(xt, p, transpose_a=True) / n
            gb = tf.reduce_sum(p, axis=0) / n
            return loss, gw, gb

        self._fn = value_and_grad

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        d, k = self.d, self.k
        w64 = theta[: d * k].reshape(d, k)
        b64 = theta[d * k :]
        loss, gw, gb = self._fn(w64.astype(np.float32), b64.astype(np.float32))
        gw = gw.numpy().astype(np.float64) + self.alpha * w64
        gb = gb.numpy().astype(np.float64)
        f = float(loss.numpy()) / self.n + 0.5 * self.alpha * float(np.sum(w64 * w64))
        if self.penalize_bias:
            f += 0.5 * self.alpha * float(np.sum(b64 * b64))
            gb += self.alpha * b64
        return f, np.concatenate([gw.ravel(), gb])


def _encode_labels(y: np.ndarray, classes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y).astype(np.int64).ravel()
    if classes is None:
        classes = np.unique(y)
    classes = np.asarray(classes, np.int64)
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, len(classes) - 1)
    if not np.all(classes[idx] == y):
        raise ValueError("labels contain values outside `classes`")
    return idx, classes


class LogRegFitter:
    """Fits one data set repeatedly at different regularisation values, warm-starting each fit.

    Args:
      x: features [n, d] (any float dtype; used as float32).
      y: integer labels [n].
      classes: sorted label values defining the k outputs (default: the labels present in ``y``).
      backend: "auto" (default), "numpy", "tf" or "sklearn" (see module docstring).
      max_iter: L-BFGS iteration cap per fit (paper: 5000).
      gtol, ftol: L-BFGS stopping tolerances on the mean-scaled objective.
      penalize_bias: also penalise the intercept (the reference code does; sklearn does not).
      center: solve on mean-centred features (exact reparametrisation; ignored with ``penalize_bias``).
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        classes: np.ndarray | None = None,
        backend: str = DEFAULT_BACKEND,
        max_iter: int = MAX_ITER,
        gtol: float = DEFAULT_GTOL,
        ftol: float = DEFAULT_FTOL,
        penalize_bias: bool = False,
        center: bool = True,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"unknown logistic-regression backend {backend!r}: use one of {BACKENDS}")
        if backend == "sklearn" and penalize_bias:
            raise ValueError("the sklearn backend cannot penalise the intercept")
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[0] != np.asarray(y).shape[0]:
            raise ValueError(f"features {x.shape} and labels {np.asarray(y).shape} do not match")
        self.y_idx, self.classes = _encode_labels(y, classes)
        self.k = len(self.classes)
        if self.k < 2:
            raise ValueError("logistic regression needs at least 2 classes in the training labels")
        if backend == "auto":
            backend = "tf" if x.shape[0] * x.shape[1] * self.k >= AUTO_TF_SIZE else "numpy"
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.mu = np.zeros(self.x.shape[1], np.float64)
        if center and not penalize_bias:
            self.mu = self.x.mean(axis=0, dtype=np.float64)
            self.x = self.x - self.mu.astype(np.float32)  # a new array: the caller's stays untouched
        self.n, self.d = self.x.shape
        self.backend = backend
        self.max_iter = int(max_iter)
        self.gtol, self.ftol = float(gtol), float(ftol)
        self.penalize_bias = penalize_bias
        self._objective: _NumpyObjective | None = None
        self._sk = None
        self.theta: np.ndarray | None = None  # last solution (warm start)

    def _set_theta_from(self, model: LogRegModel | None) -> None:
        if model is None:
            return
        if model.coef.shape != (self.d, self.k):
            raise ValueError(f"warm start has shape {model.coef.shape}, expected {(self.d, self.k)}")
        coef = model.coef.astype(np.float64)
        intercept = model.intercept.astype(np.float64) + self.mu @ coef  # into the centred frame
        self.theta = np.concatenate([coef.ravel(), intercept])

    def fit(self, reg: float, init: LogRegModel | None = None) -> LogRegModel:
        """Fit at regularisation ``reg``, starting from ``init`` or the previous solution (or zeros)."""
        if not reg > 0:
            raise ValueError(f"regularisation must be positive, got {reg}")
        self._set_theta_from(init)
        start = time.perf_counter()
        if self.backend == "sklearn":
            model = self._fit_sklearn(reg, init)
        else:
            model = self._fit_scipy(reg)
        model.seconds = time.perf_counter() - start
        return model

    def _fit_scipy(self, reg: float) -> LogRegModel:
        if self._objective is None:
            cls = _TFObjective if self.backend == "tf" else _NumpyObjective
            self._objective = cls(self.x, self.y_idx, self.k, reg, self.penalize_bias)
        self._objective.set_reg(reg, self.penalize_bias)
        theta0 = self.theta if self.theta is not None else np.zeros(self.d * self.k + self.k)
        objective: Any = self._objective
        if self.n * self.d * self.k >= AUTO_TF_SIZE:
            # Only big matmuls gain from every BLAS thread; on small problems (low-shot fits: 500×64×100)
            # re-raising the thread limit for every evaluation cost ~20× the fit itself on the shared machine.
            objective = _Threaded(self._objective, _blas_threads())
        with _blas_controller().limit(limits=1, user_api="blas"):
            res = scipy.optimize.minimize(
                objective,
                theta0,
                method="L-BFGS-B",
                jac=True,
                options={"maxiter": self.max_iter, "gtol": self.gtol, "ftol": self.ftol, "maxls": 50},
            )
        self.theta = np.asarray(res.x, np.float64)
        coef, intercept = self._raw_params()
        return LogRegModel(
            coef=coef.astype(np.float32),
            intercept=intercept.astype(np.float32),
            classes=self.classes,
            reg=float(reg),
            n_iter=int(res.nit),
            converged=int(res.nit) < self.max_iter,
        )

    def _raw_params(self) -> tuple[np.ndarray, np.ndarray]:
        """(coef [d, k], intercept [k]) of the current solution, back in the raw-feature frame."""
        d, k = self.d, self.k
        coef = self.theta[: d * k].reshape(d, k)
        return coef, self.theta[d * k :] - self.mu @ coef

    def _fit_sklearn(self, reg: float, init: LogRegModel | None) -> LogRegModel:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        if self._sk is None:
            self._sk = LogisticRegression(solver="lbfgs", warm_start=True, max_iter=self.max_iter, tol=self.gtol)
        sk = self._sk
        # sklearn fits a binomial model (one weight vector) for 2 classes; the multinomial objective
        # with C equals the binomial one with 2C (w1 = -w0 = w/2), hence C = 1/reg there.
        sk.set_params(C=1.0 / reg if self.k == 2 else 1.0 / (2.0 * reg))
        if self.theta is not None:
            d, k = self.d, self.k
            coef = self.theta[: d * k].reshape(d, k).T
            intercept = self.theta[d * k :]
            if k == 2:  # sklearn keeps one weight vector for binary problems
                coef, intercept = (coef[1] - coef[0])[None], intercept[1:] - intercept[:1]
            sk.coef_, sk.intercept_, sk.classes_ = np.array(coef), np.array(intercept), np.arange(k)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            sk.fit(self.x, self.y_idx)
        coef, intercept = sk.coef_, sk.intercept_
        if self.k == 2:
            coef = np.stack([-0.5 * coef[0], 0.5 * coef[0]])
            intercept = np.array([-0.5 * intercept[0], 0.5 * intercept[0]])
        n_iter = int(np.max(sk.n_iter_))
        self.theta = np.concatenate([coef.T.astype(np.float64).ravel(), np.asarray(intercept, np.float64)])
        raw_coef, raw_intercept = self._raw_params()
        return LogRegModel(
            coef=raw_coef.astype(np.float32),
            intercept=raw_intercept.astype(np.float32),
            classes=self.classes,
            reg=float(reg),
            n_iter=n_iter,
            converged=n_iter < self.max_iter,
        )


def fit_logreg(
    x: np.ndarray, y: np.ndarray, reg: float, *, init: LogRegModel | None = None, **fitter_options: Any
) -> LogRegModel:
    """Fit one ℓ2-regularised multinomial logistic regression (``reg`` as in the module docstring).

    ``fitter_options`` are :class:`LogRegFitter`'s keyword arguments (classes, backend, max_iter, gtol, ...).
    """
    return LogRegFitter(x, y, **fitter_options).fit(reg, init=init)


@dataclasses.dataclass
class SweepResult:
    """Outcome of the regularisation sweep and the final refit.

    Attributes:
      best_reg: chosen regularisation value.
      val_scores: validation metric per swept value, in sweep order (``regs``).
      regs: the swept values in the order they were fitted (strong to weak regularisation).
      model: the classifier refitted on train+val (or the best sweep model if ``refit`` was False).
      test_score: metric on the test features (None if none were given).
      iterations: L-BFGS iterations per swept value; ``refit_iterations`` for the refit.
      seconds: total wall time.
      metric: the validation/test metric.
      backend: the solver actually used ("auto" resolved).
    """

    best_reg: float
    val_scores: list[float]
    regs: list[float]
    model: LogRegModel
    test_score: float | None
    iterations: list[int]
    refit_iterations: int
    seconds: float
    metric: str
    backend: str = ""

    def summary(self) -> dict:
        """JSON-friendly dict of the sweep (for the result record's settings)."""
        return {
            "best_reg": self.best_reg,
            "best_C_sklearn": 1.0 / (2.0 * self.best_reg),
            "best_val": max(self.val_scores) if self.val_scores else None,
            "sweep": [
                [float(r), float(s), int(i)]
                for r, s, i in zip(self.regs, self.val_scores, self.iterations, strict=True)
            ],
            "refit_iterations": self.refit_iterations,
            "metric": self.metric,
            "backend": self.backend,
        }


def linear_eval(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    x_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
    *,
    metric: str = "top1",
    regs: Sequence[float] = tuple(REG_GRID),
    backend: str = DEFAULT_BACKEND,
    max_iter: int = MAX_ITER,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    refit: bool = True,
    penalize_bias: bool = False,
    center: bool = True,
    log: Callable[[str], None] | None = None,
) -> SweepResult:
    """The paper's linear protocol on precomputed features.

    Sweeps ``regs`` from the strongest to the weakest regularisation (each fit warm-started from the
    previous solution — the usual regularisation-path order, cheap at the start), picks the value with
    the best validation ``metric`` (ties: the stronger regularisation), refits on train+val warm-started
    from that value's solution, and scores the test split.

    Returns:
      A :class:`SweepResult`.
    """
    start = time.perf_counter()
    score = METRICS[metric]
    classes = np.unique(np.concatenate([np.asarray(y_train), np.asarray(y_val)]).astype(np.int64))
    fitter = LogRegFitter(
        x_train, y_train, classes=classes, backend=backend, max_iter=max_iter, gtol=gtol, ftol=ftol,
        penalize_bias=penalize_bias, center=center,
    )
    order = sorted((float(r) for r in regs), reverse=True)
    val_scores: list[float] = []
    iterations: list[int] = []
    best: LogRegModel | None = None
    best_score = -np.inf
    for reg in order:
        model = fitter.fit(reg)
        s = score(y_val, model.predict(x_val))
        val_scores.append(s)
        iterations.append(model.n_iter)
        if log is not None:
            log(f"  reg={reg:.3e} val_{metric}={s:.4f} iters={model.n_iter} ({model.seconds:.1f}s)")
        if s > best_score:
            best_score, best = s, model
    assert best is not None
    final = best
    refit_iters = 0
    if refit:
        x_all = np.concatenate([np.asarray(x_train, np.float32), np.asarray(x_val, np.float32)])
        y_all = np.concatenate([np.asarray(y_train), np.asarray(y_val)])
        refitter = LogRegFitter(
            x_all, y_all, classes=classes, backend=backend, max_iter=max_iter, gtol=gtol, ftol=ftol,
            penalize_bias=penalize_bias, center=center,
        )
        final = refitter.fit(best.reg, init=best)
        refit_iters = final.n_iter
    test_score = None
    if x_test is not None and y_test is not None:
        test_score = score(np.asarray(y_test), final.predict(x_test))
    return SweepResult(
        best_reg=best.reg,
        val_scores=val_scores,
        regs=order,
        model=final,
        test_score=test_score,
        iterations=iterations,
        refit_iterations=refit_iters,
        seconds=time.perf_counter() - start,
        metric=metric,
        backend=fitter.backend,
    )
