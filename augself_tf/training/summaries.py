"""TensorBoard output: scalars per term, a few augmented views with their ω, and the run description."""

from __future__ import annotations

import tensorflow as tf

from augself_tf.methods.model_config import augself_text
from augself_tf.models.backbones import is_vit
from augself_tf.objectives import enabled_objectives


def make_writer(logdir: str | None) -> tf.summary.SummaryWriter | None:
    """A summary writer, or None on workers that do not write."""
    return tf.summary.create_file_writer(logdir) if logdir else None


def write_scalars(writer: tf.summary.SummaryWriter | None, logs: dict, step: int) -> None:
    """Writes every logged scalar (loss terms, λ-weighted total, lr, ω errors, pairs/s)."""
    if writer is None:
        return
    with writer.as_default(step=step):
        for name, value in logs.items():
            tf.summary.scalar(name, value)


def _omega_text(omega: dict, i: int) -> str:
    parts = []
    for name in sorted(omega):
        vals = ", ".join(f"{float(x):.3f}" for x in tf.reshape(omega[name][i], [-1]).numpy())
        parts.append(f"{name}=({vals})")
    return " ".join(parts)


def write_views(writer: tf.summary.SummaryWriter | None, batch: dict, step: int, count: int = 4) -> None:
    """Logs the first `count` pairs of views side by side, with both ω as text."""
    if writer is None:
        return
    n = min(count, int(batch["view1"].shape[0]))
    pairs = tf.concat([batch["view1"][:n], batch["view2"][:n]], axis=2)
    rows = [f"| {i} | {_omega_text(batch['omega1'], i)} | {_omega_text(batch['omega2'], i)} |" for i in range(n)]
    table = "| pair | ω view 1 | ω view 2 |\n|---|---|---|\n" + "\n".join(rows)
    with writer.as_default(step=step):
        tf.summary.image("views/pairs (left: view 1, right: view 2)", tf.clip_by_value(pairs, 0.0, 1.0), max_outputs=n)
        tf.summary.text("views/omega", table)


_WHERE = {"host": "in the tf.data pipeline", "device": "batched in the training step, uint8 views"}


def _decay(cfg) -> str:
    """The optimizer and its weight decay, as the run applies them."""
    clip = f", gradients clipped at {cfg.clip_grad} per variable" if cfg.clip_grad else ""
    if cfg.optimizer == "sgd":
        return f"coupled L2 {cfg.weight_decay}{clip}"
    end = "" if cfg.weight_decay_end is None else f" to {cfg.weight_decay_end} (cosine)"
    return f"{cfg.optimizer}, weight decay {cfg.weight_decay}{end}{clip}"


def describe_run(
    cfg, replicas: int, num_examples: int, steps_per_epoch: int, total_steps: int,
    input_statistics: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> str:
    """One paragraph a user reads before a long run starts, from its resolved settings (a ViT's ``patch_size``,
    ``photometric``, ``steps_per_execution``: `augself_tf.training.run_start.prepare`)."""
    model = cfg.model
    aug = augself_text(model.augself) if model.augself else "off"
    condition = (f" + conditioned projector[{','.join(model.condition)}] (MLP {model.condition_depth}×"
                 f"{model.condition_width}, {model.condition_kind}, {model.condition_descriptor} descriptors"
                 f"{', predictor too' if model.condition_predictor else ''})" if model.condition else "")
    condition += "".join(f" + {o.__name__}(λ={model.objective_options[o.weight_option]:g})"
                         for o in enabled_objectives(model.objective_options))
    norm = ""
    if input_statistics is not None:
        mean, std = (",".join(f"{v:g}" for v in t) for t in input_statistics)
        norm = f"  input normalised with mean {mean}, std {std} (--input_mean, --input_std)\n"
    # A ViT by its patch (resolved when the run started; its width is its name's), a ResNet by its width.
    backbone = (f"{model.backbone} patch {model.patch_size}" if is_vit(model.backbone)
                else f"{model.backbone} width {model.width}")
    return (
        f"Pretraining {model.method} + AugSelf[{aug}] (λ={model.augself_weight}){condition} on {cfg.dataset}:"
        f"{cfg.split} ({num_examples} images), {backbone} at {cfg.augment.image_size} px\n"
        f"  photometric augmentations: {cfg.photometric} ({_WHERE[cfg.photometric]})\n{norm}"
        f"  global batch {cfg.batch_size} on {replicas} replica(s), {steps_per_epoch} steps/epoch, "
        f"{total_steps} steps ({cfg.steps_per_execution} per call), lr {cfg.lr}×batch/256, {_decay(cfg)}\n"
        f"  model_dir {cfg.model_dir}"
    )
