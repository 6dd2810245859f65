"""Pretrain a ResNet with SimSiam / MoCo v2 / ... plus the AugSelf loss, then export the backbone.

    python train_main.py --method=moco --augself=crop,color
    python train_main.py --flagfile=flags/stl10_simsiam_augself.cfg

Defaults are a small CPU run on the embedded `shapes` data; the flagfiles in flags/ hold the paper's settings.
Running the same command again resumes from the last checkpoint in --model_dir.
"""

# The program is augself_tf.train (installed as `augself-train`); this file runs it from a checkout.
from augself_tf.train import cli

if __name__ == "__main__":
    cli()
