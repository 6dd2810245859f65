"""SwAV (Caron et al., 2020) without multi-crop and without queue, as in the paper's STL10 setting.

z = l2-normalise(g(f(v))), scores = z·C with C the 100 prototypes (a bias-free Dense whose columns are
re-normalised at the start of every step). Codes q come from Sinkhorn-Knopp (ε = 0.05, 3 iterations) over
the GLOBAL batch; swapped prediction: L = H(q1, softmax(s2/τ)) + H(q2, softmax(s1/τ)), τ = 0.1, the SUM of
the two terms as the paper's reference code. Both are `augself_tf.losses.swapped_prediction`.

The prototypes get zero gradient for the first `freeze_prototypes_steps` steps (default: one epoch — the
reference code's 410 iterations are one STL10 epoch at batch 256). The coupled weight decay the base step
adds then only rescales each prototype, which the per-step normalisation undoes, so their directions stay
exactly frozen.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from augself_tf.flag_fields import option
from augself_tf.losses.swapped_prediction import sinkhorn, swapped_prediction
from augself_tf.methods.augself_model import AugSelfModel
from augself_tf.models.resnet import mlp
from augself_tf.models.torch_init import Linear


class SwAV(AugSelfModel):
    """Projector d→2048→128 (BN+ReLU hidden, no BN at the end), prototypes, Sinkhorn codes, swapped loss.

    Args:
      num_prototypes: 100 in the paper.
      sinkhorn_epsilon / sinkhorn_iterations: ε = 0.05, 3 iterations.
      temperature: τ = 0.1 of the prediction softmax.
      freeze_prototypes_steps: steps with frozen prototypes; -1 = the first epoch (`steps_per_epoch`).
      steps_per_epoch: passed by the training loop; used when freeze_prototypes_steps is -1.
    """

    method_name = "swav"

    @dataclasses.dataclass(frozen=True)
    class Options:
        projector_hidden: int = option(2048, "Projector hidden size")
        projector_dim: int = option(128, "Projector output size")
        num_prototypes: int = option(100, "SwAV prototypes")
        sinkhorn_epsilon: float = option(0.05, "SwAV Sinkhorn-Knopp ε")
        sinkhorn_iterations: int = option(3, "SwAV Sinkhorn-Knopp iterations")
        temperature: float = option(0.1, "Softmax temperature of the loss")
        freeze_prototypes_steps: int = option(-1, "SwAV: steps with frozen prototypes (-1 = the first epoch)")
        steps_per_epoch: int | None = None  # the training loop's

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o = self.method_options
        self.epsilon = float(o.sinkhorn_epsilon)
        self.sinkhorn_iterations = int(o.sinkhorn_iterations)
        self.temperature = float(o.temperature)
        freeze = o.freeze_prototypes_steps if o.freeze_prototypes_steps >= 0 else (o.steps_per_epoch or 0)
        self.freeze_prototypes_steps = int(freeze)
        self.projector = self.conditioned(mlp([o.projector_hidden, o.projector_dim],
                                              synchronized_bn=self.synchronized_bn, name="projector"))
        self.prototypes = Linear(o.num_prototypes, use_bias=False, name="prototypes")

    def build_heads(self, feature_dim: int) -> None:
        self.prototypes(self.projector(tf.zeros([2, feature_dim])))
        self.normalize_prototypes()

    def normalize_prototypes(self) -> None:
        """Scales every prototype (a kernel column) to unit length."""
        kernel = self.prototypes.kernel
        kernel.assign(tf.math.l2_normalize(tf.convert_to_tensor(kernel), 0))

    def scores(self, f: tf.Tensor, training: bool, frozen: tf.Tensor | bool = False) -> tf.Tensor:
        """Cosine scores [b, K] of l2-normalised projections against the prototypes (no gradient to the
        prototypes when `frozen`)."""
        z = tf.math.l2_normalize(tf.cast(self.projector(f, training=training), tf.float32), -1)
        kernel = tf.cast(tf.convert_to_tensor(self.prototypes.kernel), tf.float32)
        gate = tf.cast(tf.logical_not(tf.convert_to_tensor(frozen)), tf.float32)
        kernel = tf.stop_gradient(kernel) + gate * (kernel - tf.stop_gradient(kernel))
        return tf.matmul(z, kernel)

    def method_loss(self, f1, f2, batch, training):
        if training:
            self.normalize_prototypes()
        frozen = False
        if training and self.freeze_prototypes_steps > 0 and getattr(self, "optimizer", None) is not None:
            frozen = self.optimizer.iterations < self.freeze_prototypes_steps
        s1, s2 = self.scores(f1, training, frozen), self.scores(f2, training, frozen)
        q1 = sinkhorn(s1, self.epsilon, self.sinkhorn_iterations)
        q2 = sinkhorn(s2, self.epsilon, self.sinkhorn_iterations)
        loss = swapped_prediction(s1, s2, q1, q2, self.temperature)
        return loss, {"swav/prototypes_frozen": tf.cast(frozen, tf.float32)}
