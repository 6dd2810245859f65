"""Checkpoints keyed by variable path (training/checkpoints.py): every stateful variable saved, momentum buffers
restored onto their own weights whatever the optimizer's variable order, and one clear line for a checkpoint
of another model, of the old position-keyed layout, or a run.json with other model settings."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, compile_model, make_model, run_steps

from augself_tf.training.checkpoints import (
    CheckpointMismatchError,
    check_run_settings,
    make_checkpoint,
    model_variables_by_key,
    restore,
    training_state,
)
from augself_tf.training.optim import build_optimizer


@pytest.mark.parametrize("method", ["simsiam", "moco", "byol", "swav"])
def test_every_variable_and_every_momentum_buffer_has_a_key(method):
    model = make_model(method, augself=("crop", "color"))
    compile_model(model)
    state = training_state(model, model.optimizer)
    saved = {id(v) for v in state.values()}
    missing = [v.path for v in model.variables + model.optimizer.variables if id(v) not in saved]
    assert not missing, missing
    assert len(saved) == len(state)  # one key per variable
    # The AugSelf heads' BN statistics, and for MoCo the queue and the key encoder, are among them.
    keys = list(state)
    assert any(k.startswith("model/augself_heads/crop/") and k.endswith("moving_variance") for k in keys)
    assert "optimizer/torch_sgd/iteration" in keys
    momentum = [k for k in keys if k.startswith("optimizer/momentum/")]
    assert len(momentum) == len(model.optimized_variables())
    if method == "moco":
        assert {"model/queue", "model/queue_ptr"} <= set(keys)
        assert any(k.startswith("model/key_backbone/") for k in keys)


def test_momentum_buffers_restore_onto_their_own_weights_when_the_variable_order_changes(tmp_path):
    model = make_model("simsiam", augself=("crop", "color"))
    compile_model(model)
    run_steps(model, [batch(0), batch(1)])
    saved_state = training_state(model, model.optimizer)
    path = make_checkpoint(model, model.optimizer).save(str(tmp_path / "ckpt"))

    other = make_model("simsiam", augself=("color", "crop"), seed=5)  # heads built in the other order
    optimizer = build_optimizer(0.05, 256, 100, weight_decay=5e-4, constant_lr_variables=other.constant_lr_variables())
    other.compile(optimizer=optimizer)
    optimizer.build(list(reversed(other.optimized_variables())))
    state = training_state(other, optimizer)
    restore(make_checkpoint(other, optimizer), path, state)
    for key, var in saved_state.items():
        np.testing.assert_array_equal(np.asarray(state[key]), np.asarray(var), err_msg=key)
    # The order really differs, and a position-keyed checkpoint would have crossed buffers of equal shapes.
    first, last = model.optimized_variables()[0], model.optimized_variables()[-1]
    assert optimizer._trainable_variables[0].path == last.path != first.path


def test_a_checkpoint_of_another_model_or_layout_is_refused_in_one_line(tmp_path):
    model = make_model("moco", augself=("crop",), queue_size=32)
    compile_model(model)
    path = make_checkpoint(model, model.optimizer).save(str(tmp_path / "new"))
    bigger = make_model("moco", augself=("crop", "color"), queue_size=64)
    compile_model(bigger)
    with pytest.raises(CheckpointMismatchError) as err:
        restore(make_checkpoint(bigger, bigger.optimizer), path, training_state(bigger, bigger.optimizer))
    message = str(err.value)
    assert "\n" not in message and "not in it" in message and "shapes differ" in message and "model/queue" in message
    old = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "old"))
    with pytest.raises(CheckpointMismatchError, match="older augself-tf"):
        restore(make_checkpoint(model, model.optimizer), old, training_state(model, model.optimizer))


def test_run_settings_refuse_another_model_but_allow_another_schedule(tmp_path):
    settings = {"method": "moco", "backbone": "resnet18", "width": 0.25, "augself": ("crop", "color"),
                "method_options": {"queue_size": 64, "temperature": None}, "input_mean": (0.5, 0.5, 0.5),
                "epochs": 10}
    check_run_settings(str(tmp_path), settings, write=True)
    with open(tmp_path / "run.json") as f:
        assert json.load(f)["model"]["method_options"] == {"queue_size": 64}
    check_run_settings(str(tmp_path), {**settings, "epochs": 200}, write=True)  # the schedule may change
    with pytest.raises(CheckpointMismatchError, match=r"--width=0.25 there, 0.5 now") as err:
        check_run_settings(str(tmp_path), {**settings, "width": 0.5}, write=True)
    assert "\n" not in str(err.value)
    assert not os.path.exists(tmp_path / "run.json.tmp")


def test_keys_do_not_depend_on_creation_order():
    a = model_variables_by_key(make_model("byol", augself=("crop", "color"), seed=1))
    b = model_variables_by_key(make_model("byol", augself=("crop", "color"), seed=2))
    assert list(a) == list(b)
