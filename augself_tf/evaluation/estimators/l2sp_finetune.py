"""Fine-tuning with the L2SP regulariser (paper appendix "Fine-tuning experiments", Table 10).

The exported backbone f (SavedModel) and a new linear classifier (W, b) are trained together on the
target dataset with cross-entropy plus L2SP (Li et al., 2018):

    Ω(θ) = α/2 · ‖θ − θ⁰‖² (every trainable backbone variable, θ⁰ = the pretrained values)
         + β/2 · ‖W‖²     (classifier weights; the bias is not regularised),

β = 0.01, α ∈ {0.001, 0.01, 0.1, 1}, lr ∈ {0.005, 0.01, 0.02}, as the paper (following L2SP). The pair
(α, lr) is selected by validation accuracy (the dataset's validation split, else a held-out fraction of
train, as the linear protocol), then ``trials`` runs with different seeds are trained on train+val and
scored on test: mean accuracy with a 95% Student-t interval, as the paper's "averaged over 5 trials with
95% confidence intervals".

How the SavedModel is trained: our exports carry ``train_features`` (the backbone with batch norm in
training mode: batch statistics, moving averages updated, as the paper's PyTorch fine-tuning) and the
variable lists ``trainable_weights`` / ``non_trainable_weights`` — a backbone restored without Keras has
none of its own. A private copy is loaded under the strategy's scope and reset to θ⁰ (weights and BN
statistics) before every run. Other SavedModels are trained through ``serving_default``, whose concrete
function lists the variables it captures; their BN statistics stay frozen.

Optimisation: SGD with momentum 0.9, batch ``batch_size``, ``steps`` steps with cosine learning-rate
decay, random horizontal flips of the centre-cropped images, classifier initialised to zero (``head_init
= "zeros"``) or to a linear probe fitted on the frozen features (``"probe"``). The paper gives the grid
but not the schedule or the number of steps; ours are choices of this implementation.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.estimators import logreg
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.intervals import t_ci95
from augself_tf.progress import Progress


class FinetuneSettings(Protocol):
    """What fine-tuning reads of its options: the ``finetune`` protocol's ``FinetuneOptions`` dataclass
    (:mod:`augself_tf.evaluation.protocols.finetune`, eval_main's ``--finetune_*`` flags) declares them."""

    alphas: tuple[float, ...]
    lrs: tuple[float, ...]
    beta: float
    steps: int
    batch_size: int
    trials: int
    momentum: float
    head_init: str
    flip: bool


def l2sp_penalty(
    backbone_vars: Sequence[tf.Variable],
    initial: Sequence[tf.Tensor],
    classifier_kernel: tf.Tensor,
    alpha: float,
    beta: float,
) -> tf.Tensor:
    """Ω = α/2·Σ‖θ − θ⁰‖² over the backbone variables + β/2·‖W‖² of the classifier weights."""
    sp = tf.add_n([tf.reduce_sum(tf.square(v - v0)) for v, v0 in zip(backbone_vars, initial, strict=True)])
    return 0.5 * alpha * sp + 0.5 * beta * tf.reduce_sum(tf.square(classifier_kernel))


class _CosineFromVariable(tf.keras.optimizers.schedules.LearningRateSchedule):
    """lr·½(1 + cos(π·t/T)) with lr a variable: one traced step serves every (α, lr) run."""

    def __init__(self, base: tf.Variable, total_steps: int):
        self.base, self.total_steps = base, total_steps

    def __call__(self, step):
        t = tf.minimum(tf.cast(step, tf.float32), float(self.total_steps)) / float(self.total_steps)
        return self.base * 0.5 * (1.0 + tf.cos(math.pi * t))


class Finetuner:
    """Fine-tunes one SavedModel backbone with a linear classifier; reusable across (α, lr, seed) runs.

    The SavedModel is loaded (a private copy) under ``strategy``'s scope, so its variables are mirrored
    and every step runs on all replicas with all-reduced gradients, as pretraining does. Exports made by
    this project carry ``train_features`` (batch norm in training mode, moving statistics updated — as in
    the paper's PyTorch fine-tuning); other SavedModels are fine-tuned through ``serving_default`` with
    batch-norm statistics frozen (:attr:`batch_norm` says which).

    Args:
      path: SavedModel directory.
      num_classes: classifier outputs.
      options: :class:`FinetuneSettings`.
      input_name, output_key: the serving signature's image input and feature output.
      strategy: a ``tf.distribute`` strategy (default: the current one, i.e. one device).
    """

    def __init__(self, path: str, num_classes: int, options: FinetuneSettings, input_name: str = "images",
                 output_key: str = "features", strategy: tf.distribute.Strategy | None = None):
        self.options = options
        self.num_classes = num_classes
        self.strategy = strategy or tf.distribute.get_strategy()
        self.input_name, self.output_key = input_name, output_key
        with self.strategy.scope():
            self.module = tf.saved_model.load(path)
        serve = self.module.signatures["serving_default"]
        if hasattr(self.module, "train_features") and hasattr(self.module, "trainable_weights"):
            self.batch_norm = "training mode: batch statistics, moving averages updated"
            self.backbone_vars = list(self.module.trainable_weights)
            self.state_vars = list(self.module.non_trainable_weights)
            self._train_fn = self.module.train_features
        else:
            self.batch_norm = "frozen: pretrained moving statistics (SavedModel has no train_features)"
            self.backbone_vars = list(serve.trainable_variables)
            self.state_vars = []
            self._train_fn = self._serve
        self._serve_fn = serve
        if not self.backbone_vars:
            raise EvalError(f"SavedModel {path} has no trainable variables: nothing to fine-tune")
        self.initial = [tf.constant(v.numpy()) for v in self.backbone_vars]
        self.initial_state = [tf.constant(v.numpy()) for v in self.state_vars]
        # Zero-padded batches of `_eval_batch` images: an empty replica batch breaks oneDNN batch norm.
        n_rep = self.strategy.num_replicas_in_sync
        self._eval_batch = -(-max(256, n_rep) // n_rep) * n_rep
        self._serve_on_replicas = tf.function(lambda x: self.strategy.run(self._serve, (x,)))
        self.dim = int(self.features(np.zeros((1, 32, 32, 3), np.float32)).shape[1])
        with self.strategy.scope():
            self.kernel = tf.Variable(tf.zeros([self.dim, num_classes]), name="classifier_kernel")
            self.bias = tf.Variable(tf.zeros([num_classes]), name="classifier_bias")
            self.alpha = tf.Variable(0.0, trainable=False, name="l2sp_alpha")
            self.base_lr = tf.Variable(0.0, trainable=False, name="base_lr")
            self.optimizer = tf.keras.optimizers.SGD(_CosineFromVariable(self.base_lr, options.steps),
                                                     momentum=options.momentum)
            self.variables = self.backbone_vars + [self.kernel, self.bias]
            self.optimizer.build(self.variables)
        self._steps: dict[int, Callable] = {}  # traced training step per global batch size

    def _serve(self, images: tf.Tensor) -> tf.Tensor:
        return tf.cast(self._serve_fn(**{self.input_name: images})[self.output_key], tf.float32)

    def features(self, images: np.ndarray) -> np.ndarray:
        """Backbone features (current weights, BN in inference mode) of float images in [0, 1], computed
        on all replicas."""
        bs, n = self._eval_batch, len(images)
        padded = np.concatenate([images, np.zeros((-n % bs, *images.shape[1:]), images.dtype)]).astype(np.float32)
        outs = []
        for x in self.strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(padded).batch(bs)):
            parts = self.strategy.experimental_local_results(self._serve_on_replicas(x))
            outs.extend(t.numpy() for t in parts)
        return np.concatenate(outs)[:n]

    def reset(self) -> None:
        """Backbone (weights and BN statistics) back to the pretrained values θ⁰."""
        for v, v0 in zip(self.backbone_vars + self.state_vars, self.initial + self.initial_state, strict=True):
            v.assign(v0)

    def penalty(self, kernel: tf.Tensor, alpha: float) -> tf.Tensor:
        """The L2SP term for the current backbone and classifier ``kernel``."""
        return l2sp_penalty(self.backbone_vars, self.initial, kernel, alpha, self.options.beta)

    def _make_step(self, global_batch: int) -> Callable:
        o = self.options
        n_rep = self.strategy.num_replicas_in_sync

        def replica_step(x: tf.Tensor, y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
            if o.flip:
                ctx = tf.distribute.get_replica_context()
                replica = tf.cast(ctx.replica_id_in_sync_group, tf.int64)
                coin = tf.random.stateless_uniform([tf.shape(x)[0], 1, 1, 1], seed=seed + replica)
                x = tf.where(coin < 0.5, tf.reverse(x, axis=[2]), x)
            with tf.GradientTape() as tape:
                logits = self._train_fn(x) @ self.kernel + self.bias
                ce = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
                # Gradients are summed over replicas: the global-batch mean, and Ω once.
                loss = tf.reduce_sum(ce) / float(global_batch) + self.penalty(self.kernel, self.alpha) / n_rep
            grads = tape.gradient(loss, self.variables)
            self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))
            return loss

        @tf.function
        def step(x, y, seed):
            return self.strategy.reduce("SUM", self.strategy.run(replica_step, (x, y, seed)), axis=None)

        return step

    def fit(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        *,
        alpha: float,
        lr: float,
        seed: int,
        head: tuple[np.ndarray, np.ndarray] | None = None,
        on_step: Callable[[float], None] | None = None,
    ) -> tuple[tf.Variable, tf.Variable]:
        """Fine-tune from θ⁰ on (images float32 [n, S, S, 3], class indices [n]); returns (W, b).

        ``head``: initial (W [d, k], b [k]); None = zeros. ``on_step(loss)`` is called after every step
        (a progress bar). The global batch is ``batch_size`` (at most n),
        rounded down to a multiple of the replica count.
        """
        o = self.options
        n_rep = self.strategy.num_replicas_in_sync
        n = len(labels)
        global_batch = max(n_rep, (min(o.batch_size, n) // n_rep) * n_rep)
        self.reset()
        self.kernel.assign(np.zeros((self.dim, self.num_classes), np.float32) if head is None else head[0])
        self.bias.assign(np.zeros(self.num_classes, np.float32) if head is None else head[1])
        self.alpha.assign(alpha)
        self.base_lr.assign(lr)
        for v in self.optimizer.variables:  # fresh momentum and step count
            v.assign(tf.zeros_like(v))
        if global_batch not in self._steps:
            self._steps[global_batch] = self._make_step(global_batch)
        step = self._steps[global_batch]
        ds = (tf.data.Dataset.from_tensor_slices((images.astype(np.float32), labels.astype(np.int32)))
              .shuffle(n, seed=seed, reshuffle_each_iteration=True).repeat()
              .batch(global_batch, drop_remainder=True).take(o.steps))
        for t, (x, y) in enumerate(self.strategy.experimental_distribute_dataset(ds)):
            loss = float(step(x, y, tf.constant([seed, 1000 * t], tf.int64)))
            if not math.isfinite(loss):
                raise EvalError(f"fine-tuning diverged (loss {loss}) at step {t} with alpha={alpha}, lr={lr}")
            if on_step is not None:
                on_step(loss)
        return self.kernel, self.bias

    def accuracy(self, images: np.ndarray, labels: np.ndarray, kernel, bias) -> float:
        """Top-1 accuracy of the current backbone + (kernel, bias) on class indices ``labels``."""
        if not len(labels):
            return float("nan")
        w, b = (v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in (kernel, bias))
        preds = np.argmax(self.features(images) @ w + b, axis=1)
        return float(np.mean(preds == labels))


@dataclasses.dataclass
class FinetuneResult:
    """Outcome of :func:`finetune_eval`.

    Attributes:
      mean, ci95: test accuracy (fraction) over trials and its 95% t-interval half-width.
      trials: per-trial test accuracies.
      best_alpha, best_lr: selected on validation.
      grid: [[alpha, lr, val_accuracy], ...].
      seconds: wall time.
      batch_norm: how batch norm ran (:attr:`Finetuner.batch_norm`).
      replicas: replicas of the strategy.
    """

    mean: float
    ci95: float
    trials: list[float]
    best_alpha: float
    best_lr: float
    grid: list[list[float]]
    seconds: float
    batch_norm: str = ""
    replicas: int = 1


def _probe_head(ft: Finetuner, images: np.ndarray, labels: np.ndarray, num_classes: int):
    feats = ft.features(images)
    m = logreg.fit_logreg(feats, labels, 1e-3, classes=np.arange(num_classes), max_iter=500)
    return m.coef.astype(np.float32), m.intercept.astype(np.float32)


def total_steps(options: FinetuneSettings) -> int:
    """SGD steps of :func:`finetune_eval`: every (α, lr) of the grid (none for a 1×1 grid), then the trials."""
    grid = len(options.alphas) * len(options.lrs)
    return options.steps * ((grid if grid > 1 else 0) + options.trials)


def finetune_eval(
    path: str,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    options: FinetuneSettings,
    *,
    seed: int = 0,
    input_name: str = "images",
    output_key: str = "features",
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> FinetuneResult:
    """Grid search (α, lr) on val, then ``trials`` seeds on train+val scored on test (module docstring).

    Each split is (images float32 [n, S, S, 3] in [0, 1], labels int [n]); labels are mapped to class
    indices over the train+val labels (a test label never seen counts as an error). ``progress`` counts
    the steps of every run (its total: :func:`total_steps`).
    """
    o = options
    start = time.perf_counter()
    classes = np.unique(np.concatenate([train[1], val[1]]))
    if len(classes) < 2:
        raise EvalError("fine-tuning needs at least 2 classes in train+val")

    def idx(y: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(classes, y).clip(0, len(classes) - 1)
        return np.where(classes[pos] == y, pos, -1)

    ft = Finetuner(path, len(classes), o, input_name, output_key, strategy=strategy)

    def on_step(loss: float) -> None:
        if progress is not None:
            progress.advance(1, {"loss": loss})
    xtr, ytr = train[0], idx(train[1])
    xva, yva = val[0], idx(val[1])
    x_all, y_all = np.concatenate([xtr, xva]), np.concatenate([ytr, yva])
    head_tr = _probe_head(ft, xtr, ytr, len(classes)) if o.head_init == "probe" else None
    head_all = _probe_head(ft, x_all, y_all, len(classes)) if o.head_init == "probe" else None
    grid = []
    for alpha in o.alphas:
        for lr in o.lrs:
            if len(o.alphas) * len(o.lrs) == 1:
                grid.append([alpha, lr, float("nan")])
                break
            w, b = ft.fit(xtr, ytr, alpha=alpha, lr=lr, seed=seed, head=head_tr, on_step=on_step)
            acc = ft.accuracy(xva, yva, w, b)
            grid.append([alpha, lr, acc])
            if log:
                log(f"  finetune alpha={alpha:g} lr={lr:g}: val {100 * acc:.2f}")
    best = max(grid, key=lambda g: (g[2] if math.isfinite(g[2]) else -1.0))
    accs = []
    for t in range(o.trials):
        w, b = ft.fit(x_all, y_all, alpha=best[0], lr=best[1], seed=seed + 1 + t, head=head_all, on_step=on_step)
        accs.append(ft.accuracy(test[0], idx(test[1]), w, b))
        if log:
            log(f"  finetune trial {t}: test {100 * accs[-1]:.2f}")
    ft.reset()
    return FinetuneResult(
        mean=float(np.mean(accs)), ci95=t_ci95(accs), trials=accs, best_alpha=best[0], best_lr=best[1],
        grid=grid, seconds=time.perf_counter() - start, batch_norm=ft.batch_norm,
        replicas=ft.strategy.num_replicas_in_sync,
    )
