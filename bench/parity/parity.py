"""Step parity: two full training steps of our TF code against the reference semantics written in PyTorch.

For each of SimSiam, MoCo v2 and BYOL with AugSelf{crop, color}, the harness
  1. builds our model exactly as ``augself_tf.training.loop.train`` does (``build_backbone``, ``build_method``,
     ``build_all``, ``build_optimizer`` with a cosine schedule over ``--total_steps``);
  2. builds the reference in PyTorch (``reference_torch.py``) and copies EVERY TF weight into it (Keras conv
     kernels HWIO → torch OIHW, Dense kernels transposed, BN γ/β/moving statistics, the EMA target networks,
     MoCo's queue), so both start from identical state;
  3. makes two batches of views + ω with our pipeline (``augself_tf.data.pretrain.two_views`` on real
     Tiny-ImageNet images); TF gets the [0, 1] views (our backbone normalises them in its first layer, here
     with STL10's mean/std), torch gets them normalised with those constants as the reference's last transform;
     torch's AugSelf targets are recomputed independently in NumPy from ω (``reference_torch.extract_diff``);
  4. runs step 1 at lr₀ and step 2 at the cosine schedule's next lr (a changing lr, so momentum semantics
     matter) on both sides, and compares, per step: the losses (method, crop, colour), every gradient, the
     update of every optimized weight, the BN running means and variances (online and target networks),
     the EMA target weights (MoCo's key encoder, BYOL's target) and MoCo's queue.

Our gradients are taken with a tape over ``compute_losses`` at the pre-step state, every model variable is
then restored (that forward pass moved the BN statistics) and ``train_step`` runs the step itself.

Error measure (one number per quantity group and step: the max over its tensors). For a quantity read
directly (losses, gradients): max|ours − ref| / max|ref| per tensor. For a state after a step (weights, BN
statistics, targets, queue): max|ours − ref| / max|ref − ref_before|, i.e. relative to how far the step
moved it — comparing the weights themselves would hide a wrong update behind the unchanged bulk of the
weight. Such a ratio has a float32 rounding floor of about ε₃₂·max|ref|/max|Δref| (the stored weight is
rounded to its ulp whatever the update), reported as ``floor``; an EMA target with m = 0.999 moves by
1e-3 of an update, so its floor is high. A group passes when error ≤ ``--tol`` + 4·floor.

Tolerance: the two sides run float32 with different conv/matmul kernels (torch's and TF's own oneDNN / Eigen),
different summation orders in the BN statistics and the loss reductions. Each such op contributes relative
errors of ~1e-7–1e-6, and a ResNet-18 forward + backward through ~20 BN layers at batch 8 (whose 1/σ
amplifies small differences where a channel's batch variance is small) compounds them to 1e-6–1e-5 on the
gradients (measured ≤ 1e-5, ≤ 1e-4 with ``--chained``): ``--tol 1e-3`` leaves 2.5× over the worst tensor
(a mathematically zero one, see ``DEGENERATE``) and is 28× below the smallest effect of any bug in
``--inject`` (docs/experiments.md, "Step parity with the reference semantics").

From the repository root (it imports ``bench.common``, so it runs as a module):

    pip install -r bench/parity/requirements-parity.txt    # torch (CPU wheel); not a project dependency
    python -m bench.parity.parity                           # all three methods: PASS/FAIL per quantity
    python -m bench.parity.parity --inject keras_momentum   # one deliberate bug: must print FAIL, exit 1
    python -m bench.parity.parity --inject all              # the bug table: exit 0 iff every bug is caught
    python -m bench.parity.parity --emulate no_normalisation,biased_running_var,keras_momentum
        # the reference with our pre-fix semantics: isolates exactly those differences

Exit status: 0 when every group passes (``--inject all``: when every bug is caught by at least one group).
"""

from __future__ import annotations

import argparse
import copy
import glob
import itertools
import os
import re
import sys
import time

if not __package__:
    sys.exit("parity: run it from the repository root as a module: python -m bench.parity.parity [flags]")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from augself_tf.augment import AugmentConfig  # noqa: E402
