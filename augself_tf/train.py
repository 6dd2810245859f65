"""Pretrain a ResNet with SimSiam / MoCo v2 / ... plus the AugSelf loss, then export the backbone.

    augself-train --method=moco --augself=crop,color
    augself-train --method=moco --condition=crop,color      # CASSLE: conditioned projector
    augself-train --flagfile=flags/stl10_simsiam_augself.cfg

The same program is `python -m augself_tf.train`, and `python train_main.py` in a checkout. Defaults are a
small CPU run on the embedded `shapes` data; the flagfiles in the repository's flags/ hold the paper's settings.
Running the same command again resumes from the last checkpoint in --model_dir.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging  # noqa: E402

from augself_tf.startup import import_tensorflow_quietly, run_program  # noqa: E402

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.training.train_config import config_from_flags, define_train_flags  # noqa: E402

FLAGS = flags.FLAGS


# Importing this module defines the program's flags on absl's global FLAGS (augself_tf.evaluate's share names
# with them: a process imports one of the two). absl's --help lists the flags of the running program,
# sys.argv[0]: they are this program's whichever entry point imported it (augself-train, train_main.py, -m).
PROGRAM = sys.argv[0] if sys.argv and sys.argv[0] else __name__
define_train_flags(FLAGS, PROGRAM)  # every setting's flag, generated from the fields that declare it


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
        cfg = config_from_flags(FLAGS)
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
