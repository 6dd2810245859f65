"""Near-kink ReLU units of the reference's MLPs: found during a step, and flipped to the other side of the
kink on request, so that a side which float32 rounding decides is not counted as a difference of semantics."""

from __future__ import annotations

import torch
import torch.nn as nn


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
