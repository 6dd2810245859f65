"""The arms of the main reproduction (``--suite=main``): SimSiam and MoCo v2 ± AugSelf over seeds, and the
ω-conditioned projector.

A second arm set, the paper's LooC table, is in reproduce/looc_arms.py; what an arm is, in reproduce/arm_settings.py.
"""

from __future__ import annotations

import dataclasses

from reproduce.arm_settings import (
    DEFAULT_SET,
    FLOOR_SEEDS,
    MOCO_QUEUE,
    MONITOR_FLAGS,
    QUICK_BUDGET,
    QUICK_MONITOR_FLAGS,
    TINY_BUDGET,
    Arm,
    Budget,
    EvalCall,
    floor_arm,
)

SHAPES_BUDGET = Budget(epochs=10, width=0.125, image_size=32, batch_size=256, backbone="resnet18_cifar")

TINY_EVALS = (
    EvalCall("flowers17", "linear", "flowers17", 64),
    EvalCall("cifar10", "linear", "cifar10-mini", 64),
    EvalCall("tiny_probes", "colorperm,rotation,localization,invariance", "tiny-imagenet-mini", 64),
    # The held-out part of tiny-imagenet-mini has 10 images per class: 5 queries leave room for 5 shots.
    EvalCall("tiny_fewshot", "fewshot", "tiny-imagenet-mini", 64, ("--fewshot_queries=5", "--fewshot_episodes=2000")),
)
SHAPES_EVALS = (
    EvalCall("shapes", "linear,localization,colorperm", "shapes", 32),
    EvalCall("shapes_color", "linear", "shapes", 32, ("--label_key=color",)),
)
QUICK_EVALS = (EvalCall("shapes", "linear,colorperm", "shapes", 32, ("--max_examples=200",)),)


def _arm(data: str, method: str, augself: str, condition: str, seed: int, budget: Budget,
         evals: tuple[EvalCall, ...], monitor_flags: tuple[tuple[str, str], ...], queue: int) -> Arm:
    flags = (("queue_size", str(queue)),) if method == "moco" else ()
    return Arm(data, method, augself, condition, seed, budget, evals, flags + monitor_flags)


def default_arms(epochs: int | None = None, width: float | None = None) -> list[Arm]:
    """The arms of the main reproduction, cheapest and most informative first (the never-trained floors, then each
    seed's pair before the next seed).

    ``epochs`` / ``width`` replace the tiny-imagenet budget's (new settings, so new ids and entries).
    """
    tiny = dataclasses.replace(TINY_BUDGET, **{k: v for k, v in (("epochs", epochs), ("width", width)) if v})
    floors = [floor_arm(_arm(data, "simsiam", "none", "none", seed, budget, evals, (), MOCO_QUEUE))
              for data, budget, evals in (("tiny", tiny, TINY_EVALS), ("shapes", SHAPES_BUDGET, SHAPES_EVALS))
              for seed in FLOOR_SEEDS]
    arms = floors + [_arm("shapes", "moco", a, "none", 0, SHAPES_BUDGET, SHAPES_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
                     for a in ("none", DEFAULT_SET)]
    pairs = [("simsiam", 0), ("moco", 0), ("simsiam", 1), ("simsiam", 2)]
    for method, seed in pairs:
        arms += [_arm("tiny", method, a, "none", seed, tiny, TINY_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
                 for a in ("none", DEFAULT_SET)]
    # The ω-conditioned projector (CASSLE) in AugSelf's place.
    arms += [_arm("tiny", m, "none", DEFAULT_SET, 0, tiny, TINY_EVALS, MONITOR_FLAGS, MOCO_QUEUE)
             for m in ("simsiam", "moco")]
    return arms


def quick_arms() -> list[Arm]:
    """The smoke version: MoCo ± AugSelf on `shapes`, 2 steps at width 1/16, one small evaluation."""
    return [_arm("shapes", "moco", a, "none", 0, QUICK_BUDGET, QUICK_EVALS, QUICK_MONITOR_FLAGS, 64)
            for a in ("none", DEFAULT_SET)]

