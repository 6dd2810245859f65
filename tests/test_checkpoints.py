"""Checkpoints keyed by variable path (training/checkpoints.py): every stateful variable saved, momentum buffers
restored onto their own weights whatever the optimizer's variable order, and one clear line for a checkpoint
of another model, of the old position-keyed layout, or a run.json with other model settings."""

from __future__ import annotations

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import batch, compile_model, eager_steps, make_config, make_model, replace_config, tiny_run

from augself_tf.flag_fields import flag_fields
from augself_tf.methods.model_config import ModelConfig, parse_augself_tasks
from augself_tf.training.checkpoints import (
    CheckpointMismatchError,
    check_run_settings,
    make_checkpoint,
    model_variables_by_key,
    restore,
    training_state,
)
from augself_tf.training.loop import train
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
    assert any(k.startswith("model/objectives/augself/augself_crop/") and k.endswith("moving_variance") for k in keys)
    assert "optimizer/torch_sgd/iteration" in keys
    momentum = [k for k in keys if k.startswith("optimizer/momentum/")]
    assert len(momentum) == len(model.optimized_variables())
    if method == "moco":
        assert {"model/queue", "model/queue_ptr"} <= set(keys)
        assert any(k.startswith("model/key_backbone/") for k in keys)


def test_momentum_buffers_restore_onto_their_own_weights_when_the_variable_order_changes(tmp_path):
    model = make_model("simsiam", augself=("crop", "color"))
    compile_model(model)
    eager_steps(model, [batch(0), batch(1)])  # momentum buffers off zero; untraced: the step is only the means
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


def test_an_adamw_checkpoint_without_its_applied_step_count_is_refused_in_one_line(tmp_path):
    """Written before AdamW counted its applied steps apart from `iterations`: the count a skipped float16 step
    would leave behind is unknown, so it is refused naming why, not restored with a guess."""
    w = keras.Variable(np.ones((2, 2), np.float32), name="w")
    optimizer = build_optimizer(0.1, 256, 10, optimizer="adamw")
    optimizer.build([w])
    state = {"model/w": w, **{f"optimizer/{v.path}": v for v in optimizer.variables}}
    assert "optimizer/torch_adamw/applied_steps" in state
    older = {k: v for k, v in state.items() if not k.endswith("applied_steps")}
    path = tf.train.Checkpoint(state=older).save(str(tmp_path / "older"))
    with pytest.raises(CheckpointMismatchError, match="written before AdamW counted its applied steps") as err:
        restore(tf.train.Checkpoint(state=state), path, state)
    assert "\n" not in str(err.value)
    restore(tf.train.Checkpoint(state=state), tf.train.Checkpoint(state=state).save(str(tmp_path / "new")), state)


STATS = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def _checked(**model) -> dict:
    return ModelConfig(**model).checked_settings(*STATS)


def test_run_settings_refuse_another_model_but_allow_another_schedule(tmp_path):
    settings = _checked(method="moco", backbone="resnet18", width=0.25, augself=("crop", "color"),
                        method_options={"queue_size": 64, "temperature": None})
    check_run_settings(str(tmp_path), settings, write=True)
    with open(tmp_path / "run.json") as f:
        assert json.load(f)["model"]["method_options"] == {"queue_size": 64}
    # Only the model's settings are checked: a run's schedule (epochs, lr, logging) may change on resume.
    short, long = make_config(epochs=10, lr=0.1), make_config(epochs=200, lr=0.2)
    assert short.model.checked_settings(*STATS) == long.model.checked_settings(*STATS)
    with pytest.raises(CheckpointMismatchError, match=r"--width=0.25 there, 0.5 now") as err:
        check_run_settings(str(tmp_path), _checked(method="moco", backbone="resnet18", width=0.5,
                                                   method_options={"queue_size": 64}), write=True)
    assert "\n" not in str(err.value)
    assert not os.path.exists(tmp_path / "run.json.tmp")


