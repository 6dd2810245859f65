"""Robustness under perturbations (paper appendix "Robustness under perturbations", Table 11).

Classifier: the frozen backbone f (the SavedModel) with a linear head fitted by the linear protocol
(:func:`augself_tf.evaluation.linear.linear_eval`: regulariser picked on validation, refit on
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
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from augself_tf.evaluation import corruptions
from augself_tf.evaluation.errors import EvalError


def _floats(v: str | list | tuple) -> tuple[float, ...]:
    items = v.split(",") if isinstance(v, str) else v
    return tuple(float(x) for x in items if str(x).strip())


@dataclasses.dataclass
class RobustnessOptions:
    """Knobs of the robustness protocol (eval_main's ``--robustness_*`` flags).

    Attributes:
      eps: FGSM step sizes in units of 1/255.
      corruptions: names from :data:`augself_tf.evaluation.corruptions.CORRUPTIONS`.
      severities: corruption severities (1..5) averaged.
    """

    eps: tuple[float, ...] = (1.0, 2.0, 4.0)
    corruptions: tuple[str, ...] = ("fog", "frost", "snow")
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)

    @classmethod
    def from_dict(cls, d: dict | None) -> RobustnessOptions:
        """Options from flag values ``robustness_eps`` etc. (comma strings or lists); others ignored."""
        d = {k.removeprefix("robustness_"): v for k, v in (d or {}).items() if v is not None}
        o = cls()
        if "eps" in d:
            o.eps = _floats(d["eps"])
        if "corruptions" in d:
            items = d["corruptions"].split(",") if isinstance(d["corruptions"], str) else d["corruptions"]
            o.corruptions = tuple(s.strip() for s in items if s.strip())
        if "severities" in d:
            o.severities = tuple(int(s) for s in _floats(d["severities"]))
        for name in o.corruptions:
            if name not in corruptions.CORRUPTIONS:
                raise EvalError(f"unknown corruption {name!r}: use {', '.join(corruptions.CORRUPTIONS)}")
        if any(not 1 <= s <= 5 for s in o.severities):
            raise EvalError(f"corruption severities must be in 1..5, got {o.severities}")
        return o


def differentiable_features(model) -> Callable[[tf.Tensor], tf.Tensor]:
    """``images -> features`` as a TF function of the input (gradients flow), from a ``LoadedModel``."""

    def fn(images: tf.Tensor) -> tf.Tensor:
        out = model._fn(**{model.input_name: tf.cast(images, model.input_dtype)})
        return tf.cast(out[model.output_key], tf.float32)

    return fn


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
    model,
    coef: np.ndarray,
    intercept: np.ndarray,
    classes: np.ndarray,
    batches,
    options: RobustnessOptions | None = None,
    *,
    seed: int = 0,
) -> RobustnessResult:
    """Accuracy of the head (coef, intercept, classes) on ``model`` features under each perturbation.

    Args:
      model: a :class:`~augself_tf.evaluation.features.LoadedModel`.
      coef, intercept, classes: the linear head (``LogRegModel`` fields).
      batches: iterable of (images float32 [B, S, S, 3] in [0, 1], labels int [B]).
      options: which ε, corruptions and severities.
      seed: corruption randomness (batch i uses seed·1000 + i + severity offset).
    """
    o = options or RobustnessOptions()
    start = time.perf_counter()
    fn = differentiable_features(model)
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
        for eps in o.eps:
            score(("fgsm", eps), fgsm(fn, coef, intercept, images, idx, eps / 255.0), labels)
        for name in o.corruptions:
            for sev in o.severities:
                bad = corruptions.CORRUPTIONS[name](images, sev, seed=seed * 1000 + 10 * i + sev)
                score((name, sev), bad, labels)
    if n == 0:
        raise EvalError("robustness: no test images")
    return RobustnessResult(
        clean=correct[("clean",)] / n,
        fgsm={eps: correct[("fgsm", eps)] / n for eps in o.eps},
        corrupted={name: {s: correct[(name, s)] / n for s in o.severities} for name in o.corruptions},
        n=n,
        seconds=time.perf_counter() - start,
    )


def run_protocol(evaluator, model, dataset: str) -> list[dict]:
    """The ``robustness`` protocol: linear probe on clean train(+val) features, then perturbed test accuracy.

    Args:
      evaluator: the :class:`~augself_tf.evaluation.protocols.Evaluator`.
      model: the :class:`~augself_tf.evaluation.features.LoadedModel`.
      dataset: dataset spec.
    """
    from augself_tf.evaluation.datasets import linear_splits
    from augself_tf.evaluation.report import make_record

    c = evaluator.config
    o = RobustnessOptions.from_dict(getattr(c, "analysis_options", None))
    start = time.perf_counter()
    ((train, val, _test, val_src),) = _train_val_test(evaluator, model, dataset)
    key = c.label_key
    head = evaluator._linear(
        train.features, train.labels(key), val.features, val.labels(key), None, None, "top1"
    ).model
    plan = linear_splits(evaluator.access, dataset)
    ds = evaluator.extractor.examples(dataset, plan.test).batch(c.batch_size)
    if key not in ds.element_spec:
        raise EvalError(f"robustness: test examples of {dataset!r} have no {key!r} label")
    batches = ((b["image"], b[key].numpy()) for b in ds)
    res = robustness_eval(model, head.coef, head.intercept, head.classes, batches, o, seed=c.seed)
    fgsm_txt = ", ".join(f"{e:g}:{100 * a:.2f}" for e, a in res.fgsm.items())
    corr_txt = ", ".join(f"{k}:{100 * np.mean(list(v.values())):.2f}" for k, v in res.corrupted.items())
    evaluator.log(f"  clean {100 * res.clean:.2f}  fgsm(eps/255:acc) {fgsm_txt}  {corr_txt}")
    settings = {
        "image_size": c.image_size, "max_examples": c.max_examples, "seed": c.seed, "label_key": key,
        "validation": val_src, "head": "linear probe (linear protocol's sweep, refit on train+val)",
        "best_reg": head.reg, "eps_units": "1/255 of the [0, 1] pixel range",
    }
    seconds = time.perf_counter() - start
    common = dict(model=model.name, dataset=dataset, metric="top1_%", n_train=len(train) + len(val), n_test=res.n,
                  seconds=seconds)
    records = [make_record(protocol="robustness_clean", value=100.0 * res.clean, settings=settings, **common)]
    for eps, acc in res.fgsm.items():
        records.append(make_record(
            protocol=f"robustness_fgsm_eps{eps:g}", value=100.0 * acc,
            settings={**settings, "attack": f"single-step FGSM, eps={eps:g}/255, CE of the linear head"}, **common,
        ))
    for name, per in res.corrupted.items():
        records.append(make_record(
            protocol=f"robustness_{name}", value=100.0 * float(np.mean(list(per.values()))),
            settings={**settings, "severities": list(per), "per_severity_%": [100.0 * a for a in per.values()],
                      "corruption": f"augself_tf.evaluation.corruptions.{name}"},
            **common,
        ))
    return records


def _train_val_test(evaluator, model, dataset: str):
    """The evaluator's train/val/test features (clean), tolerant of its older single-transform signature."""
    out = evaluator._train_val_test(model, dataset)
    return out if isinstance(out, list) else [out]
