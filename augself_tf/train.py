"""Pretrain a ResNet with SimSiam / MoCo v2 / ... plus the AugSelf loss, then export the backbone.

    augself-train --method=moco --augself=crop,color
    augself-train --method=moco --condition=crop,color      # CASSLE: conditioned projector
    augself-train --flagfile=flags/stl10_simsiam_augself.cfg

The same program is `python -m augself_tf.train`, and `python train_main.py` in a checkout. Defaults are a
small CPU run on the embedded `shapes` data; the flagfiles in the repository's flags/ hold the paper's settings.
Running the same command again resumes from the last checkpoint in --model_dir.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags, logging  # noqa: E402

from augself_tf.startup import import_tensorflow_quietly, run_program  # noqa: E402

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.augment import registry  # noqa: E402
from augself_tf.flag_fields import define_flags, values_from_flags  # noqa: E402
from augself_tf.methods import METHODS  # noqa: E402
from augself_tf.training.config import TrainConfig  # noqa: E402

FLAGS = flags.FLAGS


# Importing this module defines the program's flags on absl's global FLAGS (augself_tf.evaluate's share names
# with them: a process imports one of the two). absl's --help lists the flags of the running program,
# sys.argv[0]: they are this program's whichever entry point imported it (augself-train, train_main.py, -m).
PROGRAM = sys.argv[0] if sys.argv and sys.argv[0] else __name__
_IN_HELP = {"module_name": PROGRAM}
define_flags("", TrainConfig, FLAGS, PROGRAM)  # one flag per TrainConfig option: its default and help
_DEFAULT = TrainConfig()
flags.DEFINE_string("augself", ",".join(_DEFAULT.augself), "Comma-separated ω to predict "
                    f"({', '.join(registry.AUGSELF_CHOICES)}); '' or 'none' turns AugSelf off.", **_IN_HELP)
flags.DEFINE_string("condition", ",".join(_DEFAULT.condition) or "none", "Comma-separated augmentation descriptors "
                    f"each view's projector is conditioned on (CASSLE; {', '.join(registry.CONDITION_CHOICES)}); "
                    "'' or 'none' turns conditioning off.", **_IN_HELP)
# The augmentation pipeline's knobs; defaults from TrainConfig's AugmentConfig.
flags.DEFINE_integer("image_size", _DEFAULT.augment.image_size,
                     "Side of the augmented views in pixels (paper: 96 STL10, 224 ImageNet100).", **_IN_HELP)
flags.DEFINE_float("color_strength", 1.0, "Colour-jitter strength factor s (0.4s, 0.4s, 0.4s, 0.1s).", **_IN_HELP)
flags.DEFINE_float("crop_min_scale", _DEFAULT.augment.crop_scale[0], "Smallest RandomResizedCrop area fraction.",
                   **_IN_HELP)
for _step in registry.PIPELINE:  # one probability flag per augmentation, from the registry's declarations
    if _step.probability is not None:
        _knob = _step.probability
        _default = "" if _knob.when_predicted is not None else f" (default {_knob.default})"
        flags.DEFINE_float(_knob.field, None, _knob.help + _default, **_IN_HELP)

#: The methods' constructor options that are flags (``{name: help}``); unset ones reach the method as None.
METHOD_FLAGS: dict[str, str] = {}
for _cls in METHODS.values():
    for _name, (_default, _help) in getattr(_cls, "options", {}).items():
        if _name in METHOD_FLAGS:
            continue
        _kind = flags.DEFINE_integer if isinstance(_default, int) else flags.DEFINE_float
        _kind(_name, None, f"{_help} (default per method)", **_IN_HELP)
        METHOD_FLAGS[_name] = _help


def config_from_flags() -> TrainConfig:
    """The run's :class:`TrainConfig` from the parsed flags.

    Raises:
      ValueError: a flag value no run can use (an unknown augmentation, a non-positive size, ...).
    """
    from augself_tf.augment import AugmentConfig, parse_augself

    augself = parse_augself(FLAGS.augself)
    condition = registry.parse_condition(FLAGS.condition)
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
    return TrainConfig(**values_from_flags("", TrainConfig, FLAGS), augself=augself, condition=condition,
                       augment=augment, method_options={name: FLAGS[name].value for name in METHOD_FLAGS})


def main(argv: list[str]) -> int:
    """absl entry point (``app.run(main)``): train with the parsed flags; exit status 2 on bad input."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # TF's INFO chatter would bury the progress bar
    from augself_tf.training.loop import NonFiniteLossError, train
    if FLAGS.deterministic:
        from augself_tf.runtime.determinism import restart_without_onednn

        restart_without_onednn()

    try:
        cfg = config_from_flags()
        train(cfg)
    except (ValueError, FileNotFoundError, NonFiniteLossError) as err:
        if os.environ.get("AUGSELF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def cli() -> None:
    """The ``augself-train`` command: parse the command line and run :func:`main`."""
    run_program(main, __doc__)


if __name__ == "__main__":
    cli()