# Another value for every ModelConfig flag; a field added to ModelConfig without one here fails the test below.
OTHER_VALUES = {
    "method": "simsiam", "augself": ("crop", "color:0.5"), "augself_weight": 0.5, "condition": ("crop",),
    "condition_width": 32, "condition_depth": 3, "condition_kind": "hypernet", "condition_descriptor": "relative",
    "condition_predictor": True, "backbone": "resnet18", "width": 0.25,
    "input_mean": "0.1,0.2,0.3", "input_std": "0.3,0.2,0.1",
    # A ViT's own settings (on a ResNet they are refused at parse): changed together with the backbone.
    "patch_size": 4, "pos_embed": "learned", "drop_path": 0.1, "stop_grad_conv1": True,
}
VIT_ONLY = ("patch_size", "pos_embed", "drop_path", "stop_grad_conv1")


def test_every_model_setting_is_refused_on_resume_naming_its_flag(tmp_path):
    """run.json's checked settings are ModelConfig's fields themselves: none can be left out of the check."""
    assert set(OTHER_VALUES) == {f.name for f in flag_fields(ModelConfig)}
    base = ModelConfig(condition=("crop", "color"))
    data_stats = ((0.4, 0.4, 0.4), (0.2, 0.2, 0.2))
    check_run_settings(str(tmp_path), base.checked_settings(*base.input_statistics(*data_stats)), write=True)
    changes = dict(OTHER_VALUES, augself=parse_augself_tasks("crop,color:0.5"))
    for name, value in [*changes.items(), ("projector_dim", 32)]:
        if name == "projector_dim":  # a method option: one flag each, recorded under method_options
            other = dataclasses.replace(base, method_options={"projector_dim": 32})
        else:
            backbone = {"backbone": "vit_pico"} if name in VIT_ONLY else {}
            other = dataclasses.replace(base, **backbone, **{name: value})
        with pytest.raises(CheckpointMismatchError, match=f"--{name}=") as err:
            check_run_settings(str(tmp_path), other.checked_settings(*other.input_statistics(*data_stats)),
                               write=True)
        assert "\n" not in str(err.value)


def test_a_setting_an_older_run_json_lacks_is_recorded_not_refused(tmp_path):
    settings = _checked(condition=("crop",), condition_width=16)
    older = {k: v for k, v in settings.items() if k not in ("condition_width", "condition_depth", "augself_weight")}
    (tmp_path / "run.json").write_text(json.dumps({"model": older}))
    check_run_settings(str(tmp_path), settings, write=True)
    with open(tmp_path / "run.json") as f:
        assert json.load(f)["model"] == settings
    with pytest.raises(CheckpointMismatchError, match="--condition_width=16 there, 8 now"):
        check_run_settings(str(tmp_path), _checked(condition=("crop",), condition_width=8), write=True)


def test_a_run_json_with_objective_options_among_the_methods_resumes_and_is_rewritten_apart(tmp_path):
    """A run.json written before the objectives' options had their own record holds them in method_options: the
    same settings resume (recorded apart from then on), another value is refused naming its flag."""
    model = ModelConfig(method="simclr", method_options={"temperature": 0.5},
                        objective_options={"equimod_weight": 1.0, "equimod_dim": None})
    settings = model.checked_settings((0.5,) * 3, (0.25,) * 3)
    assert settings["method_options"] == {"temperature": 0.5} and settings["objective_options"] == {
        "equimod_weight": 1.0}
    older = {k: v for k, v in settings.items() if k != "objective_options"}
    older["method_options"] = {"temperature": 0.5, "equimod_weight": 1.0}
    (tmp_path / "run.json").write_text(json.dumps({"model": older}))
    check_run_settings(str(tmp_path), settings, write=True)
    with open(tmp_path / "run.json") as f:
        assert json.load(f)["model"] == settings
    other = dataclasses.replace(model, objective_options={"equimod_weight": 2.0})
    with pytest.raises(CheckpointMismatchError, match=r"--equimod_weight=1.0 there, 2.0 now"):
        check_run_settings(str(tmp_path), other.checked_settings((0.5,) * 3, (0.25,) * 3), write=True)
    (tmp_path / "run.json").write_text(json.dumps({"model": older}))  # the older file, refused alike
    with pytest.raises(CheckpointMismatchError, match=r"--equimod_weight=1.0 there, 2.0 now"):
        check_run_settings(str(tmp_path), other.checked_settings((0.5,) * 3, (0.25,) * 3), write=True)


