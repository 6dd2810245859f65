"""Exact resume: which examples every replica sees at every global step, and bit-identical weights after a
`kill -9` and a resume with the same command (under --deterministic, on 2 replicas)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from kill_resume import assert_bit_identical, kill_9_then_resume

from augself_tf.augment import AugmentConfig
from augself_tf.training.checkpoints import saved_name
from augself_tf.training.loop import TrainConfig, distributed_pairs
from augself_tf.training.train_config import resolve_photometric

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _replica_views(strategy, cfg: TrainConfig, steps_per_epoch: int, start: int, stop: int) -> dict:
    """{step: [view1 of replica 0, view1 of replica 1, ...]} for global steps [start, stop)."""
    iterator = iter(distributed_pairs(strategy, cfg, steps_per_epoch, start))
    out = {}
    for step in range(start, stop):
        batch = next(iterator)
        out[step] = [r["view1"].numpy() for r in strategy.experimental_local_results(batch)]
    return out


def test_every_replica_gets_the_same_examples_at_every_step_resumed_or_not():
    # shapes 'test' has 1000 images: with a global batch of 16 on 2 replicas, the loop's epoch is 62 steps
    # while the per-replica stream holds 125 batches of 8, not 2·62; epochs must still line up.
    tf.random.set_seed(0)  # a caller's global seed (0 is the awkward one for tf.data) must change nothing
    strategy = mirrored_cpus()
    cfg = TrainConfig(dataset="shapes", split="test", batch_size=16, augment=AugmentConfig(image_size=8),
                      shuffle_buffer=1000, photometric=resolve_photometric("auto"))  # resolved, as a run's
    spe = 1000 // 16
    full = _replica_views(strategy, cfg, spe, 0, spe + 3)
    for step in full.values():
        assert len(step) == 2 and not np.array_equal(step[0], step[1])
    # A fresh stream started at epoch 1 sees exactly what the uninterrupted stream sees after one epoch.
    epoch1 = _replica_views(strategy, cfg, spe, spe, spe + 3)
    for resume_at in (1, 3, spe - 1):
        resumed = _replica_views(strategy, cfg, spe, resume_at, resume_at + 2)
        for step, views in resumed.items():
            for r in range(2):
                np.testing.assert_array_equal(views[r], full[step][r], err_msg=f"step {step} replica {r}")
    for step, views in epoch1.items():
        for r in range(2):
            np.testing.assert_array_equal(views[r], full[step][r], err_msg=f"epoch 1 step {step} replica {r}")


def test_pair_stream_ignores_tensorflows_global_seed():
    """Views are fixed by (cfg.seed, epoch, index) alone: a caller's tf.random.set_seed changes nothing."""
    from augself_tf.data.pretrain import make_pair_dataset
    from augself_tf.data.sources import load_source

    streams = []
    for global_seed in (None, 0, 42):
        tf.random.set_seed(global_seed)
        ds = make_pair_dataset(load_source("shapes", "test"), AugmentConfig(image_size=8), seed=3, batch_size=4,
                               shuffle_buffer=100, start_epoch=1)
        streams.append(np.concatenate([b["view1"].numpy() for b in ds.take(3)]))
    tf.random.set_seed(None)
    for other in streams[1:]:
        np.testing.assert_array_equal(other, streams[0])


# The kill -9 configurations: a few steps on each side of the kill, checkpoints at every step (the kill comes
# after the manifest names step 2 or later; a later step than 2 is as good). MoCo: the resumed state includes
# the momentum encoder and the key queue, besides weights and optimizer; the queue holds 2 steps of keys, so the
# resumed steps overwrite keys the killed run wrote, from the restored queue pointer. No online monitors: they
# leave the trained bits unchanged (tests/test_monitors.py, 2 replicas, --deterministic) and their bank and
# passes cost more than the steps; monitors across a resume: tests/test_multiworker.py. SimSiam host: the
# command of "Why Grappler is off" in docs/distributed.md (photometric steps in tf.data, batch 128 at 32 px,
# width 1/8), on which two uninterrupted 2-replica runs used to differ, so exact resume could not be checked.
MOCO = ("--method=moco", "--augself=crop,color", "--dataset=shapes", "--split=test", "--width=0.0625",
        "--image_size=16", "--batch_size=16", "--max_steps=5", "--checkpoint_every=1", "--log_every=1",
        "--queue_size=32", "--projector_hidden=32", "--projector_dim=16", "--noexport", "--photometric=device",
        "--monitor=none")
# LooC: four views per example (q, k0 and the keys copying q's colour and rotation draws), a queue per space.
LOOC = ("--method=looc", "--looc_augmentations=color,rotation", "--augself=crop,color", "--dataset=shapes",
        "--split=test", "--width=0.0625", "--image_size=16", "--batch_size=16", "--max_steps=5",
        "--checkpoint_every=1", "--log_every=1", "--queue_size=32", "--projector_hidden=32", "--projector_dim=16",
        "--noexport", "--photometric=device", "--monitor=none")
SIMSIAM_HOST = ("--method=simsiam", "--augself=crop,color", "--batch_size=128", "--image_size=32", "--width=0.125",
                "--seed=3", "--photometric=host", "--monitor=none", "--max_steps=5", "--checkpoint_every=1",
                "--log_every=1", "--noexport")


# Conditioned projectors (CASSLE) add the ω-embedding MLPs (online and momentum) and the device-measured colour
# shift to what must replay exactly.
CONDITIONED = ("--condition=crop,color,color_diff,blur,grayscale", "--condition_width=8", "--condition_depth=2")
# CASSLE's other options: the projector's weights generated per example by a hypernetwork (its ω-MLP built when the
# projector is), the predictor conditioned with its own ω-MLP, each view described relative to the other.
SIMSIAM_HYPERNET = ("--method=simsiam", "--augself=crop,color", "--dataset=shapes", "--split=test", "--width=0.0625",
                    "--image_size=16", "--batch_size=16", "--max_steps=5", "--checkpoint_every=1", "--log_every=1",
                    "--projector_dim=16", "--predictor_hidden=8", "--noexport", "--photometric=device",
                    "--monitor=none", *CONDITIONED, "--condition_kind=hypernet", "--condition_predictor",
                    "--condition_descriptor=relative")


# MoCo is run conditioned only: that state is plain MoCo's (weights, optimizer, key encoder, queue) and more.
@pytest.mark.parametrize(("args", "kill_after", "steps"), [
    ((*MOCO, *CONDITIONED), 2, 5),
    (SIMSIAM_HOST, 2, 5),
    (LOOC, 2, 5),
    (SIMSIAM_HYPERNET, 2, 5),
], ids=["moco-conditioned", "simsiam-host-b128", "looc-4-views", "simsiam-hypernet-predictor-relative"])
@pytest.mark.slow
def test_kill_9_mid_epoch_then_same_command_ends_bit_identical(tmp_path, args, kill_after, steps):
    """Two replicas, --deterministic: SIGKILL after a mid-epoch checkpoint, rerun the command, compare bits."""
    a, b = kill_9_then_resume(tmp_path, args, kill_after, steps)
    assert any("queue" in k for k in a) == ("--method=moco" in args or "--method=looc" in args)
    assert any("omega" in k for k in a) == (CONDITIONED[0] in args)  # the ω-MLPs (online and key) are checkpointed
    assert int(a[saved_name("optimizer/torch_sgd/iteration")]) == steps
    assert_bit_identical(a, b)
