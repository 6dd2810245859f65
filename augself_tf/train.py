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
from augself_tf.flag_fields import define_flags, values_from_flags  # noqa: E402
from augself_tf.methods import METHODS  # noqa: E402
from augself_tf.training.config import TrainConfig  # noqa: E402

FLAGS = flags.FLAGS


# absl lists a script's own flags under sys.argv[0]: the generated flags go there too, so --help shows them.
_MODULE = sys.argv[0] if __name__ == "__main__" else __name__
define_flags("", TrainConfig, FLAGS, _MODULE)  # one flag per TrainConfig option: its default and help
_DEFAULT = TrainConfig()
flags.DEFINE_string("augself", ",".join(_DEFAULT.augself), "Comma-separated ω to predict "
                    f"({', '.join(registry.AUGSELF_CHOICES)}); '' or 'none' turns AugSelf off.")
# The augmentation pipeline's knobs; defaults from TrainConfig's AugmentConfig.
flags.DEFINE_integer("image_size", _DEFAULT.augment.image_size,
                     "Side of the augmented views in pixels (paper: 96 STL10, 224 ImageNet100).")
flags.DEFINE_float("color_strength", 1.0, "Colour-jitter strength factor s (0.4s, 0.4s, 0.4s, 0.1s).")
flags.DEFINE_float("crop_min_scale", _DEFAULT.augment.crop_scale[0], "Smallest RandomResizedCrop area fraction.")
for _step in registry.PIPELINE:  # one probability flag per augmentation, from the registry's declarations
    if _step.probability is not None:
        _knob = _step.probability
        _default = "" if _knob.when_predicted is not None else f" (default {_knob.default})"
        flags.DEFINE_float(_knob.field, None, _knob.help + _default)

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
    return TrainConfig(**values_from_flags("", TrainConfig, FLAGS), augself=augself, augment=augment,
                       method_options={name: FLAGS[name].value for name in _METHOD_FLAGS})


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
