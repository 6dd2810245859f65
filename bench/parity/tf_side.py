"""The TF side of the parity harness: our model and optimizer built as ``augself_tf.training.loop.train``
builds them, the two batches of views + ω from our pipeline, and our two steps recorded (losses, gradients,
state after each step) in the reference's names and layouts."""

from __future__ import annotations

import argparse
import glob
import os

import keras
import numpy as np
import tensorflow as tf

from augself_tf.augment import AugmentConfig
from augself_tf.data.pretrain import example_seed, two_views
from augself_tf.methods import build_method
from augself_tf.models import resnet as tf_resnet
from augself_tf.training import optim as tf_optim
from bench.parity import reference_torch as ref
from bench.parity.weight_map import to_torch_layout

AUGSELF = ("crop", "color")

# ------------------------------------------------------------------------------------------------ data


def make_batches(data_dir: str, batch_size: int, image_size: int, seed: int) -> list[dict]:
    """Two batches of {view1, view2 [B,S,S,3] in [0,1], omega1, omega2} from our pipeline, as NumPy."""
    files = sorted(glob.glob(os.path.join(data_dir, "**", "*.JPEG"), recursive=True))
    files += sorted(glob.glob(os.path.join(data_dir, "**", "*.jpg"), recursive=True))
    need = 2 * batch_size
    if len(files) >= need:
        images = [tf.io.decode_jpeg(tf.io.read_file(f), channels=3) for f in files[:need]]
        source = f"{need} images of {data_dir}"
    else:  # no real data beside the checkout: uniform noise images (both sides still get the same views)
        rng = np.random.default_rng(seed)
        images = [tf.constant(rng.integers(0, 256, [64, 64, 3], dtype=np.uint8)) for _ in range(need)]
        source = "uniform noise images (no data found)"
    config = AugmentConfig(image_size=image_size)
    batches = []
    for b in range(2):
        examples = [two_views({"image": images[b * batch_size + i]},
                              example_seed(seed, tf.constant(0), tf.constant(b * batch_size + i)), config)
                    for i in range(batch_size)]
        batch = {k: np.stack([e[k].numpy() for e in examples]) for k in ("view1", "view2")}
        for k in ("omega1", "omega2"):
            batch[k] = {name: np.stack([e[k][name].numpy() for e in examples]) for name in examples[0][k]}
        batches.append(batch)
    print(f"# views: our pipeline (two_views, {image_size} px) on {source}", flush=True)
    return batches


# ------------------------------------------------------------------------------------------------ TF side


def build_tf_backbone(name: str, width: float) -> keras.Model:
    """``build_backbone`` normalising its [0, 1] input with STL10's constants (the paper's STL10 setting)."""
    return tf_resnet.build_backbone(name, width, synchronized_bn=False, input_mean=ref.STL10_MEAN,
                                    input_std=ref.STL10_STD)


def method_options(method: str, feature_dim: int, args: argparse.Namespace) -> dict:
    """The paper's STL10 head sizes (MoCo's hidden layer = the backbone's feature size, as the reference)."""
    if method == "simsiam":
        return {"projector_layers": 2, "projector_dim": 2048, "predictor_hidden": 512}
    if method == "moco":
        return {"projector_hidden": feature_dim, "projector_dim": 128, "temperature": 0.2,
                "key_momentum": args.key_momentum, "queue_size": args.queue_size}
    return {"projector_hidden": 4096, "projector_dim": 256, "predictor_hidden": 4096,
            "target_momentum": args.tau, "total_steps": args.total_steps}


def build_tf(method: str, args: argparse.Namespace):
    """Our model and optimizer, built as ``augself_tf.training.loop.train`` builds them."""
    keras.utils.set_random_seed(args.seed)
    backbone = build_tf_backbone(args.backbone, args.width)
    options = method_options(method, int(backbone.output_shape[-1]), args)
    model = build_method(method, backbone, options=options, augself=AUGSELF, augself_weight=1.0,
                         synchronized_bn=False)
    model.build_all(args.image_size)
    # lr₀ = args.lr: the linear scaling rule at batch 256 is the identity.
    optimizer = tf_optim.build_optimizer(args.lr, 256, args.total_steps, weight_decay=args.wd,
                                         constant_lr_variables=model.constant_lr_variables())
    model.compile(optimizer=optimizer)
    optimizer.build(model.optimized_variables())
    return model, options



# ------------------------------------------------------------------------------------------------ records


def tf_state(model, entries) -> dict[str, np.ndarray]:
    state = {n: to_torch_layout(v.numpy(), layout).copy() for n, v, layout in entries}
    if hasattr(model, "queue"):
        state["queue"] = np.array(model.queue.numpy())
    return state


def run_tf(model, entries, batches: list[dict]) -> dict:
    """Losses, gradients and the state after each of the two steps, in torch names and layouts."""
    by_id = {id(v): n for n, v, _ in entries}
    variables = model.optimized_variables()

    @tf.function
    def losses_and_grads(batch):
        with tf.GradientTape() as tape:
            total, logs, _ = model.compute_losses(batch, training=True)
        return logs, tape.gradient(total, variables)

    step = tf.function(model.train_step)
    record = {"state0": tf_state(model, entries), "lr": []}
    for k, batch in enumerate(batches, start=1):
        tf_batch = tf.nest.map_structure(tf.constant, batch)
        snapshot = [v.numpy() for v in model.variables]
        logs, grads = losses_and_grads(tf_batch)
        for v, s in zip(model.variables, snapshot, strict=True):  # undo the BN statistics of that pass
            v.assign(s)
        record["lr"].append(float(model.optimizer.learning_rate.numpy()))
        step(tf_batch)
        loss = {"method": float(logs["loss/method"]), **{a: float(logs[f"augself/{a}_loss"]) for a in AUGSELF}}
        if model.method_name == "byol":
            loss["method"] -= 4.0  # ours is Σ(2 − 2cos); the reference's −2Σcos: the same up to this constant
        layouts = {n: layout for n, _, layout in entries}
        record[f"loss{k}"] = loss
        record[f"grad{k}"] = {by_id[id(v)]: to_torch_layout(g.numpy(), layouts[by_id[id(v)]])
                              for v, g in zip(variables, grads, strict=True) if g is not None}
        record[f"state{k}"] = tf_state(model, entries)
    return record
