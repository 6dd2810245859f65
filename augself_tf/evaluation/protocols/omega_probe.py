"""``omega_probe``: what frozen features keep of each augmentation — ω_diff predicted from a pair of views.

Every image of the train and test splits is seen as two views drawn by the training pipeline's own
augmentations (:func:`augself_tf.augment.augment_view`, stateless: view v of image i uses the seed
(seed, 2i + v), so reruns and every model see the same pairs). Each view's ω rides along with its pixels;
the AugSelf targets ω_diff(1, 2) come from :func:`augself_tf.augment.omega_diff`. A kernel ridge probe
(:mod:`augself_tf.evaluation.estimators.omega_regression`) reads [f(v1), f(v2)], is fitted on train pairs (its width
and ridge chosen on held-out train images) and scored on test pairs: R² for the regressed augmentations
(crop, colour, blur, solarize), accuracy for the classified ones (flip, rotation).

The pipeline: ``AugmentConfig(image_size)`` with every predictable step switched on at the probability it
has when AugSelf predicts it (rotation and solarization 0.5, otherwise the defaults), so every target varies.
One picture per run and dataset: augmentations × models (R², or accuracy rescaled to (acc − chance) /
(1 − chance) so the two share a 0..1 scale).
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from augself_tf.data.catalog import spec_key
from augself_tf.evaluation import plots
from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators import omega_regression
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option

COMPONENTS: dict[str, tuple[str, ...]] = {
    "crop": ("cy", "cx", "h", "w"), "color": ("brightness", "contrast", "saturation", "hue"),
    "blur": ("sigma",), "solarize": ("delta",),
}
PREFIX = "omega_"


def _predictable() -> tuple[str, ...]:
    from augself_tf.augment import AUGMENTATIONS

    return tuple(AUGMENTATIONS)


@dataclasses.dataclass
class OmegaProbeOptions:
    """Which augmentations, how many train pairs, the hold-out (eval_main's ``--omega_probe_*``)."""

    augmentations: tuple[str, ...] = option(
        ("crop", "color", "blur", "solarize", "rotation", "flip"),
        "Augmentations whose ω_diff the probe predicts from a pair of views.")
    max_train_pairs: int = option(2000, "Train pairs the kernel probe fits at most (fixed-seed subset; its cost "
                                         "grows as n^3).")
    val_fraction: float = option(0.2, "Fraction of train images held out to choose the probe's width and ridge.")

    def __post_init__(self) -> None:
        known = _predictable()
        for name in self.augmentations:
            if name not in known:
                raise EvalError(f"--omega_probe_augmentations: unknown augmentation {name!r}: use {', '.join(known)}")
        if not self.augmentations:
            raise EvalError("--omega_probe_augmentations is empty")
        if self.max_train_pairs < 10:
            raise EvalError(f"--omega_probe_max_train_pairs must be at least 10, got {self.max_train_pairs}")
        if not 0.0 < self.val_fraction < 1.0:
            raise EvalError(f"--omega_probe_val_fraction must be in (0, 1), got {self.val_fraction}")


def augment_config(image_size: int):
    """The training pipeline at the eval size, every predictable step on at its when-predicted probability."""
    from augself_tf.augment import AugmentConfig, registry

    on = {s.probability.field: s.probability.resolve(None, True) for s in registry.PIPELINE
          if s.probability is not None and s.name in registry.AUGMENTATIONS}
    return AugmentConfig(image_size=image_size, probabilities=on)


#: One traced pair view per (augment config, seed), shared by both views and every split: tf.data traces a map's
#: function once per dataset, and augment_view's graph (the whole training pipeline) made 4 traces a run.
_PAIR_VIEWS: dict[tuple[str, int], tf.types.experimental.GenericFunction] = {}


def _pair_view_function(config, seed: int):
    """``fn(image, index, view)`` as one tf.function; tf.data's maps call its concrete function."""
    from augself_tf.augment import augment_view

    key = (repr(config), seed)
    if key not in _PAIR_VIEWS:
        # augment_view is graph-safe as written: no autograph conversion (faster tracing).
        @tf.function(autograph=False, reduce_retracing=True)
        def fn(image: tf.Tensor, index: tf.Tensor, view: tf.Tensor):
            s = tf.stack([tf.constant(seed, tf.int64), index * 2 + view])
            pixels, omega = augment_view(image, s, config)
            return pixels, {PREFIX + k: v for k, v in omega.items()}

        _PAIR_VIEWS[key] = fn
    return _PAIR_VIEWS[key]


def make_pair_view(config, seed: int, view: int):
    """``view(image, index) -> (pixels, {omega_<name>: ω})``: view ``view`` ∈ {0, 1} of image ``index``."""
    fn = _pair_view_function(config, seed)

    @tf.autograph.experimental.do_not_convert
    def call(image: tf.Tensor, index: tf.Tensor):
        return fn(image, tf.cast(index, tf.int64), tf.constant(view, tf.int64))

    return call


def pair_targets(fields1: dict, fields2: dict, names: tuple[str, ...]) -> dict[str, omega_regression.Target]:
    """The probe's targets from the two views' ω fields (:func:`augself_tf.augment.omega_diff`)."""
    from augself_tf.augment import AUGMENTATIONS, omega_diff, steps

    def omega(fields: dict) -> dict:
        return {k[len(PREFIX):]: tf.constant(v) for k, v in fields.items() if k.startswith(PREFIX)}

    diffs = omega_diff(omega(fields1), omega(fields2))
    out = {}
    for name in names:
        value = np.asarray(diffs[name])
        if AUGMENTATIONS[name].loss is steps.tanh_mse:  # a regressed ω_diff
            value = value.reshape(len(value), -1)
            parts = COMPONENTS.get(name) or tuple(f"{name}[{i}]" for i in range(value.shape[1]))
            out[name] = omega_regression.Target(omega_regression.REGRESSION, value, parts)
        else:  # a classified one: flip (same or not), rotation ((k1 - k2) mod 4)
            labels = np.rint(value.reshape(len(value))).astype(int)
            out[name] = omega_regression.Target(omega_regression.CLASSES, labels)
    return out


def _pairs(context: EvalContext, model: LoadedModel, dataset: str, split: str, names: tuple[str, ...]):
    s = context.settings
    config = augment_config(s.image_size)
    views = [
        context.features(model, dataset, split, view=make_pair_view(config, s.seed, v),
                         view_name=f"omega_pair{v}s{s.seed}")
        for v in (0, 1)
    ]
    if not np.array_equal(views[0].fields["index"], views[1].fields["index"]):
        raise EvalError("omega_probe: the two views of the pairs are not aligned")
    x = np.concatenate([views[0].features, views[1].features], axis=1)
    return x, pair_targets(views[0].fields, views[1].fields, names), views[0].fields["index"]


def _heatmap(context: EvalContext, dataset: str) -> str:
    """Redraws the run's augmentations × models picture of ``dataset`` from every model probed so far."""
    scores: dict[str, dict[str, dict]] = context.shared.setdefault("omega_probe", {}).get(dataset, {})
    models = list(scores)
    augs = list(dict.fromkeys(a for m in models for a in scores[m]))
    values = np.full((len(augs), len(models)), np.nan)
    labels = np.full((len(augs), len(models)), "", dtype=object)
    for j, m in enumerate(models):
        for i, a in enumerate(augs):
            sc = scores[m].get(a)
            if sc is None:
                continue
            if sc["kind"] == omega_regression.REGRESSION:
                values[i, j], labels[i, j] = sc["value"], f"R² {sc['value']:.2f}"
            else:
                chance = sc["chance"]
                values[i, j] = (sc["value"] - chance) / (1.0 - chance) if chance < 1 else np.nan
                labels[i, j] = f"{100 * sc['value']:.0f}% ({100 * chance:.0f})"
    path = os.path.join(context.settings.output_dir, f"omega_probe_{spec_key(dataset)}.png")
    return plots.draw_heatmap(
        values, augs, models, path, labels=labels,
        title=f"ω_diff from frozen view pairs, {spec_key(dataset)} test\nR², or accuracy (chance) coloured as "
              "(acc − chance) / (1 − chance)",
    )


def probe_pairs(context: EvalContext, model: LoadedModel, dataset: str, names: tuple[str, ...],
                max_train_pairs: int):
    """The probe's data: (train pairs, their targets, their source images, test pairs, their targets), the train
    pairs cut to a fixed-seed subset of ``max_train_pairs`` (also what reproduce/probe_vs_head.py reads)."""
    plan = context.splits(dataset)
    x_tr, t_tr, groups = _pairs(context, model, dataset, plan.train, names)
    x_te, t_te, _ = _pairs(context, model, dataset, plan.test, names)
    if len(x_tr) > max_train_pairs:
        keep = np.sort(np.random.default_rng(context.settings.seed).choice(len(x_tr), max_train_pairs, replace=False))
        x_tr, groups = x_tr[keep], groups[keep]
        t_tr = {k: dataclasses.replace(t, values=np.asarray(t.values)[keep]) for k, t in t_tr.items()}
    return x_tr, t_tr, groups, x_te, t_te


def run(context: EvalContext, model: LoadedModel, dataset: str, options: OmegaProbeOptions) -> Records:
    """One record per augmentation: pooled R² (per component in the settings) or accuracy."""
    s, o = context.settings, options
    start = time.perf_counter()
    x_tr, t_tr, groups, x_te, t_te = probe_pairs(context, model, dataset, tuple(o.augmentations), o.max_train_pairs)
    scores = omega_regression.probe_omega(x_tr, t_tr, groups, x_te, t_te, val_fraction=o.val_fraction, seed=s.seed)
    seconds = time.perf_counter() - start
    per_model = context.shared.setdefault("omega_probe", {}).setdefault(dataset, {})
    per_model[model.name] = {a: dataclasses.asdict(sc) for a, sc in scores.items()}
    figure = _heatmap(context, dataset)
    config = augment_config(s.image_size)
    common = {
        **context.base_settings(), "train_pairs": len(x_tr), "test_pairs": len(x_te), "figure": figure,
        "pairs": "two views per image, seeds (seed, 2*index + view), augment_view of the training pipeline",
        "augment_probabilities": dict(config.probabilities),
        "probe": "RBF kernel ridge on standardised [f1, f2]; width m/median sq. distance, m in "
                 f"{list(omega_regression.DEFAULT_GAMMAS)}, ridge in {list(omega_regression.DEFAULT_ALPHAS)}, "
                 f"chosen per augmentation on {o.val_fraction:g} of train images, refit on all train pairs",
    }
    records = []
    for name, sc in scores.items():
        regression = sc.kind == omega_regression.REGRESSION
        text = f"R² {sc.value:.3f}" if regression else \
            f"accuracy {100 * sc.value:.1f}% (chance {100 * sc.chance:.1f}%)"
        context.log(f"  omega_probe {name}: {text}")
        settings = {**common, "kind": sc.kind, "alpha": sc.alpha, "gamma_times_median": sc.gamma,
                    "held_out": sc.held_out}
        if regression:
            settings["components_R2"] = dict(zip(t_te[name].components, sc.components, strict=True))
        else:
            settings["chance_%"] = 100.0 * sc.chance
        records.append(make_record(
            model=model.name, protocol=f"omega_probe_{name}", dataset=dataset,
            metric="R2" if regression else "accuracy_%", value=sc.value if regression else 100.0 * sc.value,
            n_train=len(x_tr), n_test=len(x_te), settings=settings, seconds=seconds,
        ))
    return records


PROTOCOL = Protocol(OmegaProbeOptions, run, summary="ω_diff of each augmentation from frozen view pairs (R²/acc)")
