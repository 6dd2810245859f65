"""The reference's optimizer (``torch.optim.SGD``, or the buggy alternatives) and its per-step schedules of
the lr and of BYOL's τ."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from bench.parity.reference_torch.bugs import Bugs


class SGD:
    """``torch.optim.SGD(params, lr, momentum, weight_decay)``, or with the ``keras_momentum`` /
    ``missing_wd`` bugs the alternatives; one instance per reference optimizer (param group)."""

    def __init__(self, params: list[nn.Parameter], lr: float, momentum: float, weight_decay: float,
                 bugs: Bugs) -> None:
        self.params = list(params)
        self.bugs = bugs
        wd = 0.0 if bugs("missing_wd") else weight_decay
        self.torch = torch.optim.SGD(self.params, lr=lr, momentum=momentum, weight_decay=wd)
        self.velocity = [torch.zeros_like(p) for p in self.params]
        self.momentum, self.weight_decay = momentum, wd

    def set_lr(self, lr: float) -> None:
        for group in self.torch.param_groups:
            group["lr"] = lr

    def zero_grad(self) -> None:
        self.torch.zero_grad(set_to_none=True)

    @torch.no_grad()
    def step(self) -> None:
        if not self.bugs("keras_momentum"):
            self.torch.step()
            return
        lr = self.torch.param_groups[0]["lr"]
        for p, v in zip(self.params, self.velocity, strict=True):
            if p.grad is not None:
                v.mul_(self.momentum).sub_(lr * (p.grad + self.weight_decay * p))  # bug: lr inside the buffer
                p.add_(v)


def cosine_lr(base_lr: float, step: int, total_steps: int) -> float:
    """lr of 0-based step k: base·(1 + cos(πk/K))/2 (``CosineAnnealingLR`` with η_min = 0, stepped per step)."""
    return base_lr * (1 + math.cos(math.pi * step / total_steps)) / 2


def cosine_tau(base: float, step: int, total_steps: int) -> float:
    """BYOL's τ_k = 1 − (1 − base)(cos(πk/K) + 1)/2 for the update after 0-based step k."""
    return 1 - (1 - base) * (math.cos(math.pi * step / total_steps) + 1) / 2
