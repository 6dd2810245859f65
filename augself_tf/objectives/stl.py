"""STL (Yu et al., "Self-supervised Transformation Learning for Equivariant Representations", NeurIPS 2024;
code jaemyung-u/stl): a representation of the transformation itself, learned without ω labels.

STL's loss is L_inv + L_equi + 0.1·L_trans, every term an NT-Xent at τ = 0.2. Here the base method's loss stands
for L_inv, and ``--stl_weight=λ`` adds λ·(L_equi + ``--stl_trans_weight``·L_trans):

    total = L_method + λ·(L_equi + 0.1·L_trans)

so ``--method=simclr --stl_weight=1`` with SimCLR's projector d→512→128 and T = 0.2 is STL's own loss (its
invariance term is NT-Xent over an inv projector of that shape; our SimCLR projector's last Linear has a bias,
STL's none), and ``--method=simsiam`` / ``byol`` put their own invariance loss in L_inv's place.

Layers (``augself_tf.losses.stl_terms`` holds the tensor operations between them and says what the terms are):
- T: the transformation backbone, [y1, y2] (2d) → 128 → 128 (Linear–BN–ReLU–Linear, no biases), on the
  backbone features y of the method's forward pass (online features for SimCLR, SimSiam and BYOL);
- W: the hypernetwork, Linear(128 → k·k, no bias), whose output is read as a k×k matrix per example;
- P_equi (k → 512 → 128) and P_trans (128 → 128 → 128), Linear–BN–ReLU–Linear, no biases.
STL's W acts on y itself (k = d = 512: 128·512² = 33.5M weights). ``--stl_equi_dim=k`` (default 128) first maps
y to k dimensions by a learned Linear (no bias) and W acts there: 128·128² = 2.1M weights, an affordable head
beside a ResNet-18 on a CPU. ``--stl_equi_dim=0`` is STL's unreduced map.

Views: the two views the method already draws, with the crop, colour-jitter and grayscale draws shared by the
examples of each aligned pair (`ViewPlan.aligned`; the input pipeline pairs examples 2i and 2i+1 of every
per-replica batch). Flip and blur stay each example's own, as STL's ``invariant_transform``.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from augself_tf.augment.views import ViewPlan, check_copyable
from augself_tf.flag_fields import check_minimum, flag_fields, option
from augself_tf.losses.stl_terms import (
    equivariance_loss,
    hyper_map,
    swap_pairs,
    transformation_loss,
    transformation_pairs,
)
from augself_tf.models.resnet import batch_norm
from augself_tf.models.torch_init import Linear
from augself_tf.objectives.base import Objective

#: the steps STL's ``aligned_transform`` applies with one draw to both images of a pair.
STL_ALIGNED = "crop,color,grayscale"


def parse_aligned(text: str) -> tuple[str, ...]:
    """The aligned steps of ``--stl_aligned`` ("crop,color,grayscale" -> a tuple).

    Raises:
      ValueError: an empty list, or a name that is not a step with parameters ω (one line naming the flag).
    """
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError(f"--stl_aligned needs at least one step, e.g. {STL_ALIGNED}")
    for name in names:
        check_copyable(name, "--stl_aligned")
    return names


def stl_mlp(dims: list[int], synchronized_bn: bool, name: str) -> keras.Sequential:
    """STL's ``load_mlp``: Linear–BN–ReLU blocks, then a Linear; no Linear has a bias. Float32 under mixed precision,
    as its per-example matrices and its NT-Xent."""
    stack: list[keras.layers.Layer] = []
    for i, d in enumerate(dims):
        stack.append(Linear(d, use_bias=False, name=f"{name}_fc{i + 1}", dtype="float32"))
        if i < len(dims) - 1:
            stack.append(batch_norm(synchronized_bn, name=f"{name}_bn{i + 1}", dtype="float32"))
            stack.append(keras.layers.ReLU(name=f"{name}_relu{i + 1}", dtype="float32"))
    return keras.Sequential(stack, name=name)


class STL(Objective):
    """STL's equivariance and transformation terms beside a method's invariance loss (module docstring)."""

    key = "stl"
    weight_option = "stl_weight"
    methods = ("simclr", "simsiam", "byol")

    @dataclasses.dataclass(frozen=True)
    class Options:
        """STL's flags."""

        stl_weight: float = option(0.0, "STL: weight λ of its equivariance and transformation terms beside the "
                                        "method's invariance loss (0 = off; STL: 1)", minimum=0)
        stl_trans_weight: float = option(0.1, "STL: weight of the transformation term inside STL's loss", minimum=0)
        stl_temperature: float = option(0.2, "STL: NT-Xent temperature of its two terms", above=0)
        stl_equi_dim: int = option(128, "STL: size k of the space its hypernetwork's per-example k x k map acts in "
                                        "(0 = the backbone features themselves, STL's 512 x 512 on ResNet-18)",
                                   minimum=0)
        stl_trans_dim: int = option(128, "STL: size of the transformation representation, its MLP's hidden layer "
                                         "and its projector's layers", minimum=1)
        stl_projector_hidden: int = option(512, "STL: hidden size of its equivariance projector", minimum=1)
        stl_projector_dim: int = option(128, "STL: output size of its equivariance projector", minimum=1)
        stl_aligned: str = option(STL_ALIGNED, "STL: the augmentations the two images of an aligned pair share "
                                               "(comma-separated)")

        def __post_init__(self) -> None:
            for f in flag_fields(type(self)):
                check_minimum(f.name, f, getattr(self, f.name))
            parse_aligned(self.stl_aligned)

    @classmethod
    def extend_views(cls, plan: ViewPlan, options: STL.Options) -> ViewPlan:
        """The method's views, their ``--stl_aligned`` draws shared within each pair of examples."""
        return dataclasses.replace(plan, aligned=parse_aligned(options.stl_aligned))

    def build_objective(self, model) -> None:
        o, sync, d = self.options, model.synchronized_bn, model.feature_dim
        self.equi_dim = o.stl_equi_dim or d
        self.equi_in = Linear(o.stl_equi_dim, use_bias=False, name="stl_equi_in", dtype="float32") \
            if o.stl_equi_dim else None
        self.trans_backbone = stl_mlp([o.stl_trans_dim, o.stl_trans_dim], sync, "stl_trans_backbone")
        self.hypernet = Linear(self.equi_dim ** 2, use_bias=False, name="stl_hypernet", dtype="float32")
        self.equi_projector = stl_mlp([o.stl_projector_hidden, o.stl_projector_dim], sync, "stl_equi_projector")
        self.trans_projector = stl_mlp([o.stl_trans_dim, o.stl_trans_dim], sync, "stl_trans_projector")
        y = tf.zeros([2, d])
        e = self.equi_in(y) if self.equi_in is not None else y
        t = self.trans_backbone(tf.concat([y, y], -1), training=False)
        self.equi_projector(hyper_map(e, self.hypernet(t)), training=False)
        self.trans_projector(t, training=False)

    def objective_loss(self, model, batch, forward, training):
        """L_equi + ``stl_trans_weight``·L_trans on this replica's aligned pairs; logs each term unweighted."""
        del model, batch
        b = forward.f1.shape[0]
        if b is not None and b % 2:
            raise ValueError(f"--stl_weight needs an even batch per replica (aligned pairs), got {b}")
        y1, y2 = tf.cast(forward.f1, tf.float32), tf.cast(forward.f2, tf.float32)
        # STL calls each head once per input (each its own BN batch); so do we, in the same order.
        t12 = self.trans_backbone(tf.concat([y1, y2], -1), training=training)
        t21 = self.trans_backbone(tf.concat([y2, y1], -1), training=training)
        e1, e2 = (self.equi_in(y1), self.equi_in(y2)) if self.equi_in is not None else (y1, y2)
        pred1 = hyper_map(e2, self.hypernet(swap_pairs(t21)))  # view 2 -> view 1 by the partner's transformation
        pred2 = hyper_map(e1, self.hypernet(swap_pairs(t12)))
        p = self.equi_projector
        z = tf.concat([p(e1, training=training), p(e2, training=training)], 0)
        z_pred = tf.concat([p(pred1, training=training), p(pred2, training=training)], 0)
        temperature = self.options.stl_temperature
        equi = equivariance_loss(z, z_pred, temperature)
        a, b_ = transformation_pairs(t12, t21)
        trans = transformation_loss(self.trans_projector(a, training=training),
                                    self.trans_projector(b_, training=training), temperature)
        loss = equi + self.options.stl_trans_weight * trans
        return loss, {"stl/equivariance": equi, "stl/transformation": trans}