from augself_tf.data.pretrain import example_seed, two_views  # noqa: E402
from augself_tf.methods import build_method  # noqa: E402
from augself_tf.models import resnet as tf_resnet  # noqa: E402
from augself_tf.training import optim as tf_optim  # noqa: E402
from bench.parity import reference_torch as ref  # noqa: E402

METHODS = ("simsiam", "moco", "byol")
AUGSELF = ("crop", "color")
EPS32 = float(np.finfo(np.float32).eps)
GROUPS = ("loss", "grad", "update", "bn_mean", "bn_var", "target", "queue")

# ------------------------------------------------------------------------------------------------ data


def make_batches(data_dir: str, batch_size: int, image_size: int, seed: int) -> list[dict]:
    """Two batches of {view1, view2 [B,S,S,3] in [0,1], omega1, omega2} from our pipeline, as NumPy."""
    files = sorted(glob.glob(os.path.join(data_dir, "**", "*.JPEG"), recursive=True))
    files += sorted(glob.glob(os.path.join(data_dir, "**", "*.jpg"), recursive=True))
    need = 2 * batch_size
    if len(files) >= need:
        images = [tf.io.decode_jpeg(tf.io.read_file(f), channels=3) for f in files[:need]]
        source = f"{need} images of {data_dir}"
    else:  # no real data beside the checkout: uniform noise images (both sides still get the same views)
        rng = np.random.default_rng(seed)
        images = [tf.constant(rng.integers(0, 256, [64, 64, 3], dtype=np.uint8)) for _ in range(need)]
        source = "uniform noise images (no data found)"
    config = AugmentConfig(image_size=image_size)
    batches = []
    for b in range(2):
        examples = [two_views({"image": images[b * batch_size + i]},
                              example_seed(seed, tf.constant(0), tf.constant(b * batch_size + i)), config)
                    for i in range(batch_size)]
        batch = {k: np.stack([e[k].numpy() for e in examples]) for k in ("view1", "view2")}
        for k in ("omega1", "omega2"):
            batch[k] = {name: np.stack([e[k][name].numpy() for e in examples]) for name in examples[0][k]}
        batches.append(batch)
    print(f"# views: our pipeline (two_views, {image_size} px) on {source}", flush=True)
    return batches


# ------------------------------------------------------------------------------------------------ TF side


def build_tf_backbone(name: str, width: float) -> keras.Model:
    """``build_backbone`` normalising its [0, 1] input with STL10's constants (the paper's STL10 setting)."""
    return tf_resnet.build_backbone(name, width, synchronized_bn=False, input_mean=ref.STL10_MEAN,
                                    input_std=ref.STL10_STD)


def method_options(method: str, feature_dim: int, args: argparse.Namespace) -> dict:
    """The paper's STL10 head sizes (MoCo's hidden layer = the backbone's feature size, as the reference)."""
    if method == "simsiam":
        return {"projector_layers": 2, "projector_dim": 2048, "predictor_hidden": 512}
    if method == "moco":
        return {"projector_hidden": feature_dim, "projector_dim": 128, "temperature": 0.2,
                "key_momentum": args.key_momentum, "queue_size": args.queue_size}
    return {"projector_hidden": 4096, "projector_dim": 256, "predictor_hidden": 4096,
            "target_momentum": args.tau, "total_steps": args.total_steps}


def build_tf(method: str, args: argparse.Namespace):
    """Our model and optimizer, built as ``augself_tf.training.loop.train`` builds them."""
    keras.utils.set_random_seed(args.seed)
    backbone = build_tf_backbone(args.backbone, args.width)
    options = method_options(method, int(backbone.output_shape[-1]), args)
    model = build_method(method, backbone, options=options, augself=AUGSELF, augself_weight=1.0,
                         synchronized_bn=False)
    model.build_all(args.image_size)
    # lr₀ = args.lr: the linear scaling rule at batch 256 is the identity.
    optimizer = tf_optim.build_optimizer(args.lr, 256, args.total_steps, weight_decay=args.wd,
                                         constant_lr_variables=model.constant_lr_variables())
    model.compile(optimizer=optimizer)
    optimizer.build(model.optimized_variables())
    return model, options


