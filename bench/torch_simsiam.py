"""A PyTorch SimSiam + AugSelf training step of the same model as ours, for bench/bench_cpu_step.py.

The backbone mirrors torchvision's ``resnet18`` (7×7/2 stem, 3×3/2 max-pool, BasicBlocks, 1×1 strided
downsample, ``zero_init_residual=True``) with every stage's width scaled as ``build_backbone(width=…)`` scales
it; the heads are ours (``augself_tf.methods``): projector 2048-2048 with BN at its end, predictor 512-2048,
AugSelf{crop,color} heads 512-512-4 on [f1, f2] and [f2, f1], SimSiam's symmetric negative cosine plus the
tanh-MSE ω regression. One step is forward + backward + ``torch.optim.SGD(momentum=0.9, weight_decay=5e-4)``
with the predictor in a constant-lr group, as the reference code trains. The input normalisation is part of
the forward pass, as it is the first layer of our backbone. No torchvision (it is not installed).

This file imports no TensorFlow; the benchmark runs it as a separate worker process
(``python -m bench.torch_simsiam --worker``) that answers one line per step on stdin with a JSON line
{"wall", "cpu", "loss"} on stdout, so the two frameworks' thread pools never share a process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: conv3×3(stride)-BN-ReLU-conv3×3-BN, plus a 1×1 conv-BN shortcut on a change."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn2.weight)  # zero_init_residual=True
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 without its fc, with stage widths round(64·width)·2^stage, as ours."""

    def __init__(self, width: float = 1.0) -> None:
        super().__init__()
        base = max(1, int(round(64 * width)))
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1))
        self.register_buffer("inv_std", 1.0 / torch.tensor(STD).view(1, 3, 1, 1))
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], base
        for stage in range(4):
            cout = base * 2**stage
            for i in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if (i == 0 and stage > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.feature_dim = cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) * self.inv_std
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(self.blocks(x), 1), 1)


def mlp(din: int, dims: list[int], last_bn: bool = False) -> nn.Sequential:
    """Linear-BN-ReLU … Linear (+BN), as ``augself_tf.models.resnet.mlp`` (no bias before a BN)."""
    layers: list[nn.Module] = []
    for i, d in enumerate(dims):
        last = i == len(dims) - 1
        bn = (last and last_bn) or not last
        layers.append(nn.Linear(din, d, bias=not bn))
        if bn:
            layers.append(nn.BatchNorm1d(d))
        if not last:
            layers.append(nn.ReLU(inplace=True))
        din = d
    return nn.Sequential(*layers)


class SimSiamAugSelf(nn.Module):
    """SimSiam (projector 2 × 2048, predictor 512-2048) + AugSelf heads for `augself` (each 512-512-4)."""

    def __init__(self, width: float = 1.0, augself: tuple[str, ...] = ("crop", "color")) -> None:
        super().__init__()
        self.backbone = ResNet18(width)
        d = self.backbone.feature_dim
        self.projector = mlp(d, [2048, 2048], last_bn=True)
        self.predictor = mlp(2048, [512, 2048])
        self.heads = nn.ModuleDict({name: mlp(2 * d, [512, 512, 4]) for name in augself})

    def loss(self, x1: torch.Tensor, x2: torch.Tensor, omega1: dict, omega2: dict) -> torch.Tensor:
        f1, f2 = self.backbone(x1), self.backbone(x2)
        z1, z2 = self.projector(f1), self.projector(f2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        method = -0.5 * (F.cosine_similarity(p1, z2.detach()).mean() + F.cosine_similarity(p2, z1.detach()).mean())
        pairs = torch.cat([torch.cat([f1, f2], 1), torch.cat([f2, f1], 1)], 0).float()
        aug = method.new_zeros(())
        for name, head in self.heads.items():
            target = torch.cat([omega1[name] - omega2[name], omega2[name] - omega1[name]], 0)
            aug = aug + (torch.tanh(head(pairs).float()) - target).square().mean()
        return method.float() + aug


class TorchStep:
    """Model, optimizer and one synthetic batch in memory; `run()` does one training step."""

    def __init__(self, width: float, image_size: int, batch_size: int, bf16: bool = False,
                 channels_last: bool = False) -> None:
        torch.manual_seed(0)
        self.model = SimSiamAugSelf(width).train()
        self.bf16 = bf16
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.model = self.model.to(memory_format=fmt)
        groups = [
            {"params": [p for n, p in self.model.named_parameters() if not n.startswith("predictor.")]},
            {"params": list(self.model.predictor.parameters())},  # the constant-lr group (SimSiam's predictor)
        ]
        self.optimizer = torch.optim.SGD(groups, lr=0.03 * batch_size / 256, momentum=0.9, weight_decay=5e-4)
        g = torch.Generator().manual_seed(0)
        shape = (batch_size, 3, image_size, image_size)
        self.x1 = torch.rand(shape, generator=g).contiguous(memory_format=fmt)
        self.x2 = torch.rand(shape, generator=g).contiguous(memory_format=fmt)
        self.omega1 = {n: torch.rand(batch_size, 4, generator=g) for n in self.model.heads}
        self.omega2 = {n: torch.rand(batch_size, 4, generator=g) for n in self.model.heads}

    def run(self) -> dict:
        t0, c0 = time.perf_counter(), time.process_time()
        self.optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with autocast:
            loss = self.model.loss(self.x1, self.x2, self.omega1, self.omega2)
        loss.backward()
        self.optimizer.step()
        value = float(loss.detach())
        return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "loss": value}


def worker(argv: list[str] | None = None) -> int:
    """Builds one TorchStep per precision asked, then answers 'f32' / 'bf16' lines with one step's JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--image_size", type=int, default=96)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precisions", default="f32,bf16")
    p.add_argument("--channels_last", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    steps = {name: TorchStep(args.width, args.image_size, args.batch_size, bf16=name == "bf16",
                             channels_last=args.channels_last) for name in args.precisions.split(",")}
    print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "mkldnn_bf16": bool(getattr(torch.backends.mkldnn, "is_available", lambda: False)())}),
          flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        print(json.dumps(steps[name].run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker())
