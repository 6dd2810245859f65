"""MoCo (augself_tf/methods/moco.py): InfoNCE against NumPy, and the queue filled with the keys of both
replicas in replica order."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import mirrored_cpus
from helpers import batch, compile_model, make_model, replica_values, run_steps

from augself_tf.methods.moco import info_nce


def test_info_nce_matches_numpy():
    rng = np.random.default_rng(1)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    q, k, queue = unit(rng.normal(size=[5, 8])), unit(rng.normal(size=[5, 8])), unit(rng.normal(size=[11, 8]))
    got = float(info_nce(tf.constant(q), tf.constant(k), tf.constant(queue), 0.2))
    logits = np.concatenate([np.sum(q * k, 1, keepdims=True), q @ queue.T], 1) / 0.2
    want = np.mean(np.log(np.exp(logits).sum(1)) - logits[:, 0])
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize(("reduction", "merge_call"), [("one_device", True), ("collective", False)])
def test_moco_queue_holds_keys_of_both_replicas_in_order(reduction, merge_call):
    strategy = mirrored_cpus(reduction, merge_call=merge_call)
    b = batch(5, n=8, size=16)
    with strategy.scope():
        model = make_model("moco", augself=(), sync=True, image_size=16, queue_size=32, key_momentum=1.0,
                           projector_dim=16, projector_hidden=16)
    before = replica_values(model.queue)[0]
    compile_model(model, strategy)
    run_steps(model, [b], strategy)
    # Key momentum 1.0 keeps the key encoder fixed, so the keys can be recomputed on the global batch
    # (synchronized BN over 2 replicas = plain BN over their concatenation).
    _, k = model.key_encoder.encode(b["view2"], training=True)
    k = k.numpy()
    k = k / np.linalg.norm(k, axis=1, keepdims=True)
    queues = replica_values(model.queue)
    assert len(queues) == 2
    np.testing.assert_allclose(queues[0][:8], k, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(queues[0][8:], before[8:])
    assert [int(p) for p in replica_values(model.queue_ptr)] == [8, 8]
    np.testing.assert_array_equal(queues[1], queues[0])
