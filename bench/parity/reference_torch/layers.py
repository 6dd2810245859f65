"""The reference's layers in PyTorch: BatchNorm with the BN bugs switchable, torchvision's ResNet-18 (and the
reference's ``cifar_`` stem), and the reference's ``load_mlp``."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.parity.reference_torch.bugs import Bugs
from bench.parity.reference_torch.kinks import KinkReLU


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
