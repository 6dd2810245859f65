"""``robustness``: a linear probe's accuracy under FGSM and weather corruptions (paper appendix, Table 11).

The head is the linear protocol's probe on clean features (sweep on validation, refit on train+val);
the perturbations and their maths are in :mod:`augself_tf.evaluation.perturbed_accuracy`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from augself_tf.evaluation import corruptions
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.perturbed_accuracy import robustness_eval
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class RobustnessOptions:
    """Which perturbations (eval_main's ``--robustness_*`` flags)."""

    eps: tuple[float, ...] = option((1.0, 2.0, 4.0), "FGSM step sizes in units of 1/255.")
    corruptions: tuple[str, ...] = option(("fog", "frost", "snow"), "Weather corruptions to apply.")
    severities: tuple[int, ...] = option((1, 2, 3, 4, 5), "Corruption severities averaged (1..5).")

    def __post_init__(self) -> None:
        for name in self.corruptions:
            if name not in corruptions.CORRUPTIONS:
                raise EvalError(f"unknown corruption {name!r}: use {', '.join(corruptions.CORRUPTIONS)}")
        if any(not 1 <= s <= 5 for s in self.severities):
            raise EvalError(f"corruption severities must be in 1..5, got {self.severities}")


def run(context: EvalContext, model: LoadedModel, dataset: str, options: RobustnessOptions) -> Records:
    """Records ``robustness_clean``, ``robustness_fgsm_eps{k}`` and ``robustness_{corruption}``."""
    s, o = context.settings, options
    start = time.perf_counter()
    (split,) = context.train_val_test(model, dataset)
    train, val = split.train, split.val
    key = s.label_key
    head = context.linear_probe((train.features, train.labels(key)), (val.features, val.labels(key))).model
    plan = context.splits(dataset)
    ds = context.extractor.examples(dataset, plan.test).batch(s.batch_size)
    if key not in ds.element_spec:
        raise EvalError(f"robustness: test examples of {dataset!r} have no {key!r} label")
    batches = ((b["image"], b[key].numpy()) for b in ds)
    res = robustness_eval(model, head.coef, head.intercept, head.classes, batches, eps=o.eps,
                          corruption_names=o.corruptions, severities=o.severities, seed=s.seed)
    fgsm_txt = ", ".join(f"{e:g}:{100 * a:.2f}" for e, a in res.fgsm.items())
    corr_txt = ", ".join(f"{k}:{100 * np.mean(list(v.values())):.2f}" for k, v in res.corrupted.items())
    context.log(f"  clean {100 * res.clean:.2f}  fgsm(eps/255:acc) {fgsm_txt}  {corr_txt}")
    settings = {
        **context.base_settings(), "label_key": key,
        "validation": split.validation, "head": "linear probe (linear protocol's sweep, refit on train+val)",
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


PROTOCOL = Protocol(RobustnessOptions, run, in_all=False, summary="linear probe under FGSM and weather (Table 11)")
