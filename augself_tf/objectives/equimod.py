"""EquiMod (Devillers & Lefort, ICLR 2023): an equivariance module beside the method's invariance loss.

A third view x0 of every image is its evaluation view (no augmentation; ``ViewSpec(eval_view=True)``). With h the
backbone's features, y = g(h) is the equivariant head (Linear–BN–ReLU ×2, Linear, BN without affine: d → 2048 →
2048 → 128), t_k = p(ω_k) embeds view k's ABSOLUTE augmentation parameters (Linear, BN: → 128) and the predictor
u (Linear, BN without affine: 256 → 128) maps [y0, t_k] to ŷ_k, the prediction of y_k. The loss is

    L = λ · NT-Xent_τ([y1; y2], [ŷ1; ŷ2]),   τ = 0.2,

one NT-Xent over the 4B vectors of the global batch (``augself_tf.losses.nt_xent``): y_k and ŷ_k of the same view
are positives, in both directions; every other y and ŷ of either view is a negative; nothing is stop-gradient
(y0, y_k and ŷ_k all carry gradients into the backbone). As the reference code (ADevillers/EquiMod, src/model.py,
src/main.py), g runs on [h0; h1; h2] at once and p, u on both views at once, so their batch statistics are over
those joint batches.

Two controls (``--equimod_control``) separate what EquiMod's ω brings from what its loss brings anyway: ``negatives``
drops x0 and ω and keeps the NT-Xent between the two views' heads, NT-Xent_τ(y1, y2) (the negatives alone, what the
term adds to a method without negatives such as SimSiam); ``shuffled_omega`` keeps x0 and the whole module but feeds
each view the ω of the next image of the batch (a roll by one: every image gets another's, deterministically on every
replica and on resume), so the predictor can no longer use the true ω.

ω (``equimod_parameters``): the reference feeds 17 numbers per view, standardised by the dataset's empirical mean
and std. Ours are read from the view's ω (``augself_tf.augment``): crop centre and size as fractions of the original
image, flip, jitter applied, the four jitter factors encoded in [0, 1], grayscale, blur applied and σ / σ_max,
solarize applied and its threshold, rotation k one-hot: 19 numbers. docs/experiments.md ("EquiMod") maps each.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.photometric import color_identity_omega
from augself_tf.augment.views import ViewPlan, ViewSpec
from augself_tf.flag_fields import option
from augself_tf.losses.nt_xent import nt_xent
from augself_tf.models.resnet import batch_norm
from augself_tf.models.torch_init import Linear
from augself_tf.objectives.base import Objective

#: the size of `equimod_parameters`' vector.
PARAMETERS_DIM = 19
#: --equimod_control's choices (the module docstring says what each keeps).
CONTROLS = ("none", "negatives", "shuffled_omega")


def equimod_parameters(omega: dict[str, tf.Tensor], config: AugmentConfig) -> tf.Tensor:
    """EquiMod's description of a batch of views [B, 19] from their ω (entries [B, k]).

    In order: crop (centre y, centre x, height, width as fractions of the original image: 4), flip (1), jitter
    applied (1), jitter factors b, c, s, hue as (factor − lo) / (hi − lo), the identity's when not applied (4),
    grayscale (1), blur applied (1), blur σ / σ_max, 0 when not applied (1), solarize applied (1), solarize
    threshold δ, 1 when not applied (1), rotation k as one-hot (4).
    """
    def get(name: str) -> tf.Tensor:
        return tf.cast(omega[name], tf.float32)

    color = get("color")
    identity = tf.constant(color_identity_omega(config), tf.float32)
    # ω_color is exactly the identity's encoding when the jitter is not applied; a drawn factor equals it with
    # probability 0, so "any component moved" is the reference's "jitter applied" flag
    jittered = tf.cast(tf.reduce_any(tf.not_equal(color, identity), -1, keepdims=True), tf.float32)
    blur = get("blur")
    solarize = get("solarize")
    rotation = tf.one_hot(tf.cast(tf.round(get("rotation")[..., 0]), tf.int32), 4, dtype=tf.float32)
    return tf.concat([get("crop"), get("flip"), jittered, color, get("grayscale"), tf.cast(blur > 0, tf.float32),
                      blur, tf.cast(solarize < 1, tf.float32), solarize, rotation], -1)


def _stack(dims: list[int], synchronized_bn: bool, name: str, last_affine: bool) -> keras.Sequential:
    """Linear(no bias)–BN–ReLU for every size but the last, then Linear(no bias)–BN (with β, γ only if
    ``last_affine``): the reference's heads, all float32."""
    layers: list[keras.layers.Layer] = []
    for i, d in enumerate(dims):
        last = i == len(dims) - 1
        layers.append(Linear(d, use_bias=False, name=f"{name}_fc{i + 1}", dtype="float32"))
        affine = not last or last_affine
        layers.append(batch_norm(synchronized_bn, name=f"{name}_bn{i + 1}", center=affine, scale=affine,
                                 dtype="float32"))
        if not last:
            layers.append(keras.layers.ReLU(name=f"{name}_relu{i + 1}", dtype="float32"))
    return keras.Sequential(layers, name=name)