# -------------------------------------------------------------------------------- TF ↔ torch variables

_BLOCK = re.compile(r"^s(\d)b(\d)_(conv\d|bn\d|down_conv|down_bn)$")


def _torch_backbone_name(keras_name: str) -> str | None:
    """torchvision's module path of a Keras backbone layer (``s2b1_down_conv`` → ``layer2.0.downsample.0``)."""
    if keras_name in ("stem_conv", "stem_bn"):
        return {"stem_conv": "conv1", "stem_bn": "bn1"}[keras_name]
    m = _BLOCK.match(keras_name)
    if not m:
        return None
    stage, block, part = m.groups()
    part = {"down_conv": "downsample.0", "down_bn": "downsample.1"}.get(part, part)
    return f"layer{stage}.{int(block) - 1}.{part}"


def _torch_mlp_name(seq_name: str, keras_name: str) -> str | None:
    """Index in the reference's ``load_mlp`` Sequential: fc i → 3(i−1), bn i → 3(i−1)+1."""
    m = re.match(rf"^{re.escape(seq_name)}_(fc|bn)(\d+)$", keras_name)
    if not m:
        return None
    kind, i = m.group(1), int(m.group(2))
    return str(3 * (i - 1) + (0 if kind == "fc" else 1))


def _layer_entries(layer, path: str) -> list[tuple[str, tf.Variable, str]]:
    """(torch name, TF variable, layout) of one Conv2D / Dense / BN layer."""
    if isinstance(layer, keras.layers.Conv2D):
        return [(f"{path}.weight", layer.kernel, "conv")]
    if isinstance(layer, keras.layers.Dense):
        out = [(f"{path}.weight", layer.kernel, "dense")]
        return out + ([(f"{path}.bias", layer.bias, "same")] if layer.use_bias else [])
    if isinstance(layer, keras.layers.BatchNormalization):
        return [(f"{path}.weight", layer.gamma, "same"), (f"{path}.bias", layer.beta, "same"),
                (f"{path}.running_mean", layer.moving_mean, "same"),
                (f"{path}.running_var", layer.moving_variance, "same")]
    return []


def variable_map(model, method: str) -> list[tuple[str, tf.Variable, str]]:
    """Every TF weight of ``model`` with its torch name in ``reference_torch`` and its layout."""
    entries = []

    def backbone(keras_backbone, prefix):
        for layer in keras_backbone.layers:
            name = _torch_backbone_name(layer.name)
            if name is not None:
                entries.extend(_layer_entries(layer, f"{prefix}.{name}"))

    def mlp(seq, prefix):
        for layer in seq.layers:
            name = _torch_mlp_name(seq.name, layer.name)
            if name is not None:
                entries.extend(_layer_entries(layer, f"{prefix}.{name}"))

    backbone(model.backbone, "backbone")
    mlp(model.projector, "projector")
    if method in ("simsiam", "byol"):
        mlp(model.predictor, "predictor")
    for aug, head in model.augself_heads.items():
        mlp(head, f"heads.{aug}")
    encoder = {"moco": "key_encoder", "byol": "target_encoder"}.get(method)
    if encoder:
        backbone(getattr(model, encoder).backbone, "target_backbone")
        mlp(getattr(model, encoder).projector, "target_projector")
    return entries


