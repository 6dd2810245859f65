"""``python -m augself_tf.selfcheck``: the ``augself-selfcheck`` command."""

from augself_tf.selfcheck.cli import cli

if __name__ == "__main__":
    cli()
