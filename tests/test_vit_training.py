"""Training on a ViT: AugSelf's heads on the class tokens, with CASSLE's conditioned projectors and EquiMod; what does
not compose, refused in one line; MoCo v3 + AugSelf on a ViT under AdamW on 2 replicas resuming bit-exactly after
kill -9 and its export evaluated (the slow tier)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import eager_steps
from kill_resume import ROOT, assert_bit_identical, kill_9_then_resume
from test_objectives_equimod import eq_batch

from augself_tf.methods import build_method, view_plan
from augself_tf.methods.model_config import ModelConfig
from augself_tf.models import vit
from augself_tf.models.vit import ViTSize, build_vit, default_patch_size
from augself_tf.objectives.conditioning import Conditioning
from augself_tf.training.optim import build_optimizer
from augself_tf.training.train_config import config_from_flags, define_train_flags, resolve_patch_size

S = 8


@pytest.fixture
def tiny_vit(monkeypatch):
    monkeypatch.setitem(vit.VIT_SIZES, "vit_test", ViTSize(8, 2, 2, 4))
    keras.utils.set_random_seed(2)
    return build_vit("vit_test", image_size=S, frozen_patch_projection=True, drop_path=0.2)


def test_augself_cassle_and_equimod_train_on_the_class_tokens(tiny_vit):
    model = build_method("mocov3", tiny_vit, options={"projector_hidden": 16, "projector_dim": 8,
                                                      "predictor_hidden": 12, "total_steps": 4},
                         objective_options={"equimod_weight": 1.0, "equimod_hidden": 8, "equimod_dim": 4},
                         augself={"crop": 1.0, "color": 0.5}, conditioning=Conditioning.create(("crop", "color")))
    model.build_all(S)
    # Each AugSelf head reads [f1, f2], the two views' class tokens (CASSLE's models.py): 2 x the ViT's width.
    assert {name: int(head.layers[0].kernel.shape[0]) for name, head in model.augself_heads.items()} == \
        {"crop": 16, "color": 16}
    model.compile(optimizer=build_optimizer(1e-3, 256, 4, optimizer="adamw", weight_decay=0.1))
    model.optimizer.build(model.optimized_variables())
    patch = {v.path: v.numpy() for v in tiny_vit.weights if v.path.startswith("patch_embed/")}
    blocks = {v.path: v.numpy() for v in tiny_vit.trainable_weights}
    logs = eager_steps(model, [eq_batch(s, n=6) for s in range(2)])
    assert all(np.isfinite(step[k]) for step in logs for k in ("loss/total", "loss/augself", "equimod/loss"))
    assert logs[0]["loss/augself"] > 0 and logs[0]["equimod/loss"] > 0
    for v in tiny_vit.weights:  # --stop_grad_conv1: the projection never moves; the blocks do
        if v.path in patch:
            np.testing.assert_array_equal(v.numpy(), patch[v.path])
    assert max(float(np.abs(v.numpy() - blocks[v.path]).max()) for v in tiny_vit.trainable_weights) > 0


def _mocov3_on_a_vit(image_size: int, strategy: tf.distribute.Strategy | None = None):
    """MoCo v3 + AugSelf{crop, color} on a 2-block ViT of width 8 (patch 4), under AdamW with DINO's extras."""
    vit.VIT_SIZES["vit_test"] = ViTSize(8, 2, 2, 4)
    try:
        with strategy.scope() if strategy else contextlib.nullcontext():
            keras.utils.set_random_seed(3)
            backbone = build_vit("vit_test", image_size=image_size, drop_path=0.1, frozen_patch_projection=True)
            model = build_method("mocov3", backbone, options={"projector_hidden": 16, "projector_dim": 8,
                                                              "predictor_hidden": 12, "total_steps": 4},
                                 augself={"crop": 1.0, "color": 1.0})
            model.build_all(image_size)
            model.compile(optimizer=build_optimizer(1e-3, 256, 4, optimizer="adamw", weight_decay=0.05,
                                                    weight_decay_end=0.1, clip_grad=1.0))
            model.optimizer.build(model.optimized_variables())
    finally:
        del vit.VIT_SIZES["vit_test"]
    return model