class EquiMod(Objective):
    """EquiMod's heads g (equivariant projector), p (ω embedding), u (predictor) and its NT-Xent.

    Composes with the methods whose `Forward` features f1, f2 are the online backbone's on views 1 and 2 (not
    MoCo or LooC, whose view 2 goes through the key encoder). ``--augself`` and ``--condition`` compose: EquiMod
    reads the features alone, beside AugSelf's heads and the conditioned projector.
    """

    key = "equimod"
    weight_option = "equimod_weight"
    methods = ("none", "simclr", "byol", "simsiam", "swav", "supervised", "mocov3")

    @dataclasses.dataclass(frozen=True)
    class Options:
        """EquiMod's flags, defaults from the paper's code."""

        equimod_weight: float = option(0.0, "EquiMod: weight λ of its equivariance loss (0 = off; the paper: 1)")
        equimod_hidden: int = option(2048, "EquiMod: hidden size of the equivariant head y = g(h) (two hidden "
                                           "layers)")
        equimod_dim: int = option(128, "EquiMod: size of y, of the predictor's output and of the ω embedding")
        equimod_temperature: float = option(0.2, "EquiMod: softmax temperature of its NT-Xent")
        equimod_control: str = option("none", "EquiMod: a control run in EquiMod's place: 'negatives' (no x0, no "
                                              "ω: the NT-Xent between the two views' heads alone) or "
                                              "'shuffled_omega' (each view gets another image's ω); 'none' is "
                                              "EquiMod",
                                      choices=CONTROLS)

    def __init__(self, options=None, **kwargs) -> None:
        super().__init__(options, **kwargs)
        o = self.options
        for name in ("equimod_hidden", "equimod_dim"):
            if getattr(o, name) < 1:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(o, name)}")
        if not o.equimod_temperature > 0:
            raise ValueError(f"--equimod_temperature must be > 0, got {o.equimod_temperature}")
        self.temperature = float(o.equimod_temperature)
        self.control = o.equimod_control
        self.heads: dict[str, keras.Sequential] = {}

    @classmethod
    def extend_views(cls, plan: ViewPlan, options: EquiMod.Options) -> ViewPlan:
        """The run's views and x0, the evaluation view, after them (the ``negatives`` control has no x0)."""
        if options.equimod_control == "negatives":
            return plan
        return plan.with_view(ViewSpec(eval_view=True))

    def build_objective(self, model) -> None:
        o, sync = self.options, model.synchronized_bn
        self.heads = {"projector": _stack([o.equimod_hidden, o.equimod_hidden, o.equimod_dim], sync,
                                          "equimod_projector", last_affine=False)}
        self.heads["projector"](tf.zeros([2, model.feature_dim]), training=False)
        if self.control == "negatives":  # no ω: no embedding, no predictor (nothing the optimizer would not train)
            return
        self.heads["omega"] = _stack([o.equimod_dim], sync, "equimod_omega", last_affine=True)
        self.heads["predictor"] = _stack([o.equimod_dim], sync, "equimod_predictor", last_affine=False)
        self.heads["omega"](tf.zeros([2, PARAMETERS_DIM]), training=False)
        self.heads["predictor"](tf.zeros([2, 2 * o.equimod_dim]), training=False)

    def predictions(self, f0: tf.Tensor, f1: tf.Tensor, f2: tf.Tensor, omega1: dict, omega2: dict,
                    config: AugmentConfig, training: bool) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(y0, [y1; y2], [ŷ1; ŷ2]) from the features of x0, x1, x2 [b, d] and the ω of x1, x2."""
        b = tf.shape(f0)[0]
        h = tf.cast(tf.concat([f0, f1, f2], 0), tf.float32)
        y = self.heads["projector"](h, training=training)
        y0, yt = y[:b], y[b:]
        params = [equimod_parameters(omega, config) for omega in (omega1, omega2)]
        if self.control == "shuffled_omega":
            params = [tf.roll(p, shift=1, axis=0) for p in params]
        t = self.heads["omega"](tf.concat(params, 0), training=training)
        predicted = self.heads["predictor"](tf.concat([tf.concat([y0, y0], 0), t], -1), training=training)
        return y0, yt, predicted

    def objective_loss(self, model, batch, forward, training):
        """NT-Xent_τ([y1; y2], [ŷ1; ŷ2]); logs the equivariance gain: mean cos(y_k, ŷ_k) − cos(y_k, y0). The
        ``negatives`` control: NT-Xent_τ(y1, y2)."""
        if self.control == "negatives":
            y = self.heads["projector"](tf.cast(tf.concat([forward.f1, forward.f2], 0), tf.float32),
                                        training=training)
            y1, y2 = tf.split(y, 2)
            return nt_xent(y1, y2, self.temperature), {}
        f0 = model.backbone(batch[f"view{self.view_index(model) + 1}"], training=training)
        y0, yt, predicted = self.predictions(f0, forward.f1, forward.f2, batch["omega1"], batch["omega2"],
                                             model.augment_config, training)
        loss = nt_xent(yt, predicted, self.temperature)
        unit_yt = tf.math.l2_normalize(yt, -1)
        gain = tf.reduce_sum(unit_yt * (tf.math.l2_normalize(predicted, -1)
                                        - tf.math.l2_normalize(tf.concat([y0, y0], 0), -1)), -1)
        return loss, {"equimod/gain": tf.reduce_mean(gain)}
