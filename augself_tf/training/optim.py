"""SGD with momentum 0.9 on a cosine schedule without restarts, the paper's recipe.

Weight decay is NOT set on the Keras optimizer: Keras' `weight_decay` is decoupled (AdamW-style), while the
paper's numbers come from PyTorch SGD's coupled L2 (gradient += wd·θ). `AugSelfModel.train_step` adds the
coupled term to the gradients itself.
"""

from __future__ import annotations

import keras


def scaled_learning_rate(base_lr: float, global_batch_size: int) -> float:
    """The linear scaling rule lr = base_lr · batch / 256 used by SimSiam, MoCo and the paper."""
    return base_lr * global_batch_size / 256.0


def build_optimizer(
    base_lr: float,
    global_batch_size: int,
    total_steps: int,
    momentum: float = 0.9,
    mixed_precision: str | None = None,
) -> keras.optimizers.Optimizer:
    """SGD(momentum) with cosine decay over `total_steps` from the batch-scaled learning rate."""
    lr = scaled_learning_rate(base_lr, global_batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(lr, decay_steps=max(1, total_steps))
    optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=momentum)
    if mixed_precision == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
