"""The comparison of the two sides (the error measure of parity.py's docstring): per quantity group and step,
the largest error and its float32 rounding floor, the verdicts against the tolerance, and the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

EPS32 = float(np.finfo(np.float32).eps)
GROUPS = ("loss", "grad", "update", "bn_mean", "bn_var", "target", "queue")


def grad_error(ours: dict[str, np.ndarray], theirs: dict[str, torch.Tensor]) -> float:
    """The ``grad`` group's error (``compare``) of one step."""
    theirs = {n: g.numpy() for n, g in theirs.items()}
    largest = max(float(np.max(np.abs(g))) for g in theirs.values())
    return max(float(np.max(np.abs(ours[n] - g))) / max(float(np.max(np.abs(g))), DEGENERATE["grad"] * largest)
               for n, g in theirs.items())


def _group_of_state(name: str) -> str:
    if name == "queue":
        return "queue"
    if name.endswith("running_mean"):
        return "bn_mean"
    if name.endswith("running_var"):
        return "bn_var"
    if name.startswith("target_"):
        return "target"
    return "update"


#: ρ per group: a tensor whose reference is below ρ × the largest of its group is measured at that scale.
#: Such tensors are mathematically zero and hold only rounding noise, ~ε₃₂ × the terms that cancelled: the
#: gradient (and so the update and the EMA target's move) of SimSiam's last projector BN β and of BYOL's
#: last projector bias — a constant shift that the predictor's first BN removes — measured at 2e-10 (SimSiam)
#: and 2e-8 (BYOL) of the largest gradient; and the running mean of the BN after a BN-normalised input,
#: ~2e-7 of the largest move. The smallest meaningful tensors are 2e-5 (gradients, updates) and 0.2 (BN
#: statistics) of their group's largest, so ρ costs them at most a factor 5 of sensitivity.
DEGENERATE = {"grad": 1e-4, "update": 1e-4, "target": 1e-4, "queue": 1e-4, "bn_mean": 1e-3, "bn_var": 1e-3}


def compare(ours: dict, theirs: dict) -> dict[int, dict[str, tuple[float, float, str]]]:
    """{step: {group: (max error, its rounding floor, worst tensor)}} (module docstring)."""
    result = {}
    for k in (1, 2):
        items: dict[str, list[tuple[str, float, float, float]]] = {g: [] for g in GROUPS}  # name, diff, scale, floor
        for name, b in theirs[f"loss{k}"].items():
            items["loss"].append((name, abs(ours[f"loss{k}"][name] - b), abs(b), 0.0))
        grads_t = theirs[f"grad{k}"]
        if set(ours[f"grad{k}"]) != set(grads_t):
            raise RuntimeError(f"gradients of different weights: {set(ours[f'grad{k}']) ^ set(grads_t)}")
        for name, b in grads_t.items():
            items["grad"].append((name, float(np.max(np.abs(ours[f"grad{k}"][name] - b))),
                                  float(np.max(np.abs(b))), 0.0))
        before, after_t, after_o = theirs[f"start{k}"], theirs[f"state{k}"], ours[f"state{k}"]
        for name, b in after_t.items():
            if name in after_o:
                moved = float(np.max(np.abs(b - before[name])))
                items[_group_of_state(name)].append((name, float(np.max(np.abs(after_o[name] - b))), moved,
                                                     EPS32 * float(np.max(np.abs(b)))))
        groups = {}
        for group, rows in items.items():
            if not rows:
                continue
            largest = max(scale for _, _, scale, _ in rows)
            worst = None
            for name, diff, scale, ulp in rows:
                scale = max(scale, DEGENERATE.get(group, 0.0) * largest)
                err = diff / scale if scale > 0 else (0.0 if diff == 0 else np.inf)
                floor = ulp / scale if scale > 0 else 0.0
                if worst is None or err - 4 * floor > worst[0] - 4 * worst[1]:
                    worst = (err, floor, name)
            groups[group] = worst
        result[k] = groups
    return result


def verdicts(errors: dict, tol: float) -> dict[tuple[int, str], bool]:
    return {(k, g): err <= tol + 4 * floor for k, groups in errors.items() for g, (err, floor, _) in groups.items()}


def print_table(label: str, errors: dict, tol: float, kinks: list[tuple[int, int]]) -> bool:
    ok = verdicts(errors, tol)
    print(f"\n## {label}")
    print("# near-kink MLP units (reference_torch.Kinks) found / taken on the other side, step 1, step 2: "
          + ", ".join(f"{n}/{f}" for n, f in kinks))
    print(f"{'quantity':<9} {'step 1':>10} {'floor':>8} {'step 2':>10} {'floor':>8}  verdict  worst tensor (step 2)")
    for g in GROUPS:
        if g not in errors[1]:
            continue
        (e1, f1, _), (e2, f2, n2) = errors[1][g], errors[2][g]
        verdict = "PASS" if ok[(1, g)] and ok[(2, g)] else "FAIL"
        print(f"{g:<9} {e1:>10.2e} {f1:>8.1e} {e2:>10.2e} {f2:>8.1e}  {verdict:<7}  {n2}")
    return all(ok.values())


def failing_groups(errors: dict, tol: float) -> list[str]:
    ok = verdicts(errors, tol)
    return [f"{g}@{k}" for k in (1, 2) for g in GROUPS if (k, g) in ok and not ok[(k, g)]]
