"""MoCo v2 (Chen et al., 2020): momentum key encoder and a queue of past keys, InfoNCE at T=0.2.

As in MoCo v2 and the paper's reference code the loss is asymmetric (queries from view 1, keys from view 2)
and the AugSelf heads read f(v1) from the online backbone and f(v2) from the momentum backbone — the key
features are computed anyway, so AugSelf adds only its heads. Unlike the reference code, the queue stores
the momentum KEYS (gathered across replicas in replica order), not the online queries.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from augself_tf.methods.base import AugSelfModel
from augself_tf.models.resnet import mlp


def info_nce(q: tf.Tensor, k: tf.Tensor, queue: tf.Tensor, temperature: float) -> tf.Tensor:
    """Mean cross-entropy of the positive key against the queue's negatives (q, k, queue l2-normalised)."""
    l_pos = tf.reduce_sum(q * k, -1, keepdims=True)
    l_neg = tf.matmul(q, queue, transpose_b=True)
    logits = tf.concat([l_pos, l_neg], 1) / temperature
    labels = tf.zeros([tf.shape(q)[0]], tf.int32)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


class MoCo(AugSelfModel):
    """MoCo v2 with projector d→hidden→out (BN in the hidden layer), momentum m, queue of K keys."""

    method_name = "moco"
    options = {
        "projector_hidden": (512, "Projector hidden size (paper: 512 STL10; 2048 MoCo ImageNet100)"),
        "projector_dim": (128, "Projector output size"),
        "temperature": (0.2, "Softmax temperature of the contrastive loss"),
        "key_momentum": (0.999, "MoCo key-encoder EMA momentum"),
        "queue_size": (65536, "MoCo queue length (keys)"),
    }

    def __init__(self, backbone, *, projector_hidden: int = 512, projector_dim: int = 128,
                 temperature: float = 0.2, key_momentum: float = 0.999, queue_size: int = 65536,
                 **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        self.temperature = temperature
        self.momentum = key_momentum
        self.queue_size = queue_size
        self.proj_dim = projector_dim
        sync = self.synchronized_bn
        self.projector = mlp([projector_hidden, projector_dim], synchronized_bn=sync, name="projector")
        self.key_backbone = keras.models.clone_model(backbone)
        self.key_projector = mlp([projector_hidden, projector_dim], synchronized_bn=sync, name="key_projector")

    def build_method(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))
        self.key_projector(tf.zeros([2, feature_dim]))
        self.key_backbone(tf.zeros([2, 8, 8, 3]))
        for online, key in self._encoder_pairs():
            key.assign(online)
        init = tf.math.l2_normalize(tf.random.stateless_normal([self.queue_size, self.proj_dim], [7, 7]), -1)
        # Identical on every replica: each replica writes the same gathered keys.
        self.queue = self.add_weight(shape=init.shape, initializer=keras.initializers.Constant(init.numpy()),
                                     trainable=False, name="queue", aggregation="only_first_replica",
                                     autocast=False)  # .value is then the tf.Variable itself
        self.queue_ptr = self.add_weight(shape=(), dtype="int32", initializer="zeros", trainable=False,
                                         name="queue_ptr", aggregation="only_first_replica")

    def target_variables(self):
        return self.key_backbone.trainable_variables + self.key_projector.trainable_variables

    def _encoder_pairs(self):
        online = self.backbone.weights + self.projector.weights
        key = self.key_backbone.weights + self.key_projector.weights
        return list(zip(online, key, strict=True))

    def method_forward(self, batch, training):
        f1 = self.backbone(batch["view1"], training=training)
        q = tf.math.l2_normalize(tf.cast(self.projector(f1, training=training), tf.float32), -1)
        f2 = tf.stop_gradient(self.key_backbone(batch["view2"], training=training))
        k = tf.math.l2_normalize(tf.cast(self.key_projector(f2, training=training), tf.float32), -1)
        k = tf.stop_gradient(k)
        loss = info_nce(q, k, tf.convert_to_tensor(self.queue), self.temperature)
        return f1, f2, loss, {"_keys": k}

    def post_step(self, batch, aux):
        m = self.momentum
        for online, key in self._encoder_pairs():
            if online.trainable:
                key.assign(m * key + (1.0 - m) * online)
        keys = tf.distribute.get_replica_context().all_gather(aux["_keys"], axis=0)
        n = tf.shape(keys)[0]
        idx = (tf.cast(self.queue_ptr, tf.int32) + tf.range(n)) % self.queue_size
        # In place: rewriting the whole 65536×128 queue every step costs more than the keys themselves.
        self.queue.value.scatter_update(tf.IndexedSlices(tf.cast(keys, self.queue.dtype), idx))
        self.queue_ptr.assign((self.queue_ptr + n) % self.queue_size)
