"""MoCo v2 (Chen et al., 2020): momentum key encoder and a queue of past keys, InfoNCE at T=0.2.

As in MoCo v2 and the paper's reference code the loss is asymmetric (queries from view 1, keys from view 2)
and the AugSelf heads read f(v1) from the online backbone and f(v2) from the momentum backbone — the key
features are computed anyway, so AugSelf adds only its heads. Unlike the reference code, the queue stores
the momentum KEYS (gathered across replicas in replica order), not the online queries.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.losses.cross_replica import all_gather
from augself_tf.losses.info_nce import info_nce
from augself_tf.methods.augself_model import Forward, PretrainData
from augself_tf.methods.momentum import MomentumMethod
from augself_tf.models.resnet import mlp


def default_queue_size(num_examples: int, global_batch: int, paper_size: int = 65536) -> int:
    """The paper's 65536 keys (0.62× STL10's 105k images), capped at ~0.6× smaller datasets.

    A queue longer than the dataset fills with stale keys of the very images being contrasted: on 3.5k
    images the MoCo loss then rises during training instead of falling (measured; see docs/results.md).
    """
    cap = max(global_batch, int(0.6 * num_examples) // global_batch * global_batch)
    return min(paper_size, cap)


class MoCo(MomentumMethod):
    """MoCo v2 with projector d→hidden→out (BN in the hidden layer), momentum m, queue of K keys."""

    method_name = "moco"
    momentum_prefix = "key"

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_hidden: int = option(512, "Projector hidden size")
        projector_dim: int = option(128, "Projector output size")
        temperature: float = option(0.2, "Softmax temperature of the loss")
        key_momentum: float = option(0.999, "MoCo key-encoder EMA momentum")
        queue_size: int = option(65536, "MoCo queue length (keys)")

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o, sync = self.method_options, self.synchronized_bn
        self.temperature = o.temperature
        self.key_momentum = o.key_momentum
        self.queue_size = o.queue_size
        self.projector_dim = o.projector_dim
        self.projector = self.conditioned(mlp([o.projector_hidden, o.projector_dim], synchronized_bn=sync,
                                              name="projector"))
        self.create_momentum_encoder([o.projector_hidden, o.projector_dim])

    @classmethod
    def complete_options(cls, options, data: PretrainData, log=lambda _m: None):
        """Also ``queue_size`` when the run does not set it: :func:`default_queue_size` of the data."""
        options = super().complete_options(options, data, log)
        if options.get("queue_size") is None:
            options["queue_size"] = default_queue_size(data.num_examples, data.global_batch)
            log(f"MoCo queue: {options['queue_size']} keys for {data.num_examples} images "
                "(set --queue_size to override; the paper's flagfiles set 65536)")
        return options

    def build_heads(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))
        self.initialize_momentum_encoder(feature_dim)
        init = tf.math.l2_normalize(tf.random.stateless_normal([self.queue_size, self.projector_dim], [7, 7]), -1)
        # Identical on every replica: each replica writes the same gathered keys into its own copy. Aggregation
        # NONE: any other makes a replica-context write a merge_call, which the XLA-compiled replica function of
        # GPUs cannot make, and TPU variables refuse scatter_update unless it is NONE.
        self.queue = self.add_weight(shape=init.shape, initializer=keras.initializers.Constant(init.numpy()),
                                     trainable=False, name="queue", aggregation="none",
                                     autocast=False)  # .value is then the tf.Variable itself
        self.queue_ptr = self.add_weight(shape=(), dtype="int32", initializer="zeros", trainable=False,
                                         name="queue_ptr", aggregation="none")

    def momentum_at(self, step: tf.Tensor) -> float:
        """The constant `key_momentum`, as a Python float (1 − m in double precision)."""
        del step
        return self.key_momentum

    def method_forward(self, batch, training):
        f1 = self.backbone(batch["view1"], training=training)
        q = self.projector(self.head_input(f1, batch["omega1"], batch["omega2"]), training=training)
        q = tf.math.l2_normalize(tf.cast(q, tf.float32), -1)
        f2, k = self.encode_momentum(batch["view2"], batch["omega2"], training, batch["omega1"])
        f2 = tf.stop_gradient(f2)
        k = tf.stop_gradient(tf.math.l2_normalize(tf.cast(k, tf.float32), -1))
        loss = info_nce(q, k, tf.convert_to_tensor(self.queue), self.temperature)
        return Forward(f1, f2, loss, aux={"keys": k})

    def post_step(self, batch, forward):
        super().post_step(batch, forward)  # the key encoder's EMA update, then the queue
        keys = all_gather(forward.aux["keys"])
        n = tf.shape(keys)[0]
        idx = (tf.cast(self.queue_ptr, tf.int32) + tf.range(n)) % self.queue_size
        # In place: rewriting the whole 65536×128 queue every step costs more than the keys themselves.
        self.queue.value.scatter_update(tf.IndexedSlices(tf.cast(keys, self.queue.dtype), idx))
        self.queue_ptr.assign((self.queue_ptr + n) % self.queue_size)
