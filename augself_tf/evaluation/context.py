"""What every evaluation protocol shares: settings, data access, cached features, the hold-out, a linear probe.

A protocol (``augself_tf/evaluation/protocols/``) receives one :class:`EvalContext` per run and asks it
for features (extracted once per run, whichever protocol asks first), for the train / validation / test
plan of a dataset, and for a linear probe fitted with the paper's regularisation sweep.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

from augself_tf.data.catalog import spec_key
from augself_tf.evaluation.datasets import DataAccess, LinearSplits, linear_splits, split_train_val
from augself_tf.evaluation.estimators import logreg
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.extraction import FeatureExtractor, FeatureSet
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.transforms import ImageTransform
from augself_tf.flag_fields import option
from augself_tf.progress import Progress

Log = Callable[[str], None]


def log_stderr(message: str) -> None:
    """Default progress sink: one line on stderr."""
    print(message, file=sys.stderr, flush=True)


@dataclasses.dataclass
class ProbeOptions:
    """The linear probe's solver (eval_main's ``--linear_*`` solver flags), shared by every protocol that
    fits one (linear, rotation, colorperm, robustness)."""

    backend: str = option(
        logreg.DEFAULT_BACKEND,
        "Logistic-regression solver: auto = TF matmuls for large problems, numpy for small (bench/bench_linear.py).",
        choices=logreg.BACKENDS,
    )
    regs: int = option(45, "Regularisation values swept in [1e-6, 1e5] (paper: 45).")
    gtol: float = option(logreg.DEFAULT_GTOL, "L-BFGS gradient tolerance on the mean-scaled objective.")
    max_iter: int = option(logreg.MAX_ITER, "L-BFGS iterations per fit at most (paper: 5000).")

    def grid(self) -> np.ndarray:
        """The regularisation sweep: ``regs`` log-spaced values in [1e-6, 1e5] (45 = the paper's)."""
        if self.regs < 1:
            raise EvalError(f"--linear_regs must be positive, got {self.regs}")
        return np.logspace(-6.0, 5.0, self.regs) if self.regs > 1 else np.array([1.0])


@dataclasses.dataclass
class EvalSettings:
    """Settings every protocol shares; its `option` fields are eval_main's flags of the same names.

    Attributes:
      image_size: eval resolution S (shorter side resized to S, centre crop S×S).
      batch_size: images per model call.
      max_examples: at most this many examples per split (fixed-seed subset), None = all.
      seed: seed of subsets, validation hold-out, episodes, retrieval queries, augmentations.
      label_key: which integer label to classify (``label``, or e.g. ``color`` for shapes).
      output_dir: where pictures go.
      probe: the linear probe's solver settings.
      strategy: ``tf.distribute`` strategy of the protocols that train a network (finetune); None = one
        device. Feature extraction runs on one device.
      verbose: log every value of a regularisation sweep, not one line per sweep.
    """

    image_size: int = option(96, "Eval resolution: shorter side resized to it, then a centre crop.", minimum=1)
    batch_size: int = option(128, "Images per model call.", minimum=1)
    max_examples: int | None = option(None, "Use at most this many examples per split (fixed-seed subset).")
    seed: int = option(0, "Seed of subsets, validation hold-out, episodes, queries and augmentations.")
    label_key: str = option("label", "Integer label to classify/probe (e.g. color for shapes).")
    output_dir: str = "."
    probe: ProbeOptions = dataclasses.field(default_factory=ProbeOptions)
    strategy: Any = None
    verbose: bool = option(False, "Progress lines for every value of a regularisation sweep, not one per sweep.")


@dataclasses.dataclass
class TrainValTest:
    """Train / validation / test features of one image transform, and where the validation came from."""

    train: FeatureSet
    val: FeatureSet
    test: FeatureSet
    validation: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


class EvalContext:
    """Shared services of one evaluation run.

    Args:
      settings: the shared settings.
      access: data-layer access (default: ``augself_tf.data.sources``).
      log: progress lines (None = quiet: no lines and no progress bars).
      progress_stream: where progress bars go (stderr, with the progress lines).
    """

    def __init__(
        self,
        settings: EvalSettings,
        access: DataAccess | None = None,
        log: Log | None = log_stderr,
        progress_stream: TextIO | None = None,
    ):
        self.settings = settings
        self.access = access or DataAccess()
        self.quiet = log is None
        self.log: Log = log or (lambda _m: None)
        # Results a protocol gathers across the models of one run (omega_probe's heat map of every model).
        self.shared: dict[str, Any] = {}
        self.progress_stream = None if self.quiet else (progress_stream or sys.stderr)
        self.extractor = FeatureExtractor(
            self.access.load,
            image_size=settings.image_size,
            batch_size=settings.batch_size,
            max_examples=settings.max_examples,
            seed=settings.seed,
            log=self.log,
            progress_stream=self.progress_stream,
        )

    # -- records --

    def base_settings(self) -> dict:
        """The settings every record carries."""
        s = self.settings
        return {"image_size": s.image_size, "max_examples": s.max_examples, "seed": s.seed}

    def figure_path(self, model: LoadedModel, protocol: str, dataset: str) -> str:
        """Where a protocol's picture of ``model`` on ``dataset`` goes."""
        name = f"{_slug(model.name)}_{protocol}_{_slug(spec_key(dataset))}.png"
        return os.path.join(self.settings.output_dir, name)

    def progress(self, total: int | None, label: str, unit: str = "step") -> Progress:
        """A progress bar on stderr (silent when quiet)."""
        return Progress(total, label, unit=unit, stream=self.progress_stream or sys.stderr,
                        enabled=not self.quiet)

    # -- data --

    def splits(self, dataset: str) -> LinearSplits:
        """The train / val / test plan of ``dataset`` (:func:`~augself_tf.evaluation.datasets.linear_splits`)."""
        return linear_splits(self.access, dataset)

    def has_boxes(self, dataset: str) -> bool:
        """Whether the dataset's examples carry a ``bbox``."""
        split = self.splits(dataset).train
        try:
            spec = self.access.load(dataset, split).element_spec
        except EvalError:
            raise
        except Exception as e:  # noqa: BLE001
            raise EvalError(f"cannot load dataset {dataset!r}: {e}") from None
        return isinstance(spec, dict) and "bbox" in spec

    def class_names(self, dataset: str, split: str) -> list[str] | None:
        """The dataset's class names when the probed label is the class label (figure captions only)."""
        if self.settings.label_key != "label":
            return None
        try:
            from augself_tf.data.sources import source_info

            return source_info(dataset, split, data_dir=self.access.data_dir).class_names
        except Exception:  # noqa: BLE001 - names are decoration only
            return None

    def validation_mask(self, plan: LinearSplits, index: np.ndarray) -> tuple[np.ndarray, str]:
        """Which train examples are held out for validation (dataset without a val split), and a note.

        The hold-out is by source image ``index``, so every transform or copy of one image falls on the
        same side.
        """
        ids = np.unique(index)
        _, val_ids = split_train_val(len(ids), plan.val_fraction, self.settings.seed)
        note = f"{plan.val_fraction:.4g} of train (seed {self.settings.seed})"
        return np.isin(index, ids[val_ids]), note

    # -- features --

    def features(self, model: LoadedModel, dataset: str, split: str, **kwargs: Any) -> FeatureSet:
        """Cached features of one split (see :meth:`FeatureExtractor.extract` for the keywords)."""
        return self.extractor.extract(model, dataset, split, **kwargs)

    def train_val_test(
        self, model: LoadedModel, dataset: str, transforms: Sequence[ImageTransform | None] = (None,)
    ) -> list[TrainValTest]:
        """Features of train / val (own split or held out of train) / test, one :class:`TrainValTest` per
        transform."""
        plan = self.splits(dataset)
        trains = self.extractor.extract_many(model, dataset, plan.train, transforms)
        tests = self.extractor.extract_many(model, dataset, plan.test, transforms)
        if plan.val is not None:
            vals = self.extractor.extract_many(model, dataset, plan.val, transforms)
            note = f"split '{plan.val}'"
            return [TrainValTest(tr, va, te, note) for tr, va, te in zip(trains, vals, tests, strict=True)]
        is_val, note = self.validation_mask(plan, trains[0].fields["index"])
        return [
            TrainValTest(train.subset(np.flatnonzero(~is_val)), train.subset(np.flatnonzero(is_val)), test, note)
            for train, test in zip(trains, tests, strict=True)
        ]

    # -- linear probe --

    def linear_probe(
        self,
        train: tuple[np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray],
        test: tuple[np.ndarray, np.ndarray] | None = None,
        metric: str = "top1",
    ) -> logreg.SweepResult:
        """Logistic regression on (features, labels): the regularisation sweep on val, refit on train+val.

        Logs one line per sweep (every swept value with ``settings.verbose``).
        """
        p = self.settings.probe
        if len(np.unique(train[1])) < 2:
            raise EvalError("the training split has fewer than 2 classes: nothing to classify")
        res = logreg.linear_eval(
            *train, *val, *(test or (None, None)),
            metric=metric, regs=p.grid(), backend=p.backend, max_iter=p.max_iter, gtol=p.gtol,
            log=self.log if self.settings.verbose else None,
        )
        best_val = max(res.val_scores)
        test_txt = "" if res.test_score is None else f", test {res.test_score:.4f}"
        self.log(f"  sweep: {len(res.regs)} regs in {res.seconds:.1f}s, best reg {res.best_reg:.3e} "
                 f"(val_{metric} {best_val:.4f}){test_txt}")
        return res
