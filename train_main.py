"""Pretrain a ResNet with SimSiam / MoCo v2 / ... plus the AugSelf loss, then export the backbone.

    python train_main.py --method=moco --augself=crop,color
    python train_main.py --flagfile=flags/stl10_simsiam_augself.cfg

Defaults are a small CPU run on the embedded `shapes` data; the flagfiles in flags/ hold the paper's settings.
Running the same command again resumes from the last checkpoint in --model_dir.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags, logging  # noqa: E402

from augself_tf.startup import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.augment import registry  # noqa: E402
from augself_tf.methods import METHODS  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_enum("method", "moco", list(METHODS), "Invariance objective ('none' = AugSelf alone).")
flags.DEFINE_string("augself", "crop,color", f"Comma-separated ω to predict ({', '.join(registry.AUGSELF_CHOICES)}); "
                    "'' or 'none' turns AugSelf off.")
flags.DEFINE_float("augself_weight", 1.0, "λ: total = L_method + λ·Σ L_aug (paper: 1.0 STL10, 0.5 ImageNet100).")
flags.DEFINE_string("dataset", "shapes", "'shapes' (embedded), a tfds name (stl10, ...) or folder:PATH.")
flags.DEFINE_string("split", "train", "Split(s) to pretrain on, e.g. 'train+unlabelled' for STL10 (tfds' spelling).")
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data_dir.")
flags.DEFINE_enum("backbone", "resnet18_cifar", ["resnet18", "resnet50", "resnet18_cifar"], "Backbone.")
flags.DEFINE_float("width", 0.125, "Channel multiplier of the backbone (1.0 = standard ResNet).")
flags.DEFINE_integer("image_size", 32, "Side of the augmented views in pixels (paper: 96 STL10, 224 ImageNet100).")
flags.DEFINE_integer("batch_size", 256, "GLOBAL batch size (split over replicas).")
flags.DEFINE_integer("epochs", 10, "Training epochs.")
flags.DEFINE_integer("max_steps", None, "Stop after this many steps in total (smoke runs, benchmarks).")
flags.DEFINE_float("lr", 0.03, "Base learning rate, scaled by batch/256.")
flags.DEFINE_float("weight_decay", 5e-4, "Coupled L2 coefficient (PyTorch SGD semantics).")
flags.DEFINE_integer("seed", 0, "Seed of initialisation, shuffling and every augmentation.")
flags.DEFINE_string("model_dir", None, "Output directory (default runs/<method>[_augself_<augs>]).")
flags.DEFINE_enum("strategy", "auto", ["auto", "one_device", "mirrored", "multi_worker"], "tf.distribute strategy.")
flags.DEFINE_integer("cpu_replicas", 1, "Split the CPU into N logical devices (runs the mirrored path without GPUs).")
flags.DEFINE_enum("mixed_precision", None, ["float16", "bfloat16"], "Mixed-precision compute dtype.")
flags.DEFINE_boolean("jit_compile", False, "XLA-compile the training step.")
flags.DEFINE_boolean("deterministic", False, "Bit-identical reruns and resumes: op determinism, and on CPU one "
                     "thread per op (several times slower; see docs/distributed.md).")
flags.DEFINE_float("color_strength", 1.0, "Colour-jitter strength factor s (0.4s, 0.4s, 0.4s, 0.1s).")
flags.DEFINE_float("crop_min_scale", 0.2, "Smallest RandomResizedCrop area fraction.")
flags.DEFINE_enum("photometric", "auto", ["auto", "host", "device"], "Where the photometric augmentations run: "
                  "'host' in tf.data, 'device' batched in the training step (uint8 transport); auto = device "
                  "when a GPU or TPU is visible.")
for _step in registry.PIPELINE:  # one probability flag per augmentation, from the registry's declarations
    if _step.probability is not None:
        _knob = _step.probability
        _default = "" if _knob.when_predicted is not None else f" (default {_knob.default})"
        flags.DEFINE_float(_knob.field, None, _knob.help + _default)
flags.DEFINE_integer("log_every", 10, "TensorBoard scalars every N steps.")
flags.DEFINE_integer("checkpoint_every", 0, "Checkpoint every N steps (0: at the end of every epoch).")
flags.DEFINE_boolean("export", True, "Export the backbone as a SavedModel at the end.")
flags.DEFINE_boolean("cache_source", None, "Keep decoded images in memory (default: only for 'shapes').")

# monitor flags (online transfer monitors; names match TrainConfig's monitor_* fields, see docs/monitors.md)
flags.DEFINE_string("monitor", "auto", "Online transfer monitors: 'auto' (kNN on the class label, plus kNN on the "
                    "colour label where the data has one, else colorperm), 'none', or a comma list of knn, "
                    "knn:LABEL, colorperm.")
flags.DEFINE_integer("monitor_every", 2, "Run the monitors every N epochs (and before the first and after the last "
                     "step).")
flags.DEFINE_string("monitor_dataset", None, "Labelled dataset the monitors read (default: --dataset).")
flags.DEFINE_string("monitor_splits", None, "BANK,QUERY splits of the monitor data (default: train and the first "
                    "of test/validation/val).")
flags.DEFINE_integer("monitor_bank_size", None, "Labelled bank images the kNN monitors search, the first N of BANK "
                     "(default: 20% of the pretraining split's size, at most 5000).")
flags.DEFINE_integer("monitor_query_size", None, "Query images the kNN monitors classify, the first N of QUERY "
                     "(default: 10% of the pretraining split's size, at most 1000).")
flags.DEFINE_integer("monitor_k", 200, "Neighbours of the kNN monitors.")
flags.DEFINE_float("monitor_temperature", 0.1, "Temperature of the kNN vote weights exp(cosine / T).")
# end of monitor flags

_METHOD_FLAGS: dict[str, str] = {}
for _cls in METHODS.values():
    for _name, (_default, _help) in getattr(_cls, "options", {}).items():
        if _name in _METHOD_FLAGS:
            continue
        _kind = flags.DEFINE_integer if isinstance(_default, int) else flags.DEFINE_float
        _kind(_name, None, f"{_help} (default per method)")
        _METHOD_FLAGS[_name] = _help


def _config():
    from augself_tf.augment import AugmentConfig, parse_augself
    from augself_tf.training.loop import TrainConfig

    augself = parse_augself(FLAGS.augself)
    fields = {f.name for f in dataclasses.fields(AugmentConfig)}
    probs = {
        step.probability.field: step.probability.resolve(FLAGS[step.probability.field].value, step.name in augself)
        for step in registry.PIPELINE
        if step.probability is not None
    }
    augment = AugmentConfig(
        image_size=FLAGS.image_size,
        crop_scale=(FLAGS.crop_min_scale, 1.0),
        **{k: v for k, v in probs.items() if k in fields},
        probabilities=tuple((k, v) for k, v in probs.items() if k not in fields),
    ).with_color_strength(FLAGS.color_strength)
    for name, value in (("batch_size", FLAGS.batch_size), ("epochs", FLAGS.epochs), ("image_size", FLAGS.image_size)):
        if value <= 0:
            raise ValueError(f"--{name} must be positive, got {value}")
    model_dir = FLAGS.model_dir or os.path.join(
        "runs", FLAGS.method + (f"_augself_{'_'.join(augself)}" if augself else "")
    )
    # Flags named like a TrainConfig field fill it; the rest are assembled above.
    from_flags = {f.name: FLAGS[f.name].value for f in dataclasses.fields(TrainConfig) if f.name in FLAGS}
    return TrainConfig(**{
        **from_flags,
        "augself": augself,
        "augment": augment,
        "model_dir": model_dir,
        "method_options": {name: FLAGS[name].value for name in _METHOD_FLAGS},
    })


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # TF's INFO chatter would bury the progress bar
    from augself_tf.training.loop import NonFiniteLossError, train
    if FLAGS.deterministic:
        from augself_tf.training.determinism import restart_without_onednn

        restart_without_onednn()

    try:
        cfg = _config()
        train(cfg)
    except (ValueError, FileNotFoundError, NonFiniteLossError) as err:
        if os.environ.get("AUGSELF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    app.run(main)
