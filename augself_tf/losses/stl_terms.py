"""STL's pieces (Yu et al., "Self-supervised Transformation Learning for Equivariant Representations", NeurIPS 2024).

A batch holds aligned pairs: examples 2i and 2i+1 had the same crop, colour and grayscale draws in view 1, and
the same in view 2. With t12 = T([y1, y2]) and t21 = T([y2, y1]) the representations of the transformation from
view 1 to view 2 and back (T an MLP), STL's two terms besides invariance are

- equivariance: ŷ1 = W(t21 of the partner)·y2 and ŷ2 = W(t12 of the partner)·y1, W(t) the k×k matrix a
  hypernetwork emits from t; NT-Xent between [P(y1); P(y2)] and [P(ŷ1); P(ŷ2)] (P the equivariance projector);
- transformation: NT-Xent between [t12 of the pairs' first examples; t21 of them] and the same of their second
  examples (through the transformation projector), so that t is the same for equal transformations of two images.

The partner's t, not the example's own, moves y: the example's own t12 was computed from y2 itself. Both NT-Xent
terms are SimCLR's loss (`nt_xent`: cosine logits / T, the anchor masked out, negatives from every replica), as
STL's ``info_nce_loss``; nothing is stop-gradient. The layers (T, W, the projectors) are the objective's; these
are the tensor operations between them.
"""

from __future__ import annotations

import tensorflow as tf

from augself_tf.losses.nt_xent import nt_xent


def swap_pairs(x: tf.Tensor) -> tf.Tensor:
    """Rows 2i and 2i+1 exchanged: each example's partner, [b, ...] with b even (STL's ``shifted_idxs``)."""
    b = tf.shape(x)[0]
    order = tf.reshape(tf.reverse(tf.reshape(tf.range(b), [-1, 2]), [1]), [-1])
    return tf.gather(x, order)


def hyper_map(y: tf.Tensor, maps: tf.Tensor) -> tf.Tensor:
    """W_i·y_i for every row i: y [b, k], maps [b, k·k] read row-major as W_i [k out, k in] (STL's
    ``view(-1, out, in)``); returns [b, k]."""
    k = tf.shape(y)[-1]
    w = tf.reshape(maps, [-1, k, k])
    return tf.einsum("boi,bi->bo", w, y)


def transformation_pairs(t12: tf.Tensor, t21: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The positives of the transformation term: ([t12 of the even rows; t21 of the even rows], the same of the
    odd rows), each [b, d] from t12, t21 [b, d] (STL's ``y_trans1``, ``y_trans2``)."""
    return (tf.concat([t12[0::2], t21[0::2]], 0), tf.concat([t12[1::2], t21[1::2]], 0))


def equivariance_loss(z: tf.Tensor, z_pred: tf.Tensor, temperature: float) -> tf.Tensor:
    """NT-Xent between the projections z = [P(y1); P(y2)] and the predicted ones [P(ŷ1); P(ŷ2)], [2b, D] each."""
    return nt_xent(z, z_pred, temperature)


def transformation_loss(u1: tf.Tensor, u2: tf.Tensor, temperature: float) -> tf.Tensor:
    """NT-Xent between the projected `transformation_pairs`, [b, D] each."""
    return nt_xent(u1, u2, temperature)
