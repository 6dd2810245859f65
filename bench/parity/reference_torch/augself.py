"""The reference's AugSelf objective: our ω rewritten in its conventions, its ``extract_diff`` targets
recomputed in NumPy, and ``SSObjective``'s loss over both orders."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.parity.reference_torch.bugs import Bugs


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
