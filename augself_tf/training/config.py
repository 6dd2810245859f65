"""The settings of one pretraining run, each with its default and its help text written once.

The defaults are a small CPU run on the embedded ``shapes`` data (a few minutes on two cores); the paper's
settings live in the flagfiles under flags/. train_main.py defines one flag per field that has help text,
with that default and that help, so a field added here is a flag there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from augself_tf.augment.config import AugmentConfig
from augself_tf.augment.pipeline import PHOTOMETRIC_MODES
from augself_tf.methods import METHODS
from augself_tf.models.resnet import BACKBONES
from augself_tf.training.knn import DEFAULT_K, DEFAULT_TEMPERATURE
from augself_tf.training.strategy import STRATEGIES

# What a run on the embedded data needs; the paper's 96 px (STL10) and 224 px (ImageNet100) are in flags/.
CPU_IMAGE_SIZE = 32


def setting(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:  # noqa: A002
    """A TrainConfig field that is also a train_main flag: its default, help text and allowed values."""
    metadata = {"help": help} if choices is None else {"help": help, "choices": tuple(choices)}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class TrainConfig:
    """Everything one pretraining run needs (train_main.py fills it from flags of the same names).

    Fields made with `setting` are flags; the rest are assembled by train_main (``augself``, ``augment``,
    ``method_options``) or are for programs and tests (``verbose``, ``on_step``).
    """

    method: str = setting("moco", "Invariance objective ('none' = AugSelf alone).", tuple(METHODS))
    augself: tuple[str, ...] = ("crop", "color")
    augself_weight: float = setting(1.0, "λ: total = L_method + λ·Σ L_aug (paper: 1.0 STL10, 0.5 ImageNet100).")
    dataset: str = setting("shapes", "'shapes' (embedded), a tfds name (stl10, ...) or folder:PATH.")
    split: str = setting("train", "Split(s) to pretrain on, e.g. 'train+unlabelled' for STL10 (tfds' spelling).")
    data_dir: str | None = setting(None, "tensorflow-datasets data_dir.")
    backbone: str = setting("resnet18_cifar", "Backbone.", BACKBONES)
    width: float = setting(0.125, "Channel multiplier of the backbone (1.0 = standard ResNet).")
    augment: AugmentConfig = dataclasses.field(default_factory=lambda: AugmentConfig(image_size=CPU_IMAGE_SIZE))
    batch_size: int = setting(256, "GLOBAL batch size (split over replicas).")
    epochs: int = setting(10, "Training epochs.")
    max_steps: int | None = setting(None, "Stop after this many steps in total (smoke runs, benchmarks).")
    lr: float = setting(0.03, "Base learning rate, scaled by batch/256.")
    weight_decay: float = setting(5e-4, "Coupled L2 coefficient (PyTorch SGD semantics).")
    seed: int = setting(0, "Seed of initialisation, shuffling and every augmentation.")
    model_dir: str | None = setting(None, "Output directory (default runs/<method>[_augself_<augs>]).")
    strategy: str = setting("auto", "tf.distribute strategy.", STRATEGIES)
    cpu_replicas: int = setting(1, "Split the CPU into N logical devices (runs the mirrored path without GPUs).")
    mixed_precision: str | None = setting(None, "Mixed-precision compute dtype.", ("float16", "bfloat16"))
    jit_compile: bool = setting(False, "XLA-compile the training step.")
    deterministic: bool = setting(False, "Bit-identical reruns and resumes: op determinism, and on CPU one thread "
                                         "per op (several times slower; see docs/distributed.md).")
    photometric: str = setting("auto", "Where the photometric augmentations run: 'host' in tf.data, 'device' "
                                       "batched in the training step (uint8 transport); auto = device when a GPU "
                                       "or TPU is visible.", ("auto", *PHOTOMETRIC_MODES))
    method_options: dict = dataclasses.field(default_factory=dict)
    log_every: int = setting(10, "TensorBoard scalars every N steps.")
    checkpoint_every: int = setting(0, "Checkpoint every N steps (0: at the end of every epoch).")
    keep_checkpoints: int = setting(3, "Checkpoints kept in model_dir/checkpoints.")
    shuffle_buffer: int = setting(10_000, "Images in tf.data's shuffle buffer.")
    cache_source: bool | None = setting(None, "Keep decoded images in memory (default: only for 'shapes').")
    export: bool = setting(True, "Export the backbone as a SavedModel at the end.")
    monitor: str = setting("auto", "Online transfer monitors (docs/monitors.md): 'auto' (kNN on the class label, "
                                   "plus kNN on the colour label where the data has one, else the colour-"
                                   "permutation kNN), 'none', or a comma list of knn, knn:LABEL, colorperm.")
    monitor_every: int = setting(2, "Run the monitors every N epochs (and before the first step and after the last).")
    monitor_dataset: str | None = setting(None, "Labelled dataset the monitors read (default: the pretraining "
                                                "--dataset).")
    monitor_splits: str | None = setting(None, "BANK,QUERY splits of the monitor data (default: train and the "
                                               "first of test/validation/val).")
    monitor_bank_size: int | None = setting(None, "Labelled bank images the kNN monitors search, the first N of "
                                                  "the bank split (default: 20% of the pretraining split's size, "
                                                  "at most 5000).")
    monitor_query_size: int | None = setting(None, "Query images the kNN monitors classify, the first N of the "
                                                   "query split (default: 10% of the pretraining split's size, at "
                                                   "most 1000).")
    monitor_k: int = setting(DEFAULT_K, "Neighbours of the kNN monitors.")
    monitor_temperature: float = setting(DEFAULT_TEMPERATURE,
                                         "Temperature of the kNN monitors' vote weights exp(cosine / T).")
    verbose: int = 1
    on_step: Callable[[int], None] | None = None  # called after each step (tests use it to interrupt)

    def resolved_model_dir(self) -> str:
        """``model_dir``, or runs/<method>[_augself_<augs>] when unset."""
        if self.model_dir:
            return self.model_dir
        suffix = f"_augself_{'_'.join(self.augself)}" if self.augself else ""
        return os.path.join("runs", self.method + suffix)


def flag_settings() -> list[dataclasses.Field]:
    """The TrainConfig fields that are flags, in declaration order."""
    return [f for f in dataclasses.fields(TrainConfig) if "help" in f.metadata]
