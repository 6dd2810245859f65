"""LooC (Xiao, Wang, Efros, Darrell, "What Should Not Be Contrastive in Contrastive Learning", ICLR 2021): a
shared backbone, one projection head per embedding space, MoCo v2's momentum key encoder and a queue per space.

Views (``view_plan``): q and k0 with every augmentation drawn independently (MoCo's pair: views 1 and 2 of
any plan), then one key k_i per left-out augmentation i (``--looc_augmentations``) that copies q's draw of i
and draws the rest afresh, so N = 2 + n. Spaces: Z_0 invariant to all augmentations, Z_i sensitive to i. The
loss (``augself_tf.losses.looc_nce``) sums one InfoNCE per space; "k_j differs from q in augmentation i" is
read from the views' ω. A left-out augmentation is switched on at its declared probability when AugSelf
would predict it (rotation: k·90° with probability 0.5), as LooC adds rotation to MoCo's augmentations.

Representations: the backbone's features (LooC, the SavedModel's default signature) and every space's
l2-normalised head output concatenated (LooC++, the ``looc_plus_features`` signature).

AugSelf composes as with MoCo: its heads read f(q) from the online backbone and f(k0) from the momentum
backbone, with ω of views 1 and 2. ``--condition`` is refused (see ``LooC.__init__``). Choices the paper
leaves open: docs/experiments.md ("LooC").
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from augself_tf.augment.views import ViewPlan, check_copyable, leave_one_out, view_keys
from augself_tf.flag_fields import option
from augself_tf.losses.cross_replica import all_gather
from augself_tf.losses.looc_nce import looc_nce
from augself_tf.methods.augself_model import Forward, PretrainData
from augself_tf.methods.moco import MoCo, default_queue_size
from augself_tf.methods.momentum import MomentumMethod
from augself_tf.models.resnet import mlp

DEFAULT_AUGMENTATIONS = "color,rotation"


def parse_looc_augmentations(text: str | None) -> tuple[str, ...]:
    """``"color,rotation"`` -> ("color", "rotation"): registered steps with parameters to copy, at least one.

    Raises:
      ValueError: an empty list, or a name that is not a step with parameters ω (one line, the choices).
    """
    names: list[str] = []
    for raw in (DEFAULT_AUGMENTATIONS if text is None else text).split(","):
        name = raw.strip()
        if name:
            check_copyable(name, "--looc_augmentations")
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError("--looc_augmentations: name at least one augmentation to leave out, e.g. color,rotation")
    return tuple(names)


class SpaceHeads(keras.layers.Layer):
    """One projection head (d→hidden→dim, BN in the hidden layer) per embedding space: [B, d] -> [B, S, dim]."""

    def __init__(self, spaces: tuple[str, ...], hidden: int, dim: int, *, synchronized_bn: bool, name: str) -> None:
        super().__init__(name=name)
        self.spaces = spaces
        self.heads = [mlp([hidden, dim], synchronized_bn=synchronized_bn, name=f"{name}_{space}") for space in spaces]

    def build(self, input_shape) -> None:
        for head in self.heads:
            head.build(input_shape)
        self.built = True

    def call(self, features: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return tf.stack([head(features, training=training) for head in self.heads], axis=1)


class PlusFeatures(keras.layers.Layer):
    """LooC++'s representation: every space's head output, l2-normalised, concatenated: [B, d] -> [B, S·dim]."""

    def __init__(self, heads: SpaceHeads) -> None:
        super().__init__(name="looc_plus")
        self.heads = heads

    def call(self, features: tf.Tensor) -> tf.Tensor:
        z = tf.math.l2_normalize(tf.cast(self.heads(features, training=False), tf.float32), -1)
        return tf.reshape(z, [tf.shape(z)[0], z.shape[1] * z.shape[2]])


class LooC(MomentumMethod):
    """LooC over MoCo v2: spaces Z_0 and one Z_i per left-out augmentation, a queue of K keys per space."""

    method_name = "looc"
    momentum_prefix = "key"  # the key encoder, as MoCo's

    @dataclasses.dataclass(frozen=True)
    class Options(MoCo.Options):  # MoCo v2's, one head and one queue of them per space
        looc_augmentations: str = option(DEFAULT_AUGMENTATIONS, "LooC: comma-separated augmentations left out, one "
                                         "embedding space and one extra key view each (color, rotation, ...)")

    @classmethod
    def view_plan(cls, options: dict) -> ViewPlan:
        """q, k0, then one key per left-out augmentation copying q's draw of it."""
        return leave_one_out(parse_looc_augmentations(options.get("looc_augmentations")))

    @classmethod
    def required_steps(cls, options: dict) -> tuple[str, ...]:
        """The left-out augmentations: each runs at its AugSelf-predicted probability unless its flag is set."""
        return parse_looc_augmentations(options.get("looc_augmentations"))

    @classmethod
    def complete_options(cls, options, data: PretrainData, log=lambda _m: None):
        """Also ``queue_size`` when the run does not set it, as MoCo (``default_queue_size``)."""
        options = super().complete_options(options, data, log)
        if options.get("queue_size") is None:
            options["queue_size"] = default_queue_size(data.num_examples, data.global_batch)
            log(f"LooC queues: {options['queue_size']} keys per space for {data.num_examples} images")
        return options

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        if self.conditioning is not None:
            raise ValueError("--condition does not compose with --method=looc: a projector told each view's ω would "
                             "see the very augmentation its space must learn to tell apart from the images")
        o = self.method_options
        self.left_out = parse_looc_augmentations(o.looc_augmentations)
        self.views = leave_one_out(self.left_out)
        self.spaces = ("z0", *self.left_out)
        self.temperature, self.key_momentum = o.temperature, o.key_momentum
        self.queue_size, self.projector_dim = o.queue_size, o.projector_dim
        self.projector = self._space_heads("projector")
        # The key encoder: a clone of the backbone and every space's head (MomentumMethod updates it).
        self.create_momentum_encoder(projector=self._space_heads("key_projector"))
        self.plus_features = PlusFeatures(self.projector)

    def _space_heads(self, name: str) -> SpaceHeads:
        o = self.method_options
        return SpaceHeads(self.spaces, o.projector_hidden, o.projector_dim, synchronized_bn=self.synchronized_bn,
                          name=name)

    def build_heads(self, feature_dim: int) -> None:
        self.projector.build((None, feature_dim))
        self.initialize_momentum_encoder(feature_dim)
        shape = [self.queue_size, len(self.spaces), self.projector_dim]
        init = tf.math.l2_normalize(tf.random.stateless_normal(shape, [7, 7]), -1)
        # One queue per space, stored as [K, S, D] so that a step's keys are one scatter along K. Aggregation NONE,
        # each replica writing the same gathered keys into its own copy: as MoCo's queue (no merge_call).
        self.queue = self.add_weight(shape=init.shape, initializer=keras.initializers.Constant(init.numpy()),
                                     trainable=False, name="queue", aggregation="none", autocast=False)
        self.queue_ptr = self.add_weight(shape=(), dtype="int32", initializer="zeros", trainable=False,
                                         name="queue_ptr", aggregation="none")

    def momentum_at(self, step: tf.Tensor) -> float:
        del step
        return self.key_momentum

    def exported_features(self) -> dict[str, keras.layers.Layer]:
        return {"looc_plus_features": self.plus_features}

    def differs(self, omega_q: dict, omega_k: dict) -> tf.Tensor:
        """[B, S]: 1.0 where key k's draw of a space's augmentation differs from q's (exact ω comparison), else
        0.0; Z_0's column is 1. Float, not bool: oneDNN's concat and gather take bool only on some CPUs."""
        columns = [tf.ones_like(tf.cast(omega_q[self.left_out[0]][:, 0], tf.float32))]
        for name in self.left_out:
            gap = tf.abs(tf.cast(omega_q[name], tf.float32) - tf.cast(omega_k[name], tf.float32))
            columns.append(tf.sign(tf.reduce_max(gap, axis=-1)))
        return tf.stack(columns, axis=1)

    def method_forward(self, batch, training):
        f1 = self.backbone(batch["view1"], training=training)
        q = tf.math.l2_normalize(tf.cast(self.projector(f1, training=training), tf.float32), -1)
        keys, differs, f2 = [], [], None
        for j in range(1, self.views.num_views):  # k0, then k_i: each its own pass (its own BN batch, as MoCo's)
            view, omega, _ = view_keys(j)
            f, k = self.encode_momentum(batch[view], batch[omega], training)
            f2 = tf.stop_gradient(f) if f2 is None else f2
            keys.append(tf.stop_gradient(tf.math.l2_normalize(tf.cast(k, tf.float32), -1)))
            differs.append(self.differs(batch["omega1"], batch[omega]))
        total, per_space = looc_nce(q, tf.stack(keys), tf.convert_to_tensor(self.queue), tf.stack(differs),
                                    self.temperature)
        logs = {f"looc/{space}_loss": per_space[s] for s, space in enumerate(self.spaces)}
        return Forward(f1, f2, total, logs, aux={"keys": keys[0]})

    def post_step(self, batch, forward):
        super().post_step(batch, forward)  # the key encoder's EMA, before the queue as MoCo
        # k0's embedding in every space, gathered in replica order, enters every space's queue.
        keys = all_gather(forward.aux["keys"])
        n = tf.shape(keys)[0]
        idx = (tf.cast(self.queue_ptr, tf.int32) + tf.range(n)) % self.queue_size
        self.queue.value.scatter_update(tf.IndexedSlices(tf.cast(keys, self.queue.dtype), idx))
        self.queue_ptr.assign((self.queue_ptr + n) % self.queue_size)
