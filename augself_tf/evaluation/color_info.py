"""Colour information kept by frozen features: the InfoNCE bound I_NCE(C; z) of the paper's Figure 1(a).

The paper (Section 3, Figure 1a) measures how much colour information a representation z = f(x) keeps
by the InfoNCE lower bound on the mutual information between z and the RGB colour histogram C(x)
(van den Oord et al., 2018):

    I(C; z) >= I_NCE = log N - L_NCE,
    L_NCE = -1/N Σ_i log( exp(s(c_i, z_i)) / Σ_j exp(s(c_i, z_j)) ),

over batches of N pairs, with a learned critic s(c, z) = cos(g(c), h(z)) / τ: g and h are small MLPs
(in -> hidden -> ReLU -> dim) and τ = 0.1 bounds the scores, which keeps a critic that overfits the
train pairs from producing wildly negative test estimates. The critic is trained with Adam on the
*train* split's pairs for a fixed number of steps (batches of N drawn at random), then the bound is
estimated on the *test* split's pairs: random batches of N, log N - L_NCE per batch. Everything is
repeated over several critic seeds; the reported value is the mean over (seed, batch) estimates with a
95% normal interval (1.96·sd/√count). Since L_NCE >= 0 the estimate can never exceed log N (the bound
saturates at log N: compare models at the same N). On small data a critic overfits its train pairs and
the test estimate of features without colour information goes below 0 (I(C; z) itself is >= 0): compare
models under the same options, as the paper compares colour strengths.

C(x): the joint RGB histogram of the centre-cropped eval image the model sees (``bins`` per channel,
bins³ cells, normalised to sum 1). The paper does not give the bin count or the critic's sizes; ours
(4×4×4 bins, 2-layer MLPs of 128 hidden units, 64-d embedding, N = 128, 300 steps, lr 1e-3) are choices
of this implementation. The critic reads √C (Hellinger embedding of the histogram) and z, each centred
with the train split's mean and scaled by one train-split standard deviation for all dimensions.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.errors import EvalError


@dataclasses.dataclass
class ColorInfoOptions:
    """Knobs of the colour-information estimate (eval_main's ``--colorinfo_*`` flags).

    Attributes:
      bins: histogram bins per RGB channel (bins³ cells).
      batch: N, pairs per InfoNCE batch (the bound is at most log N).
      steps: Adam steps of critic training.
      hidden, dim: MLP hidden width and embedding size of both encoders.
      lr: Adam learning rate.
      temperature: critic scores are cosine similarities of the two embeddings divided by it.
      seeds: critic seeds (independent trainings).
      eval_batches: random test batches per seed.
    """

    bins: int = 4
    batch: int = 128
    steps: int = 300
    hidden: int = 128
    dim: int = 64
    lr: float = 1e-3
    temperature: float = 0.1
    seeds: int = 3
    eval_batches: int = 10

    @classmethod
    def from_dict(cls, d: dict | None) -> ColorInfoOptions:
        """Options from ``{name: value}``, keys not of this class ignored (prefix ``colorinfo_`` allowed)."""
        d = d or {}
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {}
        for k, v in d.items():
            k = k.removeprefix("colorinfo_")
            if k in names and v is not None:
                kw[k] = v
        return cls(**kw)


@dataclasses.dataclass
class ColorInfoResult:
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


def color_histograms(images: tf.Tensor | np.ndarray, bins: int = 4) -> np.ndarray:
    """Joint RGB histograms, float32 [N, bins³], each summing to 1, of images [N, H, W, 3] in [0, 1]."""
    return color_histogram_tf(tf.convert_to_tensor(images, tf.float32), bins).numpy()


def color_histogram_tf(images: tf.Tensor, bins: int = 4) -> tf.Tensor:
    """TF version of :func:`color_histograms`; works on one image [H, W, 3] or a batch [N, H, W, 3]."""
    if bins < 1:
        raise EvalError(f"colour histogram needs at least 1 bin per channel, got {bins}")
    images = tf.convert_to_tensor(images, tf.float32)
    single = images.shape.rank == 3
    x = images[None] if single else images
    q = tf.clip_by_value(tf.cast(tf.floor(tf.clip_by_value(x, 0.0, 1.0) * bins), tf.int32), 0, bins - 1)
    cell = q[..., 0] * bins * bins + q[..., 1] * bins + q[..., 2]  # [N, H, W]
    n = tf.shape(cell)[0]
    flat = tf.reshape(cell, [n, -1])
    counts = tf.math.bincount(flat, minlength=bins**3, maxlength=bins**3, dtype=tf.float32, axis=-1)
    hist = counts / tf.cast(tf.shape(flat)[1], tf.float32)
    return hist[0] if single else hist


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
    options: ColorInfoOptions | None = None,
    *,
    seed: int = 0,
) -> ColorInfoResult:
    """I_NCE(C; z) of paired colour descriptors ``c`` [n, k] and features ``z`` [n, d] (module docstring).

    Raises:
      EvalError: fewer than 2 pairs in a split, or mismatched lengths.
    """
    o = options or ColorInfoOptions()
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
    ci = 1.96 * float(arr.std(ddof=1)) / math.sqrt(len(arr)) if len(arr) > 1 else 0.0
    return ColorInfoResult(
        mean=float(arr.mean()),
        ci95=ci,
        log_n=math.log(n),
        batch=n,
        estimates=[float(e) for e in arr],
        train_bound=float(np.mean(train_bounds)) if train_bounds else float("nan"),
        seconds=time.perf_counter() - start,
    )


def run_protocol(evaluator, model, dataset: str) -> list[dict]:
    """The ``colorinfo`` protocol: histograms and features of train (critic) and test (estimate) splits.

    Args:
      evaluator: the :class:`~augself_tf.evaluation.protocols.Evaluator` (config, data access, extractor).
      model: the :class:`~augself_tf.evaluation.features.LoadedModel`.
      dataset: dataset spec.
    """
    from augself_tf.evaluation.datasets import linear_splits
    from augself_tf.evaluation.report import make_record

    c = evaluator.config
    o = ColorInfoOptions.from_dict(getattr(c, "analysis_options", None))
    plan = linear_splits(evaluator.access, dataset)
    start = time.perf_counter()
    sets = {}
    for split in (plan.train, plan.test):
        ds = evaluator.extractor.examples(dataset, split)
        ds = ds.map(lambda ex: {**ex, "color_hist": color_histogram_tf(ex["image"], o.bins)})
        sets[split] = evaluator.extractor.run(model, ds, description=f"{dataset}/{split}+hist")
    tr, te = sets[plan.train], sets[plan.test]
    res = infonce_bound(tr.fields["color_hist"], tr.features, te.fields["color_hist"], te.features, o, seed=c.seed)
    evaluator.log(f"  I_NCE(C; z) = {res.mean:.3f} ± {res.ci95:.3f} nats (log N = {res.log_n:.3f}, "
                  f"train {res.train_bound:.3f})")
    return [make_record(
        model=model.name, protocol="colorinfo", dataset=dataset, metric="I_NCE_nats", value=res.mean,
        ci95=res.ci95, n_train=len(tr), n_test=len(te), seconds=time.perf_counter() - start,
        settings={
            "image_size": c.image_size, "max_examples": c.max_examples, "seed": c.seed,
            **dataclasses.asdict(o), "batch_used": res.batch, "log_N": res.log_n,
            "train_bound": res.train_bound, "estimates": len(res.estimates),
            "colour": f"joint RGB histogram, {o.bins}^3 bins, of the centre-cropped eval image",
            "critic": "cosine of two 2-layer MLP embeddings / temperature; Adam on train pairs, bound on test batches",
        },
    )]