def to_torch_layout(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "conv":  # Keras HWIO → torch OIHW
        return np.transpose(x, (3, 2, 0, 1))
    if layout == "dense":  # Keras (in, out) → torch (out, in)
        return x.T
    return x


def check_coverage(model, entries, torch_model) -> None:
    """Every trainable TF variable and BN statistic is mapped, and every torch weight receives one."""
    mapped = {id(v) for _, v, _ in entries}
    loose = [v.path for v in model.trainable_variables if id(v) not in mapped]
    if loose:
        raise RuntimeError(f"TF variables without a torch counterpart: {loose[:5]}")
    names = {n for n, _, _ in entries}
    state = dict(torch_model.named_parameters()) | {n: b for n, b in torch_model.named_buffers()
                                                    if not n.endswith("num_batches_tracked") and n != "queue"}
    missing = sorted(set(state) - names)
    extra = sorted(names - set(state))
    if missing or extra:
        raise RuntimeError(f"torch weights not fed from TF: {missing[:5]}; unknown torch names: {extra[:5]}")
    for name, var, layout in entries:
        if tuple(state[name].shape) != to_torch_layout(var.numpy(), layout).shape:
            raise RuntimeError(f"shape mismatch at {name}: torch {tuple(state[name].shape)} vs TF {var.shape}")


# ------------------------------------------------------------------------------------------------ records


def tf_state(model, entries) -> dict[str, np.ndarray]:
    state = {n: to_torch_layout(v.numpy(), layout).copy() for n, v, layout in entries}
    if hasattr(model, "queue"):
        state["queue"] = np.array(model.queue.numpy())
    return state


def torch_state(torch_model) -> dict[str, np.ndarray]:
    state = {n: p.detach().numpy().copy() for n, p in torch_model.named_parameters()}
    state |= {n: b.detach().numpy().copy() for n, b in torch_model.named_buffers()
              if not n.endswith("num_batches_tracked")}
    if isinstance(torch_model, ref.MoCo):
        state["queue"] = torch_model.queue.numpy().copy()
    return state


def run_tf(model, entries, batches: list[dict]) -> dict:
    """Losses, gradients and the state after each of the two steps, in torch names and layouts."""
    by_id = {id(v): n for n, v, _ in entries}
    variables = model.optimized_variables()

    @tf.function
    def losses_and_grads(batch):
        with tf.GradientTape() as tape:
            total, logs, _ = model.compute_losses(batch, training=True)
        return logs, tape.gradient(total, variables)

    step = tf.function(model.train_step)
    record = {"state0": tf_state(model, entries), "lr": []}
    for k, batch in enumerate(batches, start=1):
        tf_batch = tf.nest.map_structure(tf.constant, batch)
        snapshot = [v.numpy() for v in model.variables]
        logs, grads = losses_and_grads(tf_batch)
        for v, s in zip(model.variables, snapshot, strict=True):  # undo the BN statistics of that pass
            v.assign(s)
        record["lr"].append(float(model.optimizer.learning_rate.numpy()))
        step(tf_batch)
        loss = {"method": float(logs["loss/method"]), **{a: float(logs[f"augself/{a}_loss"]) for a in AUGSELF}}
        if model.method_name == "byol":
            loss["method"] -= 4.0  # ours is Σ(2 − 2cos); the reference's −2Σcos: the same up to this constant
        layouts = {n: layout for n, _, layout in entries}
        record[f"loss{k}"] = loss
        record[f"grad{k}"] = {by_id[id(v)]: to_torch_layout(g.numpy(), layouts[by_id[id(v)]])
                              for v, g in zip(variables, grads, strict=True) if g is not None}
        record[f"state{k}"] = tf_state(model, entries)
    return record


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


def grad_error(ours: dict[str, np.ndarray], theirs: dict[str, torch.Tensor]) -> float:
    """The ``grad`` group's error (``compare``) of one step."""
    theirs = {n: g.numpy() for n, g in theirs.items()}
    largest = max(float(np.max(np.abs(g))) for g in theirs.values())
    return max(float(np.max(np.abs(ours[n] - g))) / max(float(np.max(np.abs(g))), DEGENERATE["grad"] * largest)
               for n, g in theirs.items())


# ------------------------------------------------------------------------------------------------ compare


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


# ------------------------------------------------------------------------------------------------ main


def reference_run(method: str, model, options: dict, entries, ours: dict, baseline: tuple[str, ...],
                  batches: list[dict], args, bugs: tuple[str, ...]) -> dict:
    """The reference's two steps from our initial state, with the ``baseline`` + ``bugs`` injected."""
    net = build_torch(method, model, options, entries, ours["state0"], args, ref.Bugs(baseline + bugs))
    theirs = run_torch(net, batches, args, [None, None if args.chained else ours["state1"]], ours)
    if np.any(np.abs(np.array(ours["lr"]) - np.array(theirs["lr"])) > 1e-7 * args.lr):
        raise RuntimeError(f"the two sides ran different lrs: {ours['lr']} vs {theirs['lr']}")
    return theirs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--backbone", default="resnet18", choices=["resnet18", "resnet18_cifar"])
    p.add_argument("--width", type=float, default=0.125)
    p.add_argument("--image_size", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05, help="lr of step 1 (the schedule's base lr)")
    p.add_argument("--total_steps", type=int, default=4, help="cosine schedule length: step 2 runs at "
                   "lr·(1 + cos(π/K))/2 (0.854·lr at K = 4)")
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--tau", type=float, default=0.996, help="BYOL base τ")
    p.add_argument("--key_momentum", type=float, default=0.999, help="MoCo key-encoder momentum")
    p.add_argument("--queue_size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the views")
    p.add_argument("--chained", action="store_true", help="step 2 continues each side's own step 1 instead "
                   "of both starting from our post-step-1 state")
    p.add_argument("--tol", type=float, default=1e-3, help="relative tolerance (module docstring)")
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "tiny-imagenet-mini"))
    p.add_argument("--emulate", default="", help="bugs injected into the reference as the baseline, e.g. our "
                   "pre-fix semantics: no_normalisation,biased_running_var,keras_momentum; several baselines "
                   "separated by ';' are each compared with the same TF run")
    p.add_argument("--inject", default="", help="a bug of reference_torch.BUGS (comma-separated for several), "
                   "or 'all' for the bug table")
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    baselines = [tuple(b for b in group.split(",") if b) for group in args.emulate.split(";")]
    injected = tuple(ref.BUGS) if args.inject == "all" else tuple(b for b in args.inject.split(",") if b)
    for baseline in baselines:
        ref.Bugs(baseline + injected)  # validates the names

    torch.set_num_threads(1)  # a shared 2-core machine; also keeps torch's reductions in one order
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from bench.common import machine_info, print_machine

    print_machine(machine_info())
    print(f"# torch {torch.__version__}; {args.backbone} width {args.width}, {args.image_size} px, batch "
          f"{args.batch_size}, lr {args.lr} (cosine over {args.total_steps} steps), wd {args.wd}, tol {args.tol}")
    batches = make_batches(args.data, args.batch_size, args.image_size, args.seed)

    all_ok, table = True, []
    for method in methods:
        t0 = time.perf_counter()
        model, options = build_tf(method, args)
        entries = variable_map(model, method)
        ours = run_tf(model, entries, batches)
        print(f"# {method}: TF steps in {time.perf_counter() - t0:.0f} s; lr {ours['lr']}", flush=True)

        for baseline in baselines:
            def reference(bugs: tuple[str, ...], context=(method, model, options, entries, ours, baseline)):
                return reference_run(*context, batches, args, bugs)

            label = method + (f" vs the reference with {'+'.join(baseline)}" if baseline else "")
            if args.inject != "all":
                theirs = reference(injected)
                if injected:
                    label += f" (+ injected {'+'.join(injected)})"
                all_ok &= print_table(label, compare(ours, theirs), args.tol, theirs["kinks"])
                continue
            clean_record = reference(())
            clean = compare(ours, clean_record)
            print_table(label, clean, args.tol, clean_record["kinks"])
            for bug in injected:
                if method not in ref.BUGS[bug][0] or bug in baseline:
                    continue
                errors = compare(ours, reference((bug,)))
                fails = failing_groups(errors, args.tol)
                caught = bool(set(fails) - set(failing_groups(clean, args.tol)))
                all_ok &= caught
                signal = max(err for groups in errors.values() for err, _, _ in groups.values())
                table.append((bug, label, caught, signal, fails))
    if table:
        print("\n## bug table (a bug is caught when some group fails that passes without it)")
        print(f"{'bug':<24} {'method':<8} {'caught':<7} {'max error':>9}  failing groups (quantity@step)")
        for bug, label, caught, signal, fails in table:
            print(f"{bug:<24} {label:<8} {'yes' if caught else 'NO':<7} {signal:>9.1e}  {' '.join(fails)}")
    print(f"\n{'PASS' if all_ok else 'FAIL'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
