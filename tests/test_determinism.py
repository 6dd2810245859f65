"""`--deterministic` on 2 replicas: the same command run twice leaves bit-identical checkpoints.

The suite runs one corner of the matrix that ``python -m bench.bench_determinism --matrix`` runs in full (SimSiam
and MoCo × host and device photometric modes × global batch 128 and 256; figures in docs/distributed.md): MoCo
with the device photometric stage at batch 256. SimSiam in host mode at batch 128 (the command of
"Why Grappler is off" in docs/distributed.md) and LooC's four
views (device mode, 2 replicas) are kill -9 configurations of tests/test_resume.py, which compares two separate
--deterministic processes as well: a rerun of LooC is checked bit for bit there.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _checkpoint(model_dir: str) -> dict:
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "save_counter" not in k}


@pytest.mark.slow
def test_two_replica_moco_device_b256_reruns_bit_identical(tmp_path):
    """Weights, BN statistics, momentum buffers, the key encoder and the queue after 3 steps: the same bits."""
    args = ["--deterministic", "--cpu_replicas=2", "--strategy=mirrored", "--method=moco", "--augself=crop,color",
            "--photometric=device", "--batch_size=256", "--image_size=32", "--width=0.125", "--seed=3",
            "--max_steps=3", "--checkpoint_every=3", "--monitor=none", "--noexport"]
    dirs = [str(tmp_path / f"run{i}") for i in range(2)]
    # At once: --deterministic runs one thread per op, so two runs share the cores without slowing down.
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "train_main.py"), *args, f"--model_dir={d}"],
                              cwd=ROOT, env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for d in dirs]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    a, b = (_checkpoint(d) for d in dirs)
    assert sorted(a) == sorted(b) and any("queue" in k for k in a) and len(a) > 100
    different = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not different, f"{len(different)} of {len(a)} tensors differ, e.g. {different[:3]}"