@pytest.mark.slow
def test_the_vit_replica_step_compiles_to_hlo_of_static_shapes():
    """What --jit_compile compiles on each replica (one device here: XLA compiles no collective on CPU), with the
    device stage in it: no dynamic dimension (the position embedding's interpolation included), and it runs
    (85 s of XLA compilation on the loaded 2-core machine: the slow tier)."""
    from test_accelerator_path import _device_stage_batch_of, _dynamic

    from augself_tf.methods.mocov3 import ASYMMETRIC_VIEWS

    b = _device_stage_batch_of(ASYMMETRIC_VIEWS)
    assert b["view1"].dtype == tf.uint8 and b["view1"].shape[1] == 16
    model = _mocov3_on_a_vit(12)  # built for 12 px (3 x 3 patches): the 16-px views interpolate the embedding
    step = tf.function(model.train_step, jit_compile=True)
    hlo = step.experimental_get_compiler_ir(b)(stage="hlo")
    dynamic = _dynamic(hlo)
    assert "ENTRY" in hlo and not dynamic, f"{len(dynamic)} dynamic shapes, e.g. {dynamic[:1]}"
    logs = step(b)
    assert np.isfinite(float(logs["loss/total"])) and int(model.optimizer.iterations.numpy()) == 1


@pytest.mark.usefixtures("production_graph_optimizer")
def test_the_vit_accelerator_step_holds_no_host_memory_op():
    """The step a GPU traces (OneDeviceStrategy of a GPU, `--photometric=device`) holds no op that passes through
    host memory (runtime/host_ops.py), as tests/test_host_ops.py checks the ResNet methods'."""
    from test_host_ops import _device_batch_spec, _gpu_strategy

    from augself_tf.augment import AugmentConfig
    from augself_tf.runtime.host_ops import host_memory_ops

    strategy = _gpu_strategy(1)
    model = _mocov3_on_a_vit(8, strategy)
    model.augment_config = AugmentConfig(image_size=8)

    @tf.function
    def step(b):
        return strategy.run(model.train_step, args=(b,))

    graph = step.get_concrete_function(_device_batch_spec()).graph.as_graph_def()
    assert host_memory_ops(graph) == []


def _parse(argv: list[str]):
    from absl import flags as absl_flags

    values = absl_flags.FlagValues()
    define_train_flags(values, "augself-train")
    values(["augself-train", *argv])
    return config_from_flags(values)


def test_what_does_not_compose_is_one_line(tiny_vit):
    with pytest.raises(ValueError, match=r"^--patch_size, --stop_grad_conv1 set for backbone resnet18: only a ViT "
                                         r"backbone reads it$"):
        _parse(["--backbone=resnet18", "--patch_size=8", "--stop_grad_conv1"])
    with pytest.raises(ValueError, match=r"^--stl_weight does not compose with --method=mocov3"):
        build_method("mocov3", tiny_vit, objective_options={"stl_weight": 1.0})
    cfg = _parse(["--backbone=vit_pico", "--method=mocov3", "--optimizer=lars", "--clip_grad=3"])
    assert (cfg.model.backbone, cfg.optimizer, cfg.clip_grad) == ("vit_pico", "lars", 3.0)


def test_a_vit_refuses_another_width_naming_backbone():
    """--width is a ResNet's multiplier: a ViT's width is its size's, so another value is one line, not ignored."""
    with pytest.raises(ValueError, match=r"^--width=0.5 set for backbone vit_tiny: a ViT's width is its size's "
                                         r"\(.*vit_tiny 192.*\); choose it with --backbone and leave --width unset$"):
        _parse(["--backbone=vit_tiny", "--width=0.5"])
    assert _parse(["--backbone=vit_tiny"]).model.width == ModelConfig().width  # the default is no choice


@pytest.mark.parametrize("image_size,patch", [(16, 2), (32, 4), (64, 8), (96, 8), (160, 16), (224, 16), (512, 16)])
def test_patch_size_0_is_the_image_sizes_patch(image_size, patch):
    """The rule --patch_size's help states: the size's own patch where 8 fit a side, else the largest power of two
    that does (vit_pico's own is 8); a given patch is kept whatever the size."""
    cfg = resolve_patch_size(_parse(["--backbone=vit_tiny", f"--image_size={image_size}"]))
    assert cfg.model.patch_size == patch == default_patch_size("vit_tiny", image_size)
    assert image_size // patch >= 8 or patch == 1
    pico = resolve_patch_size(_parse(["--backbone=vit_pico", f"--image_size={image_size}"]))
    assert pico.model.patch_size == min(patch, 8)
    given = resolve_patch_size(_parse(["--backbone=vit_tiny", "--patch_size=16", "--image_size=224"]))
    assert given.model.patch_size == 16
    resnet = _parse(["--backbone=resnet18", f"--image_size={image_size}"])
    assert resolve_patch_size(resnet) is resnet and resnet.model.patch_for(image_size) == 0


