"""The reference's methods: SimSiam, MoCo v2 and BYOL with AugSelf{crop, color} heads, each one training step
(views normalised as the reference's last transform, AugSelf targets from ω, losses, optimizers, EMA)."""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.parity.reference_torch.augself import augself_loss, augself_targets
from bench.parity.reference_torch.bugs import Bugs
from bench.parity.reference_torch.layers import ResNet, load_mlp
from bench.parity.reference_torch.optimizer import SGD

#: STL10's normalisation constants in the reference code (datasets.py), the paper's STL10 setting.
STL10_MEAN = (0.43, 0.42, 0.39)
STL10_STD = (0.27, 0.26, 0.27)



def normalise(views: np.ndarray, bugs: Bugs, mean=STL10_MEAN, std=STL10_STD) -> torch.Tensor:
    """NHWC views in [0, 1] → NCHW, normalised with mean/std (``T.Normalize``, the reference's last transform)."""
    x = torch.as_tensor(np.ascontiguousarray(views.transpose(0, 3, 1, 2)), dtype=torch.float32)
    if bugs("no_normalisation"):
        return x
    return (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a, b, dim=-1).mean()


class ReferenceMethod(nn.Module):
    """Backbone + method heads + AugSelf heads{crop, color} + the reference's optimizers.

    ``step(batch, lr, tau)`` runs one training step; it returns the losses and the gradients (before the
    optimizer adds weight decay, as ``.grad`` holds them) of every optimized parameter by name.
    """

    name = "none"

    def __init__(self, backbone: ResNet, feature_dim: int, bugs: Bugs) -> None:
        super().__init__()
        self.bugs = bugs
        self.backbone = backbone
        self.heads = nn.ModuleDict({n: load_mlp(2 * feature_dim, 512, 4, num_layers=3, last_bn=False)
                                    for n in ("crop", "color")})

    # The reference's optimizers: [(params, scheduled?)]
    def param_groups(self) -> list[tuple[list[nn.Parameter], bool]]:
        raise NotImplementedError

    def make_optimizers(self, lr: float, weight_decay: float, momentum: float = 0.9) -> None:
        self.optimizers = [(SGD(params, lr, momentum, weight_decay, self.bugs), scheduled)
                           for params, scheduled in self.param_groups()]

    def forward_losses(self, x1, x2, d1, d2) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def after_step(self, tau: float, aux: dict) -> None:
        del tau, aux

    def step(self, batch: dict, lr: float, base_lr: float, tau: float = 0.0) -> tuple[dict, dict]:
        self.train()
        for opt, scheduled in self.optimizers:
            opt.zero_grad()
            opt.set_lr(lr if (scheduled or self.bugs("predictor_scheduled_lr")) else base_lr)
        x1, x2 = normalise(batch["view1"], self.bugs), normalise(batch["view2"], self.bugs)
        d1, d2 = augself_targets(batch["omega1"], batch["omega2"], self.bugs)
        loss, outputs, aux = self.forward_losses(x1, x2, d1, d2)
        ss = augself_loss(self.heads, outputs["y1"], outputs["y2"], d1, d2, self.bugs)
        (loss + ss["total"]).backward()
        grads = {n: p.grad.detach().clone() for n, p in self.named_parameters() if p.grad is not None}
        for opt, _ in self.optimizers:
            opt.step()
        self.after_step(tau, aux)
        losses = {"method": float(loss.detach()), **{k: float(v.detach()) for k, v in ss.items() if k != "total"}}
        return losses, grads


