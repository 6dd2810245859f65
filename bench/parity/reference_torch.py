"""The paper's training step in PyTorch, written from the semantics of its reference code (hankook/AugSelf).

What each piece transcribes (file:line of hankook/AugSelf at its last commit):
  - ``ResNet``: torchvision's ``resnet18(zero_init_residual=True)`` with ``fc = Identity`` (``models.py:22-31``):
    conv1 7×7/2 pad 3, BN, ReLU, max-pool 3/2 pad 1, four stages of two BasicBlocks (stride 2 on the first
    conv of stages 2-4 and on the 1×1 downsample), global average pooling. ``stem="cifar"`` is the reference's
    ``cifar_`` variant: conv1 3×3/1 pad 1, no max-pool. ``width`` scales every stage's channels as our
    ``build_backbone`` does (64·width at the stem), so that a CPU can run it.
  - ``load_mlp``: ``models.py:34-47`` (Linear without bias before every BN; a bias on the last Linear only
    when no BN follows it).
  - ``augself_loss``: ``SSObjective.__call__`` (``trainers.py:26-49``) with both orders stacked and
    ``F.mse_loss(tanh(p), d)`` for crop and colour.
  - ``augself_targets``: ``extract_diff`` (``transforms.py:137-147``) and ``_extract_w`` for colour
    (``transforms.py:111-119``), recomputed in NumPy from our ω after converting it to the reference's ω.
  - ``SimSiam``, ``MoCo``, ``BYOL``: ``trainers.simsiam / moco / byol`` and their optimizers in
    ``pretrain.py`` (SimSiam's predictor in a second, unscheduled SGD: a constant lr). Two deliberate
    departures, both DESIGN.md §4 defects the project does not copy: MoCo enqueues the momentum KEYS (the
    reference enqueues the online queries ``z1``), and BYOL's τ follows our per-step cosine schedule (the
    reference's is per epoch), which the caller passes in.

The numerics are PyTorch's own: ``nn.BatchNorm{1,2}d`` in training mode (batch statistics, running variance
updated with the UNBIASED batch variance, momentum 0.1, eps 1e-5), ``torch.optim.SGD(momentum=0.9,
weight_decay=wd)`` (coupled L2; the momentum buffer in gradient units: b ← μ·b + g + wd·w, w ← w − lr·b).

``BUGS`` lists deliberate one-line bugs, each guarded by ``if self.bug(...)`` at the one place it changes,
so that the harness can show it catches each (``parity.py --inject``).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

#: STL10's normalisation constants in the reference code (datasets.py), the paper's STL10 setting.
STL10_MEAN = (0.43, 0.42, 0.39)
STL10_STD = (0.27, 0.26, 0.27)

#: name -> (methods it applies to, what it does). Each is one changed line in this file.
BUGS: dict[str, tuple[tuple[str, ...], str]] = {
    "no_normalisation": (("simsiam", "moco", "byol"), "views enter the stem in [0, 1], not mean/std-normalised"),
    "biased_running_var": (("simsiam", "moco", "byol"), "BN running variance from the biased batch variance"),
    "bn_momentum": (("simsiam", "moco", "byol"), "BN running statistics with momentum 0.01 instead of 0.1"),
    "keras_momentum": (("simsiam", "moco", "byol"), "Keras SGD: v ← μ·v − lr·g, w ← w + v (lr inside the buffer)"),
    "missing_wd": (("simsiam", "moco", "byol"), "no coupled L2 weight decay"),
    "crop_target_sign": (("simsiam", "moco", "byol"), "crop target ω_diff(2,1) instead of ω_diff(1,2)"),
    "detached_augself": (("simsiam", "moco", "byol"), "AugSelf heads read detached backbone features"),
    "predictor_scheduled_lr": (("simsiam",), "SimSiam predictor follows the cosine schedule"),
    "ema_swapped": (("moco", "byol"), "EMA target ← (1−m)·target + m·online"),
    "query_enqueue": (("moco",), "MoCo enqueues the online queries (the reference code's defect)"),
}


class Bugs:
    """The set of injected bugs; ``bugs("name")`` is True when that bug is on."""

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        unknown = [n for n in names if n not in BUGS]
        if unknown:
            raise ValueError(f"unknown bug {unknown[0]!r}; choose from {', '.join(BUGS)}")
        self.names = frozenset(names)

    def __call__(self, name: str) -> bool:
        return name in self.names


# --------------------------------------------------------------------------------------------- layers


class _BatchNormMixin:
    """``nn.BatchNorm`` whose running-statistics update can carry the ``biased_running_var`` /
    ``bn_momentum`` bugs. Without them it IS ``nn.BatchNorm``'s forward (``F.batch_norm`` updates the
    running statistics with the unbiased variance itself)."""

    bugs: Bugs = Bugs()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bugs("bn_momentum"):
            self.momentum = 0.01
        if not (self.training and self.bugs("biased_running_var")):
            return super().forward(x)
        dims = [0, *range(2, x.dim())]
        with torch.no_grad():
            var = x.var(dims, unbiased=False)
            mean = x.mean(dims)
            self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
            self.running_var.mul_(1 - self.momentum).add_(var, alpha=self.momentum)  # bug: biased variance
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)


class BatchNorm2d(_BatchNormMixin, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` (momentum 0.1, eps 1e-5) with the BN bugs switchable."""