def test_the_default_dino_vit_tiny_run_resolves_a_patch_its_local_crops_hold():
    """DINO's Done-when command at the default size (32 px): its 14-pixel local crops hold the resolved patch (4,
    an 8 x 8 grid of the global crop), where vit_tiny's own 16 did not."""
    argv = ["--method=dino", "--backbone=vit_tiny", "--local_crops=4", "--augself=crop,color"]
    cfg = resolve_patch_size(_parse(argv))
    plan = view_plan(cfg.model.method, cfg.model.method_options)
    sides = [spec.config_for(cfg.augment).image_size for spec in plan.views]
    assert (cfg.augment.image_size, cfg.model.patch_size, sides) == (32, 4, [32, 32, 14, 14, 14, 14])
    assert resolve_patch_size(cfg) == cfg  # resolved once: a second pass changes nothing
    assert _parse(argv).model.patch_for(32) == 4  # the model builds by the same rule (build_model without a run)
    # An explicit patch larger than a local crop: one line naming both sizes and what to choose.
    with pytest.raises(ValueError, match=r"^--patch_size=16 at --image_size=32 is larger than the run's 14-pixel "
                                         r"crops \(DINO's --local_crop_size, E-SSL's --essl_crop_size\): every view "
                                         r"must hold at least one patch; choose --patch_size=14 or less \(0: 4 at this "
                                         r"image size\) or larger crops$"):
        resolve_patch_size(_parse([*argv, "--patch_size=16"]))
    with pytest.raises(ValueError, match=r"^--patch_size=64 at --image_size=32 is larger than the run's 32-pixel "
                                         r"image: .* or larger --image_size$"):
        resolve_patch_size(_parse(["--backbone=vit_tiny", "--patch_size=64"]))


KILL_ARGS = ("--method=mocov3", "--backbone=vit_pico", "--patch_size=8", "--augself=crop,color", "--optimizer=adamw",
             "--weight_decay=0.05", "--weight_decay_end=0.1", "--clip_grad=1.0", "--drop_path=0.1", "--stop_grad_conv1",
             "--dataset=shapes", "--image_size=16", "--batch_size=16", "--max_steps=6", "--checkpoint_every=1",
             "--projector_hidden=32", "--projector_dim=16", "--predictor_hidden=32", "--monitor=none", "--lr=1e-3")


@pytest.mark.slow
def test_mocov3_vit_resumes_bit_exactly_after_kill_9_on_two_replicas_and_its_export_evaluates(tmp_path):
    """The issue's target command at toy size (vit_pico for vit_tiny, 16 px): the run killed after its step-2
    checkpoint and rerun ends on the uninterrupted run's bits (drop-path's seeds, AdamW's moments and the EMA
    included), and augself-eval reads its export."""
    full, resumed = kill_9_then_resume(tmp_path, KILL_ARGS, kill_after=2, steps=6)
    assert any("exp_avg" in k for k in full) and any("drop_path" in k and "seed" in k for k in full)
    assert_bit_identical(full, resumed)
    export = os.path.join(tmp_path, "killed", "saved_model")
    loaded = tf.saved_model.load(export)
    assert set(loaded.signatures) == {"serving_default", "patch_tokens"}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    results = tmp_path / "eval" / "results.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "eval_main.py"), f"--saved_model={export}",
                           "--protocol=linear", "--dataset=shapes", "--max_examples=60", "--image_size=24",
                           f"--output={results}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| linear | shapes |" in proc.stdout
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "eval_main.py"), f"--saved_model={export}",
                          "--signature=patch_tokens", "--protocol=linear", "--dataset=shapes", "--max_examples=60"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "expected [N, d] features" in bad.stderr
