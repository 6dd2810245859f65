"""Runs each evaluation protocol for a model on a dataset and returns result records.

Protocols: ``linear``, ``fewshot``, ``localization``, ``rotation``, ``colorperm``, ``retrieval``,
``invariance`` (see the module of each). Features come from one :class:`FeatureExtractor`, so every
(model, dataset, split, size, transform) is extracted once per run, whichever protocols need it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from augself_tf.evaluation import fewshot, invariance, linear, localization, plots, retrieval
from augself_tf.evaluation.datasets import (
    DataAccess,
    dataset_key,
    fewshot_split,
    linear_splits,
    split_train_val,
)
from augself_tf.evaluation.errors import EvalError
from augself_tf.evaluation.features import (
    CHANNEL_PERMUTATIONS,
    FeatureExtractor,
    FeatureSet,
    LoadedModel,
    Log,
    log_stderr,
)
from augself_tf.evaluation.report import make_record

PROTOCOLS: tuple[str, ...] = ("linear", "fewshot", "localization", "rotation", "colorperm", "retrieval", "invariance")
# Analyses of the paper's appendix (docs/analyses.md): run when named, not part of 'all'.
ANALYSES: tuple[str, ...] = ("colorinfo", "robustness", "finetune")


@dataclasses.dataclass
class EvalConfig:
    """Every knob of the evaluation (eval_main's flags).

    Attributes:
      image_size: eval resolution S (shorter side resized to S, centre crop S×S).
      batch_size: images per model call.
      max_examples: at most this many examples per split (fixed-seed subset), None = all.
      seed: seed of subsets, validation hold-out, episodes, retrieval queries, augmentations.
      label_key: which integer label to classify (``label``, or e.g. ``color`` for shapes).
      linear_metric: ``auto`` (the paper's per dataset), ``top1`` or ``mean_per_class``.
      linear_backend, linear_regs, linear_gtol, linear_max_iter: logistic-regression solver settings.
      fewshot_*: N, the K values, Q, number of episodes, solver.
      retrieval_k, retrieval_queries: neighbours per query, pictured queries.
      invariance_views: augmented views per test image.
      output_dir: where pictures go.
      analysis_options: options of the colorinfo / robustness / finetune analyses by flag name (e.g.
        ``colorinfo_steps``); each module's ``*Options.from_dict`` reads its own.
      strategy: ``tf.distribute`` strategy of the protocols that train a network (finetune); None = one
        device. Feature extraction for the other protocols runs on one device.
    """

    image_size: int = 96
    batch_size: int = 128
    max_examples: int | None = None
    seed: int = 0
    label_key: str = "label"
    linear_metric: str = "auto"
    linear_backend: str = linear.DEFAULT_BACKEND
    linear_regs: int = 45
    linear_gtol: float = linear.DEFAULT_GTOL
    linear_max_iter: int = linear.MAX_ITER
    fewshot_ways: int = 5
    fewshot_shots: tuple[int, ...] = (1, 5)
    fewshot_queries: int = 16
    fewshot_episodes: int = 2000
    fewshot_solver: str = "newton"
    retrieval_k: int = 4
    retrieval_queries: int = 8
    invariance_views: int = 1
    output_dir: str = "."
    analysis_options: dict = dataclasses.field(default_factory=dict)
    strategy: Any = None

    def regs(self) -> np.ndarray:
        """The regularisation sweep: ``linear_regs`` log-spaced values in [1e-6, 1e5] (45 = the paper's)."""
        if self.linear_regs < 1:
            raise EvalError(f"--linear_regs must be positive, got {self.linear_regs}")
        return np.logspace(-6.0, 5.0, self.linear_regs) if self.linear_regs > 1 else np.array([1.0])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


class Evaluator:
    """Evaluates loaded models on datasets, protocol by protocol.

    Args:
      config: the knobs.
      access: data-layer access (default: ``augself_tf.data.sources``).
      log: progress sink.
    """

    def __init__(self, config: EvalConfig, access: DataAccess | None = None, log: Log | None = log_stderr):
        self.config = config
        self.access = access or DataAccess()
        self.log = log or (lambda _m: None)
        self.extractor = FeatureExtractor(
            self.access.load,
            image_size=config.image_size,
            batch_size=config.batch_size,
            max_examples=config.max_examples,
            seed=config.seed,
            log=self.log,
        )

    # -- helpers --

    def _base_settings(self) -> dict:
        c = self.config
        return {"image_size": c.image_size, "max_examples": c.max_examples, "seed": c.seed}

    def _figure_path(self, model: LoadedModel, protocol: str, dataset: str) -> str:
        name = f"{_slug(model.name)}_{protocol}_{_slug(dataset_key(dataset))}.png"
        return os.path.join(self.config.output_dir, name)

    def _train_val_test(
        self, model: LoadedModel, dataset: str, transforms: Sequence[str | None] = (None,)
    ) -> list[tuple[FeatureSet, FeatureSet, FeatureSet, str]]:
        """Features of train / val (own split or held out of train by image) / test, per image transform."""
        plan = linear_splits(self.access, dataset)
        trains = self.extractor.extract_many(model, dataset, plan.train, transforms)
        tests = self.extractor.extract_many(model, dataset, plan.test, transforms)
        if plan.val is not None:
            vals = self.extractor.extract_many(model, dataset, plan.val, transforms)
            return [(tr, va, te, f"split '{plan.val}'") for tr, va, te in zip(trains, vals, tests, strict=True)]
        # Hold out by source image index, so every transform of one image falls on the same side.
        ids = np.unique(trains[0].fields["index"])
        _, val_ids = split_train_val(len(ids), plan.val_fraction, self.config.seed)
        note = f"{plan.val_fraction:.4g} of train (seed {self.config.seed})"
        out = []
        for train, test in zip(trains, tests, strict=True):
            is_val = np.isin(train.fields["index"], ids[val_ids])
            out.append((train.subset(np.flatnonzero(~is_val)), train.subset(np.flatnonzero(is_val)), test, note))
        return out

    def _linear(self, xtr, ytr, xva, yva, xte, yte, metric: str) -> linear.SweepResult:
        c = self.config
        if len(np.unique(ytr)) < 2:
            raise EvalError("the training split has fewer than 2 classes: nothing to classify")
        return linear.linear_eval(
            xtr, ytr, xva, yva, xte, yte,
            metric=metric, regs=c.regs(), backend=c.linear_backend, max_iter=c.linear_max_iter,
            gtol=c.linear_gtol, log=self.log,
        )

    # -- protocols --

    def run(self, model: LoadedModel, protocol: str, dataset: str) -> list[dict]:
        """Records of one protocol on one dataset for one model."""
        if protocol not in PROTOCOLS + ANALYSES:
            raise EvalError(
                f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS + ANALYSES)} or all"
            )
        model.check_size(self.config.image_size)
        start = time.perf_counter()
        self.log(f"[eval] {model.name}: {protocol} on {dataset}")
        records = getattr(self, f"_run_{protocol}")(model, dataset)
        for r in records:
            if not r["seconds"]:
                r["seconds"] = round(time.perf_counter() - start, 3)
        return records

    def applicable(self, protocol: str, dataset: str) -> str | None:
        """Why ``protocol`` cannot run on ``dataset`` (None if it can) — used to skip in ``all`` mode."""
        if protocol == "localization" and not self._has_boxes(dataset):
            return f"dataset {dataset!r} has no boxes"
        return None

    def _has_boxes(self, dataset: str) -> bool:
        split = linear_splits(self.access, dataset).train
        try:
            spec = self.access.load(dataset, split).element_spec
        except EvalError:
            raise
        except Exception as e:  # noqa: BLE001
            raise EvalError(f"cannot load dataset {dataset!r}: {e}") from None
        return isinstance(spec, dict) and "bbox" in spec

    def _run_linear(self, model: LoadedModel, dataset: str) -> list[dict]:
        c = self.config
        ((train, val, test, val_src),) = self._train_val_test(model, dataset)
        key = c.label_key
        metric = linear.metric_for_dataset(dataset, c.linear_metric)
        res = self._linear(
            train.features, train.labels(key), val.features, val.labels(key), test.features, test.labels(key), metric
        )
        settings = {
            **self._base_settings(), "label_key": key, "validation": val_src, "n_val": len(val),
            "backend": c.linear_backend, "gtol": c.linear_gtol, "max_iter": c.linear_max_iter,
            "regulariser": "sum CE + reg*||W||^2 (sklearn C = 1/(2 reg)); features not standardised",
            **res.summary(),
        }
        return [make_record(
            model=model.name, protocol="linear", dataset=dataset, metric=f"{metric}_%",
            value=100.0 * res.test_score, n_train=len(train) + len(val), n_test=len(test),
            settings=settings, seconds=res.seconds,
        )]

    def _run_probe(self, model: LoadedModel, dataset: str, kind: str) -> list[dict]:
        c = self.config
        names = [f"rot{k}" for k in range(4)] if kind == "rotation" else [f"perm{i}" for i in range(6)]
        parts = self._train_val_test(model, dataset, names)
        sets = []
        for split in range(3):
            feats = np.concatenate([p[split].features for p in parts])
            labels = np.concatenate([np.full(len(p[split]), j) for j, p in enumerate(parts)])
            sets.append((feats, labels))
        (xtr, ytr), (xva, yva), (xte, yte) = sets
        res = self._linear(xtr, ytr, xva, yva, xte, yte, "top1")
        settings = {
            **self._base_settings(), "classes": names, "validation": parts[0][3], "backend": c.linear_backend,
            "views": "every image under every transform (balanced classes)", **res.summary(),
        }
        if kind == "colorperm":
            settings["permutations"] = [list(p) for p in CHANNEL_PERMUTATIONS]
        return [make_record(
            model=model.name, protocol=kind, dataset=dataset, metric="accuracy_%", value=100.0 * res.test_score,
            n_train=len(xtr) + len(xva), n_test=len(xte), settings=settings, seconds=res.seconds,
        )]

    def _run_rotation(self, model: LoadedModel, dataset: str) -> list[dict]:
        return self._run_probe(model, dataset, "rotation")

    def _run_colorperm(self, model: LoadedModel, dataset: str) -> list[dict]:
        return self._run_probe(model, dataset, "colorperm")

    def _run_fewshot(self, model: LoadedModel, dataset: str) -> list[dict]:
        c = self.config
        split = fewshot_split(self.access, dataset)
        pool = self.extractor.extract(model, dataset, split)
        labels = pool.labels(c.label_key)
        out = []
        for shots in c.fewshot_shots:
            res = fewshot.fewshot_eval(
                pool.features, labels, ways=c.fewshot_ways, shots=shots, queries=c.fewshot_queries,
                episodes=c.fewshot_episodes, seed=c.seed, solver=c.fewshot_solver,
            )
            self.log(f"  {c.fewshot_ways}-way {shots}-shot: {100 * res.mean:.2f} ± {100 * res.ci95:.2f} "
                     f"({res.seconds:.1f}s)")
            out.append(make_record(
                model=model.name, protocol=f"fewshot_{c.fewshot_ways}way_{shots}shot", dataset=dataset,
                metric="accuracy_%", value=100.0 * res.mean, ci95=100.0 * res.ci95, n_train=None,
                n_test=len(pool),
                settings={
                    **self._base_settings(), "pool_split": split, "label_key": c.label_key,
                    "ways": c.fewshot_ways, "shots": shots, "queries": c.fewshot_queries,
                    "episodes": c.fewshot_episodes, "solver": c.fewshot_solver,
                    "classifier": "multinomial logistic regression, C=1 (sklearn default objective)",
                    "classes_in_pool": int(len(np.unique(labels[labels >= 0]))),
                },
                seconds=res.seconds,
            ))
        return out

    def _run_localization(self, model: LoadedModel, dataset: str) -> list[dict]:
        if not self._has_boxes(dataset):
            raise EvalError(
                f"localization needs boxes, but dataset {dataset!r} has no 'bbox' (use caltech_birds2011, shapes, "
                "or a folder with boxes.csv)"
            )
        plan = linear_splits(self.access, dataset)
        train = self.extractor.extract(model, dataset, plan.train)
        test = self.extractor.extract(model, dataset, plan.test, keep_images=True)
        res = localization.localization_eval(
            train.features, train.fields["bbox"], test.features, test.fields["bbox"]
        )
        rng = np.random.default_rng(self.config.seed)
        shown = np.sort(rng.choice(len(res.test_rows), size=min(16, len(res.test_rows)), replace=False))
        path = plots.draw_boxes(
            test.images[res.test_rows[shown]], res.targets[shown], res.predictions[shown],
            self._figure_path(model, "localization", dataset),
            title=f"{model.name} on {dataset}: mse {res.mse:.5f}",
        )
        return [make_record(
            model=model.name, protocol="localization", dataset=dataset, metric="mse", value=res.mse,
            n_train=res.n_train, n_test=res.n_test, seconds=res.seconds,
            settings={
                **self._base_settings(), "target": "(x_topleft, y_topleft, width, height) fractions of the crop",
                "mse": res.mse, "mean_squared_l2": res.mean_sq_l2, "mean_l2": res.mean_l2,
                "mean_iou": res.mean_iou, "regressor": "sklearn LinearRegression", "figure": path,
            },
        )]

    def _run_retrieval(self, model: LoadedModel, dataset: str) -> list[dict]:
        c = self.config
        plan = linear_splits(self.access, dataset)
        test = self.extractor.extract(model, dataset, plan.test, keep_images=True)
        labels = test.labels(c.label_key)
        res = retrieval.retrieval_eval(
            test.features, labels, k=c.retrieval_k, num_queries=c.retrieval_queries, seed=c.seed
        )
        path = plots.draw_retrieval(
            test.images, res.shown_queries, res.shown_neighbours, labels,
            self._figure_path(model, "retrieval", dataset),
            title=f"{model.name} on {dataset}: top-{res.k} cosine neighbours",
            class_names=self._class_names(dataset, plan.test),
        )
        return [make_record(
            model=model.name, protocol="retrieval", dataset=dataset, metric=f"precision@{res.k}_%",
            value=100.0 * res.precision, n_test=res.n, seconds=res.seconds,
            settings={
                **self._base_settings(), "label_key": c.label_key, "k": res.k,
                "queries": "every test image (self excluded)", "shown_queries": res.shown_queries,
                "shown_precision_%": 100.0 * res.shown_precision, "figure": path,
            },
        )]

    def _class_names(self, dataset: str, split: str) -> list[str] | None:
        if self.config.label_key != "label":
            return None
        try:
            from augself_tf.data.sources import source_info

            return source_info(dataset, split, data_dir=self.access.data_dir).class_names
        except Exception:  # noqa: BLE001 - names are decoration only
            return None

    def _run_invariance(self, model: LoadedModel, dataset: str) -> list[dict]:
        c = self.config
        if c.invariance_views < 1:
            raise EvalError(f"--invariance_views must be positive, got {c.invariance_views}")
        plan = linear_splits(self.access, dataset)
        start = time.perf_counter()
        original = self.extractor.extract(model, dataset, plan.test)
        views = []
        for v in range(c.invariance_views):
            fn = invariance.make_view_fn(c.image_size, c.seed, v, c.invariance_views)
            fs = self.extractor.extract(
                model, dataset, plan.test, view=fn, view_name=f"aug{v}of{c.invariance_views}s{c.seed}"
            )
            if not np.array_equal(fs.fields["index"], original.fields["index"]):
                raise EvalError("invariance: augmented views are not aligned with the originals")
            views.append(fs.features)
        res = invariance.invariance_from_features(original.features, views)
        return [make_record(
            model=model.name, protocol="invariance", dataset=dataset, metric="cosine", value=res.mean,
            ci95=res.ci95, n_test=res.images, seconds=time.perf_counter() - start,
            settings={
                **self._base_settings(), "views_per_image": res.views, "samples": res.samples,
                "augmentation": f"AugmentConfig(image_size={c.image_size}) defaults",
                "space": "backbone f (the paper measures the projector g∘f)",
            },
        )]

    def _run_colorinfo(self, model: LoadedModel, dataset: str) -> list[dict]:
        from augself_tf.evaluation import color_info

        return color_info.run_protocol(self, model, dataset)

    def _run_robustness(self, model: LoadedModel, dataset: str) -> list[dict]:
        from augself_tf.evaluation import robustness

        return robustness.run_protocol(self, model, dataset)

    def _run_finetune(self, model: LoadedModel, dataset: str) -> list[dict]:
        from augself_tf.evaluation import finetune

        return finetune.run_protocol(self, model, dataset)
