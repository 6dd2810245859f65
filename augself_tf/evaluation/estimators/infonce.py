"""The InfoNCE lower bound on mutual information, with a learned cosine critic (van den Oord et al., 2018).

    I(C; z) >= I_NCE = log N - L_NCE,
    L_NCE = -1/N Σ_i log( exp(s(c_i, z_i)) / Σ_j exp(s(c_i, z_j)) ),

over batches of N pairs, with a learned critic s(c, z) = cos(g(c), h(z)) / τ: g and h are small MLPs
(in -> hidden -> ReLU -> dim) and τ bounds the scores, which keeps a critic that overfits the train
pairs from producing wildly negative test estimates. The critic is trained with Adam on the train
pairs for a fixed number of steps (batches of N drawn at random), then the bound is estimated on the
test pairs: random batches of N, log N - L_NCE per batch, repeated over several critic seeds; mean
and 95% normal interval (ddof 1) over those estimates. Since L_NCE >= 0 the estimate never exceeds
log N. The critic reads √c (the Hellinger embedding of a histogram) and z, each centred with the
train mean and scaled by one train standard deviation for all dimensions.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.intervals import normal_ci95


@dataclasses.dataclass
class CriticOptions:
    """Knobs of the critic and of the estimate.

    Attributes:
      batch: N, pairs per InfoNCE batch (the bound is at most log N).
      steps: Adam steps of critic training.
      hidden, dim: MLP hidden width and embedding size of both encoders.
      lr: Adam learning rate.
      temperature: critic scores are cosine similarities of the two embeddings divided by it.
      seeds: critic seeds (independent trainings).
      eval_batches: random test batches per seed.
    """

    batch: int = 128
    steps: int = 300
    hidden: int = 128
    dim: int = 64
    lr: float = 1e-3
    temperature: float = 0.1
    seeds: int = 3
    eval_batches: int = 10


@dataclasses.dataclass
class InfoNCEResult:
    """Outcome of :func:`infonce_bound`.

    Attributes:
      mean: mean of the per-(seed, batch) estimates log N - L_NCE (nats).
      ci95: 1.96 · sd / √count over those estimates.
      log_n: log N, the largest value the bound can take.
      batch: N actually used (min of the option and the split sizes).
      estimates: every per-(seed, batch) estimate.
      train_bound: the same bound on training batches at the end of training (overfitting check).
      seconds: wall time.
    """

    mean: float
    ci95: float
    log_n: float
    batch: int
    estimates: list[float]
    train_bound: float
    seconds: float


def _mlp(in_dim: int, hidden: int, out: int, rng: np.random.Generator) -> list[tf.Variable]:
    def glorot(a: int, b: int) -> tf.Variable:
        return tf.Variable(rng.normal(0.0, math.sqrt(2.0 / (a + b)), size=(a, b)).astype(np.float32))

    return [glorot(in_dim, hidden), tf.Variable(tf.zeros([hidden])), glorot(hidden, out), tf.Variable(tf.zeros([out]))]


def _apply(params: list[tf.Variable], x: tf.Tensor) -> tf.Tensor:
    w1, b1, w2, b2 = params
    return tf.nn.relu(x @ w1 + b1) @ w2 + b2


def _nce_loss(
    g: list[tf.Variable], h: list[tf.Variable], c: tf.Tensor, z: tf.Tensor, temperature: float
) -> tf.Tensor:
    gc = tf.math.l2_normalize(_apply(g, c), axis=1)
    hz = tf.math.l2_normalize(_apply(h, z), axis=1)
    scores = gc @ tf.transpose(hz) / temperature  # [N, N]: s(c_i, z_j), bounded by ±1/temperature
    labels = tf.range(tf.shape(scores)[0])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, scores))


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Per-dimension centring, ONE scale for all dimensions: near-constant dimensions (rare histogram
    # cells, dead ReLUs) would otherwise be blown up on the test split.
    mu = train.mean(0, keepdims=True)
    sd = float(np.sqrt(np.mean((train - mu) ** 2))) + 1e-8
    return ((train - mu) / sd).astype(np.float32), ((test - mu) / sd).astype(np.float32)


def infonce_bound(
    c_train: np.ndarray,
    z_train: np.ndarray,
    c_test: np.ndarray,
    z_test: np.ndarray,
    options: CriticOptions | None = None,
    *,
    seed: int = 0,
) -> InfoNCEResult:
    """I_NCE(C; z) of paired colour descriptors ``c`` [n, k] and features ``z`` [n, d] (module docstring).

    Raises:
      EvalError: fewer than 2 pairs in a split, or mismatched lengths.
    """
    o = options or CriticOptions()
    start = time.perf_counter()
    if len(c_train) != len(z_train) or len(c_test) != len(z_test):
        raise EvalError("colorinfo: colour descriptors and features have different lengths")
    n = int(min(o.batch, len(c_train), len(c_test)))
    if n < 2:
        raise EvalError(f"colorinfo: need at least 2 train and 2 test examples, got {len(c_train)}, {len(c_test)}")
    ctr, cte = _standardise(np.sqrt(np.maximum(np.asarray(c_train, np.float32), 0)),
                            np.sqrt(np.maximum(np.asarray(c_test, np.float32), 0)))
    ztr, zte = _standardise(np.asarray(z_train, np.float32), np.asarray(z_test, np.float32))
    ctr_t, ztr_t = tf.constant(ctr), tf.constant(ztr)
    estimates: list[float] = []
    train_bounds: list[float] = []
    for s in range(o.seeds):
        rng = np.random.default_rng([seed, s])
        g = _mlp(ctr.shape[1], o.hidden, o.dim, rng)
        h = _mlp(ztr.shape[1], o.hidden, o.dim, rng)
        variables = g + h
        opt = tf.keras.optimizers.Adam(o.lr)

        @tf.function(reduce_retracing=True)
        def step(idx: tf.Tensor, g=g, h=h, variables=variables, opt=opt) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = _nce_loss(g, h, tf.gather(ctr_t, idx), tf.gather(ztr_t, idx), o.temperature)
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        last = []
        for t in range(o.steps):
            idx = rng.choice(len(ctr), n, replace=False).astype(np.int32)
            loss = float(step(tf.constant(idx)))
            if t >= o.steps - 10:
                last.append(math.log(n) - loss)
        train_bounds.extend(last)
        for _ in range(o.eval_batches):
            idx = rng.choice(len(cte), n, replace=False)
            loss = float(_nce_loss(g, h, tf.constant(cte[idx]), tf.constant(zte[idx]), o.temperature))
            estimates.append(math.log(n) - loss)
    arr = np.asarray(estimates)
    return InfoNCEResult(
        mean=float(arr.mean()),
        ci95=normal_ci95(arr, ddof=1),
        log_n=math.log(n),
        batch=n,
        estimates=[float(e) for e in arr],
        train_bound=float(np.mean(train_bounds)) if train_bounds else float("nan"),
        seconds=time.perf_counter() - start,
    )
