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

from absl import flags, logging  # noqa: E402

from augself_tf.startup import import_tensorflow_quietly, run_program  # noqa: E402

import_tensorflow_quietly()  # before anything imports TensorFlow: its start-up notices, once each at most

from augself_tf.training.train_config import config_from_flags, define_train_flags  # noqa: E402

FLAGS = flags.FLAGS
#: Exit codes (README): 0 finished, EXIT_FAILED a run that could not go on (a checkpoint that cannot be written,
#: no intact checkpoint, out of memory, its run lock taken over), EXIT_BAD_INPUT a bad flag, dataset or settings,
#: a --model_dir another live run holds (the same command fails again while that run lives), or a diverged run;
#: 128 + N stopped by signal N after saving (130 Ctrl-C, 143 SIGTERM).
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


# Importing this module defines the program's flags on absl's global FLAGS (augself_tf.evaluate's share names
# with them: a process imports one of the two). absl's --help lists the flags of the running program,
# sys.argv[0]: they are this program's whichever entry point imported it (augself-train, train_main.py, -m).
PROGRAM = sys.argv[0] if sys.argv and sys.argv[0] else __name__
define_train_flags(FLAGS, PROGRAM)  # every setting's flag, generated from the fields that declare it


def main(argv: list[str]) -> int:
    """absl entry point (``app.run(main)``): train with the parsed flags; exit status 2 on bad input."""
    if len(argv) > 1:
        print(f"error: unexpected arguments: {' '.join(argv[1:])} (every setting is a --flag=value)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # TF's INFO chatter would bury the progress bar
    import tensorflow as tf

    from augself_tf.runtime.preemption import Preempted
    from augself_tf.runtime.run_lock import RunLockLostError
    from augself_tf.training.checkpoint_files import CheckpointFileError
    from augself_tf.training.loop import NonFiniteLossError, train
    if FLAGS.deterministic:
        from augself_tf.runtime.determinism import restart_without_onednn

        restart_without_onednn()

    try:
        cfg = config_from_flags(FLAGS)
        train(cfg)
    except Preempted as stop:  # saved at a step boundary: not an error, but not a finished run either
        print(f"\n{stop}", file=sys.stderr)
        return stop.exit_code
    except (ValueError, FileNotFoundError, NonFiniteLossError) as err:
        if os.environ.get("AUGSELF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (CheckpointFileError, RunLockLostError, tf.errors.ResourceExhaustedError) as err:
        if os.environ.get("AUGSELF_DEBUG"):
            raise
        if isinstance(err, tf.errors.ResourceExhaustedError):
            err = f"out of memory ({err.message.splitlines()[0][:160]}); lower --batch_size or --image_size"
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cli() -> None:
    """The ``augself-train`` command: parse the command line and run :func:`main`."""
    run_program(main, __doc__)


if __name__ == "__main__":
    cli()
