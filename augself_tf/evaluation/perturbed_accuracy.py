"""Robustness under perturbations (paper appendix "Robustness under perturbations", Table 11).

Classifier: the frozen backbone f (the SavedModel) with a linear head fitted by the linear protocol
(:func:`augself_tf.evaluation.estimators.logreg.linear_eval`: regulariser picked on validation, refit on
train+val). The paper uses supervised ImageNet100 models with their own classifier; a linear probe on
any exported backbone is our stand-in and works for self-supervised backbones too.

* **FGSM** (Goodfellow et al., 2015), single step, on the test images x ∈ [0, 1] the model sees (centre
  crops): x_adv = clip(x + ε · sign(∇_x CE(W f(x) + b, y)), 0, 1), ε ∈ {1, 2, 4}/255 by default. The
  gradient flows through the SavedModel's ``serving_default`` function (``tf.GradientTape`` watching the
  input tensor) and the linear head. A test label the head has never seen (not in train+val) is attacked
  through the head's own prediction instead. With ε = 0, x_adv = x exactly, so the accuracy is the
  clean one.
* **Weather corruptions** fog, frost, snow (:mod:`augself_tf.evaluation.corruptions`, which documents how
  each follows Hendrycks & Dietterich and what is approximated — frost uses a procedural ice texture),
  applied to the centre-cropped test images; accuracy averaged over ``severities`` (default 1..5 as in
  ImageNet-C; the paper does not state its severities), per-severity values in the record's settings.

Records: ``robustness_clean``, ``robustness_fgsm_eps{k}`` (ε = k/255), ``robustness_{fog,frost,snow}``,
metric ``top1_%`` (the head's plain accuracy, whatever the dataset's linear metric).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

import numpy as np
import tensorflow as tf

from augself_tf.evaluation import corruptions
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel


def fgsm(
    features_fn: Callable[[tf.Tensor], tf.Tensor],
    coef: np.ndarray,
    intercept: np.ndarray,
    images: tf.Tensor,
    label_idx: np.ndarray,
    eps: float,
) -> tf.Tensor:
    """Single-step FGSM images clip(x + eps·sign(∇_x CE(f(x) W + b, y)), 0, 1); ``eps`` in [0, 1] units.

    ``label_idx``: class index per image (position in the head's classes); −1 = attack the prediction.
    """
    x = tf.convert_to_tensor(images, tf.float32)
    if eps == 0:
        return x
    w, b = tf.constant(coef, tf.float32), tf.constant(intercept, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        logits = features_fn(x) @ w + b
        y = np.where(label_idx >= 0, label_idx, np.argmax(logits.numpy(), axis=1)).astype(np.int32)
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grad = tape.gradient(loss, x)
    if grad is None:
        raise EvalError("FGSM: the model's serving function is not differentiable with respect to its input")
    return tf.clip_by_value(x + eps * tf.sign(grad), 0.0, 1.0)


@dataclasses.dataclass
class RobustnessResult:
    """Accuracies (fractions) of one head under each perturbation.

    Attributes:
      clean: accuracy on the unperturbed test images.
      fgsm: {eps (1/255 units): accuracy}.
      corrupted: {name: {severity: accuracy}}.
      n: test images.
      seconds: wall time.
    """

    clean: float
    fgsm: dict[float, float]
    corrupted: dict[str, dict[int, float]]
    n: int
    seconds: float


def robustness_eval(
    model: LoadedModel,
    coef: np.ndarray,
    intercept: np.ndarray,
    classes: np.ndarray,
    batches: Iterable[tuple[tf.Tensor, np.ndarray]],
    *,
    eps: tuple[float, ...],
    corruption_names: tuple[str, ...],
    severities: tuple[int, ...],
    seed: int = 0,
) -> RobustnessResult:
    """Accuracy of the head (coef, intercept, classes) on ``model`` features under each perturbation.

    Args:
      model: the SavedModel (gradients flow through :meth:`LoadedModel.features_tensor`).
      coef, intercept, classes: the linear head (``LogRegModel`` fields).
      batches: iterable of (images float32 [B, S, S, 3] in [0, 1], labels int [B]).
      eps: FGSM step sizes in units of 1/255.
      corruption_names: names from :data:`augself_tf.evaluation.corruptions.CORRUPTIONS`.
      severities: corruption severities (1..5) averaged.
      seed: corruption randomness (batch i uses seed·1000 + i + severity offset).
    """
    start = time.perf_counter()
    fn = model.features_tensor
    classes = np.asarray(classes)
    correct: dict[tuple, int] = {}
    n = 0

    def score(key: tuple, images: tf.Tensor, labels: np.ndarray) -> None:
        logits = fn(images).numpy() @ coef + intercept
        pred = classes[np.argmax(logits, axis=1)]
        correct[key] = correct.get(key, 0) + int(np.sum(pred == labels))

    for i, (images, labels) in enumerate(batches):
        labels = np.asarray(labels)
        pos = np.searchsorted(classes, labels).clip(0, len(classes) - 1)
        idx = np.where(classes[pos] == labels, pos, -1)
        images = tf.convert_to_tensor(images, tf.float32)
        n += len(labels)
        score(("clean",), images, labels)
        for e in eps:
            score(("fgsm", e), fgsm(fn, coef, intercept, images, idx, e / 255.0), labels)
        for name in corruption_names:
            for sev in severities:
                bad = corruptions.CORRUPTIONS[name](images, sev, seed=seed * 1000 + 10 * i + sev)
                score((name, sev), bad, labels)
    if n == 0:
        raise EvalError("robustness: no test images")
    return RobustnessResult(
        clean=correct[("clean",)] / n,
        fgsm={e: correct[("fgsm", e)] / n for e in eps},
        corrupted={name: {s: correct[(name, s)] / n for s in severities} for name in corruption_names},
        n=n,
        seconds=time.perf_counter() - start,
    )