@pytest.mark.slow
def test_a_vit_run_json_of_patch_size_0_is_compared_as_the_patch_it_was_built_with(tmp_path):
    """Before --patch_size=0 was resolved by the image size, run.json recorded the 0, which built the ViT size's own
    patch: a resume compares that patch with the one it resolves now."""
    (tmp_path / "run.json").write_text(json.dumps({"model": _checked(backbone="vit_pico", patch_size=0)}))
    check_run_settings(str(tmp_path), _checked(backbone="vit_pico", patch_size=8), write=False)  # vit_pico's own
    with pytest.raises(CheckpointMismatchError, match="--patch_size=8 there, 2 now"):
        check_run_settings(str(tmp_path), _checked(backbone="vit_pico", patch_size=2), write=False)


def test_a_resume_with_another_embedding_width_stops_at_the_flag_not_at_a_variable_shape(tmp_path):
    cfg = tiny_run(str(tmp_path), condition=("crop",), condition_width=8, condition_depth=2, max_steps=1,
                   export=False)
    train(cfg)
    with pytest.raises(CheckpointMismatchError, match="--condition_width=8 there, 16 now"):
        train(replace_config(cfg, condition_width=16, max_steps=2))


def test_per_task_weights_weigh_each_augself_loss():
    """--augself=crop:1.0,color:0.5: total = L_method + 1.0·L_crop + 0.5·L_color; a bare name takes λ."""
    cfg = ModelConfig(method="none", augself=parse_augself_tasks("crop:1.0,color:0.5,flip"), augself_weight=2.0)
    assert cfg.task_weights() == {"crop": 1.0, "color": 0.5, "flip": 2.0}
    model = make_model("none", augself=cfg.task_weights())
    losses = model.compute_losses(batch(), training=False)
    logs = {k: float(v) for k, v in losses.logs.items()}
    expected = logs["augself/crop_loss"] + 0.5 * logs["augself/color_loss"] + 2.0 * logs["augself/flip_loss"]
    assert float(losses.total) == pytest.approx(expected, rel=1e-6)
    assert logs["loss/augself"] == pytest.approx(
        logs["augself/crop_loss"] + logs["augself/color_loss"] + logs["augself/flip_loss"], rel=1e-6)


def test_keys_do_not_depend_on_creation_order():
    a = model_variables_by_key(make_model("byol", augself=("crop", "color"), seed=1))
    b = model_variables_by_key(make_model("byol", augself=("crop", "color"), seed=2))
    assert list(a) == list(b)


@pytest.mark.slow
def test_a_resume_with_the_batch_doubled_reuses_the_queue_size_the_run_derived(tmp_path):
    """MoCo derives its queue from the batch (2992 keys at batch 16 on shapes' 5000 images, 2976 at 32): the
    resume reuses the recorded size; setting --queue_size to another value is refused naming the flag."""
    options = {"projector_hidden": 32, "projector_dim": 16}  # --queue_size unset: derived
    cfg = tiny_run(str(tmp_path), method_options=options, max_steps=2, checkpoint_every=2, export=False)
    train(cfg)
    with open(tmp_path / "run.json") as f:
        recorded = json.load(f)
    assert recorded["derived"] == {"queue_size": 2992} and "queue_size" not in recorded["model"]["method_options"]
    resumed = train(replace_config(cfg, batch_size=32, max_steps=4))
    assert resumed.steps == 4 and resumed.model.queue.shape == (2992, 16)
    with pytest.raises(CheckpointMismatchError, match=r"--queue_size=2992 there \(derived from its batch and "
                                                      r"data\), 64 now") as err:
        train(replace_config(cfg, method_options={**options, "queue_size": 64}, max_steps=6))
    assert "\n" not in str(err.value)
    train(replace_config(cfg, method_options={**options, "queue_size": 2992}, max_steps=5))  # the same value: fine
