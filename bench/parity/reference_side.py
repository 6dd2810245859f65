"""The reference side of the parity harness: the PyTorch reference (``reference_torch``) built from our
pre-step state with the chosen bugs, its two steps run (near-kink units resolved towards our gradients) and
recorded in the same form as the TF side's."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import torch

from bench.parity import reference_torch as ref
from bench.parity.comparison import grad_error
from bench.parity.weight_map import check_coverage


def torch_state(torch_model) -> dict[str, np.ndarray]:
    state = {n: p.detach().numpy().copy() for n, p in torch_model.named_parameters()}
    state |= {n: b.detach().numpy().copy() for n, b in torch_model.named_buffers()
              if not n.endswith("num_batches_tracked")}
    if isinstance(torch_model, ref.MoCo):
        state["queue"] = torch_model.queue.numpy().copy()
    return state


def build_torch(method: str, model, options: dict, entries, initial: dict, args,
                bugs: ref.Bugs) -> ref.ReferenceMethod:
    """The reference model with every weight (and MoCo's queue) set to ``initial``, our pre-step state."""
    torch.manual_seed(0)
    stem = "cifar" if args.backbone == "resnet18_cifar" else "imagenet"
    backbone = ref.ResNet(args.width, stem)
    d = model.feature_dim
    if method == "simsiam":
        net = ref.SimSiam(backbone, d, bugs, projector_dim=options["projector_dim"],
                          predictor_hidden=options["predictor_hidden"], projector_layers=options["projector_layers"])
    elif method == "moco":
        net = ref.MoCo(backbone, d, bugs, projector_hidden=options["projector_hidden"],
                       projector_dim=options["projector_dim"], queue=initial["queue"],
                       temperature=options["temperature"], key_momentum=options["key_momentum"])
    else:
        net = ref.BYOL(backbone, d, bugs, projector_hidden=options["projector_hidden"],
                       projector_dim=options["projector_dim"], predictor_hidden=options["predictor_hidden"])
    ref.set_bugs(net, bugs)
    check_coverage(model, entries, net)
    state = dict(net.named_parameters()) | dict(net.named_buffers())
    with torch.no_grad():
        for name, _, _ in entries:  # identical starting weights, targets and BN statistics
            state[name].copy_(torch.as_tensor(initial[name]))
    net.make_optimizers(args.lr, args.wd)
    return net


def set_torch_state(net: ref.ReferenceMethod, state: dict[str, np.ndarray]) -> None:
    """Overwrites every mapped torch weight, BN statistic, target weight and MoCo's queue with ``state``."""
    tensors = dict(net.named_parameters()) | dict(net.named_buffers())
    with torch.no_grad():
        for name, value in state.items():
            if name == "queue":
                net.queue.copy_(torch.as_tensor(value))
            else:
                tensors[name].copy_(torch.as_tensor(value))


#: at most this many near-kink units per step are resolved (2^n reruns of the reference step).
MAX_KINKS = 4


def run_torch(net: ref.ReferenceMethod, batches: list[dict], args, starts: list[dict | None],
              ours: dict | None = None) -> dict:
    """The reference's two steps; step k starts from ``starts[k-1]`` when given (each side keeps its own
    momentum buffers), so that step's differences are its own rather than inherited from step k−1.

    When the step has near-kink MLP units (``reference_torch.Kinks``) and ``ours`` is given, the step is
    rerun with every subset of them on the other side of the kink, and the run whose gradients are closest
    to ours is kept: a side of a kink that rounding decides is not a difference of semantics.
    """
    record = {"lr": [], "kinks": []}
    ref.name_relus(net)
    for k, batch in enumerate(batches, start=1):
        if starts[k - 1] is not None:
            set_torch_state(net, starts[k - 1])
        record[f"start{k}"] = torch_state(net)
        lr = ref.cosine_lr(args.lr, k - 1, args.total_steps)
        tau = ref.cosine_tau(args.tau, k - 1, args.total_steps)
        record["lr"].append(lr)
        before = copy.deepcopy(net)
        with ref.Kinks() as kinks:
            loss, grads = net.step(batch, lr, args.lr, tau)
        near, flipped = kinks.near, ()
        if near and ours is not None and len(near) <= MAX_KINKS:
            best = grad_error(ours[f"grad{k}"], grads)
            for n in range(1, len(near) + 1):
                for flips in itertools.combinations(near, n):
                    trial = copy.deepcopy(before)
                    with ref.Kinks(flips):
                        trial_loss, trial_grads = trial.step(batch, lr, args.lr, tau)
                    error = grad_error(ours[f"grad{k}"], trial_grads)
                    if error < best:
                        best, net, loss, grads, flipped = error, trial, trial_loss, trial_grads, flips
        record["kinks"].append((len(near), len(flipped)))
        record[f"loss{k}"] = loss
        record[f"grad{k}"] = {n: g.numpy() for n, g in grads.items()}
        record[f"state{k}"] = torch_state(net)
    return record


def reference_run(method: str, model, options: dict, entries, ours: dict, baseline: tuple[str, ...],
                  batches: list[dict], args, bugs: tuple[str, ...]) -> dict:
    """The reference's two steps from our initial state, with the ``baseline`` + ``bugs`` injected."""
    net = build_torch(method, model, options, entries, ours["state0"], args, ref.Bugs(baseline + bugs))
    theirs = run_torch(net, batches, args, [None, None if args.chained else ours["state1"]], ours)
    if np.any(np.abs(np.array(ours["lr"]) - np.array(theirs["lr"])) > 1e-7 * args.lr):
        raise RuntimeError(f"the two sides ran different lrs: {ours['lr']} vs {theirs['lr']}")
    return theirs
