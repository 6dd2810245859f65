"""The settings of one pretraining run, each with its default and its help text written once.

The defaults are a small CPU run on the embedded ``shapes`` data (a few minutes on two cores); the paper's
settings live in the flagfiles under flags/. augself-train's flags are generated (`define_train_flags`): one
per `option` field (augself_tf/flag_fields.py) of `TrainConfig` and of its `ModelConfig` and `AugmentConfig`, one per
augmentation probability the registry declares, and one per method option name (`augself_tf.methods`) and
objective option name (`augself_tf.objectives`);
`config_from_flags` assembles the `TrainConfig` back from them. A field added here is a flag there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from augself_tf.augment import registry
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.pipeline import PHOTOMETRIC_MODES
from augself_tf.flag_fields import (
    define_flag,
    define_flags,
    flag_fields,
    flag_value,
    option,
    values_from_flags,
)
from augself_tf.methods import define_method_flags, method_options_from_flags
from augself_tf.methods.model_config import ModelConfig
from augself_tf.models.backbones import is_vit
from augself_tf.models.vit import default_patch_size
from augself_tf.objectives import define_objective_flags, objective_options_from_flags
from augself_tf.runtime.strategy import STRATEGIES
from augself_tf.training.knn import DEFAULT_K, DEFAULT_TEMPERATURE
from augself_tf.training.optim import OPTIMIZERS
from augself_tf.training.optimizer_parts import AUTO_EXCLUDE, WEIGHT_DECAY_EXCLUDE, decay_exclusion

#: --steps_per_execution's default: chosen per device when the strategy is known (`resolve_steps_per_execution`).
AUTO_STEPS = "auto"


def parse_steps_per_execution(value: int | str | None) -> int | str:
    """``--steps_per_execution`` as a run uses it: ``auto`` or a positive int; anything else one ValueError line."""
    if value is None or str(value).strip() == AUTO_STEPS:
        return AUTO_STEPS
    try:
        steps = int(str(value).strip())
    except ValueError:
        steps = 0
    if steps < 1 or isinstance(value, float | bool):
        raise ValueError(f"--steps_per_execution must be 'auto' or a positive integer (steps per call), got {value}")
    return steps


# What a run on the embedded data needs; the paper's 96 px (STL10) and 224 px (ImageNet100) are in flags/.
CPU_IMAGE_SIZE = 32
#: The largest --image_size a run accepts: 4.5x the paper's largest (224). Beyond it a batch of views does not
#: fit any accelerator's memory (--image_size=100000 ended in an out-of-memory traceback).
MAX_IMAGE_SIZE = 1024


@dataclasses.dataclass
class TrainConfig:
    """Everything one pretraining run needs (`config_from_flags` fills it from flags of the same names).

    Fields made with `option` are flags; ``model`` holds the settings that define the model (`ModelConfig`'s
    option fields are flags too, its ``method_options`` and ``objective_options`` those options' flags), ``augment`` the
    augmentation settings (`AugmentConfig`'s option fields and probabilities are flags too); ``verbose`` and
    ``on_step`` are for programs and tests.
    """

    dataset: str = option("shapes", "'shapes' (embedded), a tfds name (stl10, ...) or folder:PATH.")
    split: str = option("train", "Split(s) to pretrain on, e.g. 'train+unlabelled' for STL10 (tfds' spelling).")
    data_dir: str | None = option(None, "tensorflow-datasets data_dir.")
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    augment: AugmentConfig = dataclasses.field(default_factory=lambda: AugmentConfig(image_size=CPU_IMAGE_SIZE))
    batch_size: int = option(256, "GLOBAL batch size (split over replicas).", minimum=1)
    epochs: int = option(10, "Training epochs.", minimum=1)
    max_steps: int | None = option(None, "Stop after this many steps in total (smoke runs, benchmarks; 0 exports "
                                         "the initialised network: a never-trained floor).",
                                     minimum=0)
    lr: float = option(0.03, "Base learning rate, scaled by batch/256.", above=0)
    optimizer: str = option("sgd", "Optimizer with PyTorch's semantics: sgd (momentum 0.9, coupled L2: the paper's), "
                                   "adamw (torch's AdamW: MoCo v3's and DINO's ViT recipes) or lars (MoCo v3's).",
                            choices=OPTIMIZERS)
    weight_decay: float = option(5e-4, "Weight decay: coupled L2 with sgd (PyTorch SGD semantics), decoupled with "
                                       "adamw, LARS's (before its trust ratio) with lars.", minimum=0)
    weight_decay_end: float | None = option(None, "adamw/lars: the weight decay reached at the last step on a "
                                                  "per-step cosine from --weight_decay (DINO: 0.04 to 0.4); unset: "
                                                  "constant.", minimum=0)
    clip_grad: float = option(0.0, "Clip each variable's gradient to this norm, after the replicas' sum and before "
                                   "the decay (DINO's clip_gradients: 3.0, with any optimizer); 0: off.", minimum=0)
    weight_decay_exclude: str = option(AUTO_EXCLUDE, "Variables the weight decay (and LARS's trust ratio) skips: "
                                                     "'none' (every variable, as the paper's reference), '1d' "
                                                     "(biases and BN scales and offsets: every variable of at most "
                                                     "one dimension, as MoCo v3, DINO and solo-learn) or 'auto' (the "
                                                     "optimizer's own: 1d with lars, MoCo v3's; none with sgd and "
                                                     "adamw).", choices=(AUTO_EXCLUDE, *WEIGHT_DECAY_EXCLUDE))
    warmup_epochs: float = option(0.0, "Epochs of linear learning-rate warm-up from 0 before the cosine decay, set "
                                       "per step (0: the paper's plain cosine).", minimum=0)
    seed: int = option(0, "Seed of initialisation, shuffling and every augmentation.")
    model_dir: str | None = option(None, "Output directory (default runs/<method>[_augself_<augs>]).")
    strategy: str = option("auto", "tf.distribute strategy.", choices=STRATEGIES)
    tpu: str | None = option(None, "TPU of --strategy=tpu: a Cloud TPU name, grpc://HOST:8470, or 'local' on a TPU "
                                    "VM (default: $TPU_NAME, else this machine's own TPU).")
    cpu_replicas: int = option(1, "Split the CPU into N logical devices (runs the mirrored path without GPUs).",
                               minimum=1)
    mixed_precision: str | None = option(None, "Mixed-precision compute dtype.", choices=("float16", "bfloat16"))
    jit_compile: bool = option(False, "XLA-compile the training step.")
    steps_per_execution: int | str = option(
        AUTO_STEPS, "Training steps per tf.function call (Keras' name), a positive integer or 'auto': --log_every "
                    "on GPU or TPU replicas (their ms steps wait on the host's per-call cost), 1 on CPUs (where "
                    "it measured no gain). The host dispatches, and reduces and reads the logs, once per call. A "
                    "call stops short of the next log, checkpoint, monitor or epoch point, so every cadence stays "
                    "exact; the progress line and TrainConfig.on_step see call ends, and a stop signal is acted "
                    "on after the call under way (up to K - 1 steps later).",
        text=str)
    deterministic: bool = option(False, "Bit-identical reruns and resumes: op determinism, and on CPU one thread "
                                         "per op (several times slower; see docs/distributed.md).")
    photometric: str = option("auto", "Where the photometric augmentations run: 'host' in tf.data, 'device' "
                                       "batched in the training step (uint8 transport); auto = device when a GPU "
                                       "or TPU is visible.", choices=("auto", *PHOTOMETRIC_MODES))
    log_every: int = option(10, "TensorBoard scalars every N steps.", minimum=1)
    checkpoint_every: int = option(0, "Checkpoint every N steps (0: at the end of every epoch).", minimum=0)
    keep_checkpoints: int = option(3, "Checkpoints kept in model_dir/checkpoints.", minimum=1)
    shuffle_buffer: int = option(10_000, "Images in tf.data's shuffle buffer.", minimum=1)  # tfds only (pair_source)
    cache_source: bool | None = option(None, "Keep decoded images in memory (default: only for 'shapes').")
    export: bool = option(True, "Export the backbone as a SavedModel at the end.")
    precise_bn_images: int = option(0, "Also export saved_model_precise_bn/: the backbone with every BN layer's "
                                       "running mean and variance recomputed as the mean of its batch statistics "
                                       "over the first N images of the pretraining split under the evaluation "
                                       "transform (resize, centre crop), in batches of --batch_size; a comparison "
                                       "whose arms all read it has no objective's extra views in its statistics "
                                       "(0: off).", minimum=0)
    monitor: str = option("auto", "Online transfer monitors (docs/monitors.md): 'auto' (kNN on the class label, "
                                   "plus kNN on the colour label where the data has one, else the colour-"
                                   "permutation kNN), 'none', or a comma list of knn, knn:LABEL, colorperm.")
    monitor_every: int = option(2, "Run the monitors every N epochs (and before the first step and after the last).")
    monitor_dataset: str | None = option(None, "Labelled dataset the monitors read (default: the pretraining "
                                                "--dataset).")
    monitor_splits: str | None = option(None, "BANK,QUERY splits of the monitor data (default: train and the "
                                               "first of test/validation/val).")
    monitor_bank_size: int | None = option(None, "Labelled bank images the kNN monitors search, the first N of "
                                                  "the bank split (default: 20% of the pretraining split's size, "
                                                  "at most 5000).")
    monitor_query_size: int | None = option(None, "Query images the kNN monitors classify, the first N of the "
                                                   "query split (default: 10% of the pretraining split's size, at "
                                                   "most 1000).")
    monitor_k: int = option(DEFAULT_K, "Neighbours of the kNN monitors.")
    monitor_temperature: float = option(DEFAULT_TEMPERATURE,
                                         "Temperature of the kNN monitors' vote weights exp(cosine / T).")
    verbose: int = 1
    on_step: Callable[[int], None] | None = None  # called after each call with its last step (tests interrupt)

    def __post_init__(self) -> None:
        # Parsed here, once, whether the value came from the flag's text or from Python: the run resolves
        # ``auto`` when it knows its devices (training/run_start.py) and reads an int or ``auto`` only.
        self.steps_per_execution = parse_steps_per_execution(self.steps_per_execution)

    def resolved_model_dir(self) -> str:
        """``model_dir``, or runs/<method>[_augself_<augs>][_condition_<descriptors>[_<kind>][_relative]
        [_predictor]] when unset (the defaults concat and absolute are not named: older runs keep their dir)."""
        if self.model_dir:
            return self.model_dir
        model = self.model
        suffix = f"_augself_{'_'.join(model.augself_names)}" if model.augself else ""
        if model.condition:
            suffix += f"_condition_{'_'.join(model.condition)}"
            suffix += f"_{model.condition_kind}" if model.condition_kind != "concat" else ""
            suffix += f"_{model.condition_descriptor}" if model.condition_descriptor != "absolute" else ""
            suffix += "_predictor" if model.condition_predictor else ""
        return os.path.join("runs", model.method + suffix)


def define_train_flags(flag_values: Any, module_name: str) -> None:
    """Defines augself-train's flags on ``flag_values``, listed under ``module_name`` in ``--help``.

    One per `option` field of `TrainConfig` and `AugmentConfig` (defaults from ``TrainConfig().augment``), one
    per probability knob of the registered augmentations (unset: the knob's declared default, or its
    ``when_predicted`` default when AugSelf predicts the step) and one per method and objective option name.
    """
    define_flags("", TrainConfig, flag_values, module_name)
    define_flags("", ModelConfig, flag_values, module_name)
    define_flags("", AugmentConfig, flag_values, module_name, defaults=TrainConfig().augment)
    for knob in registry.probabilities():
        shown = "" if knob.when_predicted is not None else f" (default {knob.default})"
        define_flag(knob.field, float, None, knob.help + shown, flag_values, module_name)
    define_method_flags(flag_values, module_name)
    define_objective_flags(flag_values, module_name)


def config_from_flags(flag_values: Any) -> TrainConfig:
    """The run's `TrainConfig` from flags defined by `define_train_flags` and parsed.

    Raises:
      ValueError: a flag value no run can use (an unknown augmentation, a non-positive size, ...).
    """
    values = values_from_flags("", TrainConfig, flag_values)
    model = ModelConfig(**values_from_flags("", ModelConfig, flag_values),
                        method_options=method_options_from_flags(flag_values),
                        objective_options=objective_options_from_flags(flag_values))
    # A step AugSelf predicts or the method needs (LooC's left-out augmentations) gets its predicted default.
    wanted = set(model.augself_names) | set(model.required_steps())
    probabilities = {
        step.probability.field: step.probability.resolve(flag_values[step.probability.field].value,
                                                         step.name in wanted)
        for step in registry.PIPELINE if step.probability is not None
    }
    augment = AugmentConfig(**values_from_flags("", AugmentConfig, flag_values), probabilities=probabilities)
    if augment.image_size > MAX_IMAGE_SIZE:
        raise ValueError(f"--image_size must be at most {MAX_IMAGE_SIZE} pixels (the paper uses 96 and 224), "
                         f"got {augment.image_size}")
    return TrainConfig(**values, model=model, augment=augment)


def resolve_patch_size(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with a ViT's ``--patch_size=0`` made the patch its image size takes (`ModelConfig.patch_for`:
    the backbone's own at 224 px, smaller at small sizes), so that the model, the check of the views below,
    run.json and the run's log read one number; a ResNet's config or a given patch is returned as it is.

    Raises:
      ValueError: one line, a view of the run's plan (DINO's local crops, E-SSL's extra crop, the image
        itself) smaller than the patch, naming both sizes and the fix.
    """
    model = cfg.model
    if not is_vit(model.backbone):
        return cfg
    patch = model.patch_for(cfg.augment.image_size)
    plan = model.views()
    side = min(spec.config_for(cfg.augment).image_size for spec in plan.views)
    if side < patch:
        size = cfg.augment.image_size
        given = f"--patch_size={patch}" if model.patch_size else f"the {patch}-pixel patch --patch_size=0 gives"
        view = "image" if side == size else "crops (DINO's --local_crop_size, E-SSL's --essl_crop_size)"
        auto = default_patch_size(model.backbone, size)
        raise ValueError(f"{given} at --image_size={size} is larger than the run's {side}-pixel {view}: every "
                         f"view must hold at least one patch; choose --patch_size={side} or less (0: {auto} at "
                         f"this image size) or larger {'--image_size' if side == size else 'crops'}")
    if patch == model.patch_size:
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(model, patch_size=patch))


def resolve_photometric(mode: str) -> str:
    """``auto`` -> ``device`` when a GPU or TPU is visible (the host's CPUs would bind), else ``host``."""
    if mode not in ("auto", *PHOTOMETRIC_MODES):
        raise ValueError(f"unknown photometric mode {mode!r}; choose from auto, {', '.join(PHOTOMETRIC_MODES)}")
    if mode != "auto":
        return mode
    accelerators = tf.config.list_logical_devices("GPU") + tf.config.list_logical_devices("TPU")
    return "device" if accelerators else "host"


def resolve_steps_per_execution(value: int | str, accelerated: bool, log_every: int) -> int:
    """``--steps_per_execution`` as `TrainConfig` holds it (parsed: a positive int or ``auto``) for the run's
    replicas: an int as given; ``auto`` -> ``log_every`` when they are GPUs or TPUs (``accelerated``:
    `augself_tf.runtime.strategy.accelerated`), else 1.

    A call never crosses a log point, so ``log_every`` is the largest K that groups steps at all. On an
    accelerator a step takes milliseconds and the host's cost per call (dispatch, the eager ``next()``, the
    reduction and copy of the logs) is of the same order; on CPUs the step is the host's own work and several
    steps per call measured no gain (docs/benchmarks.md, §8 "Steps per call").
    """
    if value != AUTO_STEPS:
        return int(value)
    return max(1, log_every) if accelerated else 1


def resolve_for_devices(cfg: TrainConfig, accelerated: bool) -> TrainConfig:
    """``cfg`` with the settings a run resolves once its strategy is made, each once, here: ``photometric``
    (`resolve_photometric`), ``model_dir`` (its default named), ``weight_decay_exclude`` (``auto`` made the
    optimizer's rule) and ``steps_per_execution`` (`resolve_steps_per_execution`; ``accelerated``: the strategy's
    replicas are GPUs or TPUs). The run's stages read them from the `TrainConfig` it hands them."""
    return dataclasses.replace(
        cfg, photometric=resolve_photometric(cfg.photometric), model_dir=cfg.resolved_model_dir(),
        weight_decay_exclude=decay_exclusion(cfg.weight_decay_exclude, cfg.optimizer),
        steps_per_execution=resolve_steps_per_execution(cfg.steps_per_execution, accelerated, cfg.log_every))


def flag_values_of(cfg: TrainConfig) -> dict[str, Any]:
    """Every setting of a run by its flag's name, as the flag writes it (None where unset): the `option`
    fields of `TrainConfig`, `ModelConfig` and `AugmentConfig`, the probabilities and the method and objective options
    (HParams)."""
    values = {f.name: flag_value(f, getattr(cfg, f.name)) for f in flag_fields(TrainConfig)}
    values.update({f.name: flag_value(f, getattr(cfg.model, f.name)) for f in flag_fields(ModelConfig)})
    values.update({f.name: flag_value(f, getattr(cfg.augment, f.name)) for f in flag_fields(AugmentConfig)})
    values.update({knob.field: cfg.augment.probability(knob.field) for knob in registry.probabilities()})
    values.update(cfg.model.method_options)
    values.update(cfg.model.objective_options)
    return values