class BatchNorm1d(_BatchNormMixin, nn.BatchNorm1d):
    """``nn.BatchNorm1d`` (momentum 0.1, eps 1e-5) with the BN bugs switchable."""


def set_bugs(module: nn.Module, bugs: Bugs) -> None:
    """Gives every BN layer of ``module`` the injected bugs."""
    for m in module.modules():
        if isinstance(m, _BatchNormMixin):
            m.bugs = bugs


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: conv3x3(stride)-BN-ReLU-conv3x3-BN, + identity or 1×1(stride)-BN, ReLU."""

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = conv3x3(cin, planes, stride)
        self.bn1 = BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(conv1x1(cin, planes, stride), BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]) without ``fc``: pooled features [N, 8·base].

    Args:
      width: channel multiplier (base = round(64·width), as ``augself_tf.models.resnet.build_backbone``).
      stem: "imagenet" (7×7/2 + max-pool 3/2) or "cifar" (3×3/1, no max-pool: the reference's ``cifar_``).
    """

    def __init__(self, width: float = 1.0, stem: str = "imagenet") -> None:
        super().__init__()
        base = max(1, int(round(64 * width)))
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, base, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(3, base, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        cin = base
        for stage in range(4):
            planes = base * 2**stage
            stride = 1 if stage == 0 else 2
            blocks = [BasicBlock(cin, planes, stride), BasicBlock(planes, planes)]
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
            cin = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        # zero_init_residual=True; irrelevant here (the harness copies every weight in), kept for fidelity.
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.constant_(m.bn2.weight, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


class Kinks:
    """Near-kink units of the MLPs' ReLUs during one step, and which of them take the other side.

    A ReLU input within ``KINK`` × (the RMS of that input) of 0 lies where a float32 rounding difference
    between two implementations (~1e-6 relative here) can switch the unit on or off. Either side is as
    correct as the other, but the switch changes the unit's gradient for that example, and through the BN
    coupling of the batch every upstream gradient by ~1% (measured: one BYOL predictor unit at −3.4e-6
    made 1e-1 of the predictor's first-layer gradient). ``near`` lists the online MLP units found near a
    kink, as (module path, call number, flat index); units in ``flips`` take the other side of the kink.
    The backbone's ReLUs are not included: a unit there is one of B·H·W terms of each conv gradient.
    """

    KINK = 1e-5
    active: Kinks | None = None

    def __init__(self, flips: tuple = ()) -> None:
        self.flips = set(flips)
        self.near: list[tuple[str, int, int]] = []
        self.calls: dict[str, int] = {}

    def __enter__(self) -> Kinks:
        Kinks.active = self
        return self

    def __exit__(self, *exc) -> None:
        Kinks.active = None


class KinkReLU(nn.ReLU):
    """``nn.ReLU`` (the MLPs' ReLU) that reports near-kink inputs to the active ``Kinks`` and can flip them."""

    path = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kinks = Kinks.active
        if kinks is None or self.path.startswith("target_"):  # a target's units carry no gradient
            return super().forward(x)
        call = kinks.calls.get(self.path, 0)
        kinks.calls[self.path] = call + 1
        with torch.no_grad():
            flat = x.detach().reshape(-1)
            near = ((flat != 0) & (flat.abs() < Kinks.KINK * flat.pow(2).mean().sqrt())).nonzero()[:, 0]
        mask = (x > 0).to(x.dtype).reshape(-1).clone()
        for i in near.tolist():
            kinks.near.append((self.path, call, i))
            if (self.path, call, i) in kinks.flips:
                mask[i] = 1 - mask[i]
        return x * mask.reshape(x.shape)


def name_relus(net: nn.Module) -> None:
    """Gives every ``KinkReLU`` its module path (the key of ``Kinks``)."""
    for name, m in net.named_modules():
        if isinstance(m, KinkReLU):
            m.path = name


def load_mlp(n_in: int, n_hidden: int, n_out: int, num_layers: int = 3, last_bn: bool = True) -> nn.Sequential:
    """The reference's ``load_mlp``: (Linear(no bias)–BN–ReLU)×(L−1), Linear(bias iff not last_bn)[–BN]."""
    layers: list[nn.Module] = []
    for _ in range(num_layers - 1):
        layers += [nn.Linear(n_in, n_hidden, bias=False), BatchNorm1d(n_hidden), KinkReLU()]
        n_in = n_hidden
    layers.append(nn.Linear(n_hidden, n_out, bias=not last_bn))
    if last_bn:
        layers.append(BatchNorm1d(n_out))
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------- AugSelf


def reference_omega(omega: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our ω (DESIGN.md §2) rewritten in the reference code's conventions.

    crop: (i/H, j/W, h/H, w/W), the top-left corner and size (``RandomResizedCrop.forward``); ours is the
    centre (cy, cx) and size, so the corner is centre − size/2. flip: a bool. colour: (f − 1)/(hi − lo) per
    factor and h/(hi − lo) for the hue, 0 when jitter was not applied (``_extract_w``); ours is
    (f − lo)/(hi − lo), 0.5 when not applied, which for the symmetric ranges [1 − s, 1 + s] and [−s, s] is
    the reference's value + 0.5 in both cases.
    """
    crop = omega["crop"].astype(np.float64)
    corner = crop[:, :2] - crop[:, 2:] / 2
    return {
        "crop": np.concatenate([corner, crop[:, 2:]], 1),
        "flip": omega["flip"][:, 0] > 0.5,
        "color": omega["color"].astype(np.float64) - 0.5,
    }


def extract_diff(w1: dict[str, np.ndarray], w2: dict[str, np.ndarray], bugs: Bugs) -> dict[str, np.ndarray]:
    """``transforms.extract_diff(t1, t2, w1, w2)`` for crop and colour: ω_diff(1, 2), float32."""
    crop1, crop2, f1 = w1["crop"], w2["crop"], w1["flip"]
    center1 = crop1[:, :2] + crop1[:, 2:] / 2
    center2 = crop2[:, :2] + crop2[:, 2:] / 2
    center1[f1, 1] = 1 - center1[f1, 1]
    center2[f1, 1] = 1 - center2[f1, 1]  # both centres in view 1's displayed frame
    crop = np.concatenate([center1 - center2, crop1[:, 2:] - crop2[:, 2:]], 1)
    if bugs("crop_target_sign"):
        crop = -crop
    return {"crop": crop.astype(np.float32), "color": (w1["color"] - w2["color"]).astype(np.float32)}


def augself_targets(omega1: dict, omega2: dict, bugs: Bugs) -> tuple[dict, dict]:
    """(d1, d2) = (ω_diff(1,2), ω_diff(2,1)) as ``prepare_training_batch`` makes them."""
    r1, r2 = reference_omega(omega1), reference_omega(omega2)
    return extract_diff(r1, r2, bugs), extract_diff(r2, r1, bugs)


def augself_loss(heads: dict[str, nn.Module], y1: torch.Tensor, y2: torch.Tensor, d1: dict, d2: dict,
                 bugs: Bugs) -> dict[str, torch.Tensor]:
    """``SSObjective(crop=1, color=1)(heads, y1, y2, d1, d2, symmetric=True)``."""
    if bugs("detached_augself"):
        y1, y2 = y1.detach(), y2.detach()
    z = torch.cat([torch.cat([y1, y2], 1), torch.cat([y2, y1], 1)], 0)
    losses = {"total": torch.zeros(())}
    for name, head in heads.items():
        d = torch.cat([torch.as_tensor(d1[name]), torch.as_tensor(d2[name])], 0)
        losses[name] = F.mse_loss(torch.tanh(head(z)), d)
        losses["total"] = losses["total"] + losses[name]
    return losses


# --------------------------------------------------------------------------------------------- optimizer


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


# --------------------------------------------------------------------------------------------- methods


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


def cosine_lr(base_lr: float, step: int, total_steps: int) -> float:
    """lr of 0-based step k: base·(1 + cos(πk/K))/2 (``CosineAnnealingLR`` with η_min = 0, stepped per step)."""
    return base_lr * (1 + math.cos(math.pi * step / total_steps)) / 2


def cosine_tau(base: float, step: int, total_steps: int) -> float:
    """BYOL's τ_k = 1 − (1 − base)(cos(πk/K) + 1)/2 for the update after 0-based step k."""
    return 1 - (1 - base) * (math.cos(math.pi * step / total_steps) + 1) / 2