class SimSiam(ReferenceMethod):
    """``trainers.simsiam`` + ``pretrain.simsiam``: predictor in its own, unscheduled optimizer."""

    name = "simsiam"

    def __init__(self, backbone, feature_dim, bugs, *, projector_dim: int, predictor_hidden: int,
                 projector_layers: int = 2) -> None:
        super().__init__(backbone, feature_dim, bugs)
        self.projector = load_mlp(feature_dim, projector_dim, projector_dim, projector_layers, last_bn=True)
        self.predictor = load_mlp(projector_dim, predictor_hidden, projector_dim, 2, last_bn=False)

    def param_groups(self):
        heads = [p for h in self.heads.values() for p in h.parameters()]
        return [([*self.backbone.parameters(), *self.projector.parameters(), *heads], True),
                (list(self.predictor.parameters()), False)]

    def forward_losses(self, x1, x2, d1, d2):
        y1, y2 = self.backbone(x1), self.backbone(x2)
        z1, z2 = self.projector(y1), self.projector(y2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        loss = (-_cos(p1, z2.detach()) - _cos(p2, z1.detach())) * 0.5
        return loss, {"y1": y1, "y2": y2}, {}


class _Momentum(ReferenceMethod):
    """A method with an EMA copy of backbone + projector (``deepcopy``, ``requires_grad=False``)."""

    def make_target(self) -> None:
        self.target_backbone = copy.deepcopy(self.backbone)
        self.target_projector = copy.deepcopy(self.projector)
        for p in [*self.target_backbone.parameters(), *self.target_projector.parameters()]:
            p.requires_grad = False

    @torch.no_grad()
    def ema(self, m: float) -> None:
        """``p2.data.mul_(m).add_(p1.data, alpha=1-m)`` over the parameters (not the BN buffers)."""
        for online, target in [(self.backbone, self.target_backbone), (self.projector, self.target_projector)]:
            for p1, p2 in zip(online.parameters(), target.parameters(), strict=True):
                m_ = 1 - m if self.bugs("ema_swapped") else m  # bug: the weights swapped
                p2.data.mul_(m_).add_(p1.data, alpha=1 - m_)


class MoCo(_Momentum):
    """``trainers.moco`` + ``pretrain.moco``, with the standard key queue (see the module docstring)."""

    name = "moco"

    def __init__(self, backbone, feature_dim, bugs, *, projector_hidden: int, projector_dim: int,
                 queue: np.ndarray, temperature: float = 0.2, key_momentum: float = 0.999) -> None:
        super().__init__(backbone, feature_dim, bugs)
        self.projector = load_mlp(feature_dim, projector_hidden, projector_dim, 2, last_bn=False)
        self.make_target()
        self.queue = torch.as_tensor(queue.copy())
        self.ptr = 0
        self.temperature, self.key_momentum = temperature, key_momentum

    def param_groups(self):
        heads = [p for h in self.heads.values() for p in h.parameters()]
        return [([*self.backbone.parameters(), *self.projector.parameters(), *heads], True)]

    def forward_losses(self, x1, x2, d1, d2):
        y1 = self.backbone(x1)
        z1 = F.normalize(self.projector(y1))
        with torch.no_grad():
            y2 = self.target_backbone(x2)
            z2 = F.normalize(self.target_projector(y2))
        l_pos = torch.einsum("nc,nc->n", z1, z2).unsqueeze(-1)
        l_neg = torch.einsum("nc,kc->nk", z1, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], 1).div(self.temperature)
        loss = F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long))
        return loss, {"y1": y1, "y2": y2}, {"keys": z1.detach() if self.bugs("query_enqueue") else z2}

    def after_step(self, tau, aux):
        self.ema(self.key_momentum)
        keys = aux["keys"]
        n = keys.shape[0]
        idx = (self.ptr + torch.arange(n)) % self.queue.shape[0]
        self.queue[idx] = keys
        self.ptr = (self.ptr + n) % self.queue.shape[0]


class BYOL(_Momentum):
    """``trainers.byol`` + ``pretrain.byol``: one scheduled optimizer over everything; τ from the caller."""

    name = "byol"

    def __init__(self, backbone, feature_dim, bugs, *, projector_hidden: int, projector_dim: int,
                 predictor_hidden: int) -> None:
        super().__init__(backbone, feature_dim, bugs)
        self.projector = load_mlp(feature_dim, projector_hidden, projector_dim, 2, last_bn=False)
        self.predictor = load_mlp(projector_dim, predictor_hidden, projector_dim, 2, last_bn=False)
        self.make_target()

    def param_groups(self):
        heads = [p for h in self.heads.values() for p in h.parameters()]
        return [([*self.backbone.parameters(), *self.projector.parameters(), *heads,
                  *self.predictor.parameters()], True)]

    def forward_losses(self, x1, x2, d1, d2):
        y1, y2 = self.backbone(x1), self.backbone(x2)
        z1, z2 = self.projector(y1), self.projector(y2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        with torch.no_grad():
            tgt1 = self.target_projector(self.target_backbone(x1))
            tgt2 = self.target_projector(self.target_backbone(x2))
        loss = (-_cos(p1, tgt2.detach()) - _cos(p2, tgt1.detach())) * 2
        return loss, {"y1": y1, "y2": y2}, {}

    def after_step(self, tau, aux):
        self.ema(tau)
