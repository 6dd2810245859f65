"""LooC's loss (Xiao et al., "What Should Not Be Contrastive in Contrastive Learning", ICLR 2021, §3): one
MoCo-style InfoNCE per embedding space, summed.

Spaces: Z_0, invariant to every augmentation, and Z_i for each left-out augmentation i (1 <= i <= n). Keys: k_0
(every augmentation drawn independently of the query q) and k_i (q's draw of augmentation i, the others
afresh); key j is the positive of space j. In

- Z_0 every key is a positive for q: the loss is the mean over the n + 1 keys of InfoNCE(q, k_j | queue_0).
- Z_i only k_i is: InfoNCE(q, k_i | queue_i and the keys k_j, j != i, of the same image whose draw of
  augmentation i differs from q's). A key that happens to equal q in augmentation i (both un-rotated, say) is
  neither a positive nor a negative of Z_i: it is left out of the softmax.

The total is the sum over the n + 1 spaces. A pure function of tensors (no model, no variables); the
choices the paper leaves open are listed in docs/experiments.md ("LooC").
"""

from __future__ import annotations

import tensorflow as tf


def _nce(positive: tf.Tensor, negatives: tf.Tensor, temperature: float) -> tf.Tensor:
    """Mean over the batch of -log softmax of the positive logit among [positive, negatives] (logits already
    similarities; masked negatives are -inf)."""
    logits = tf.concat([positive[:, None], negatives], axis=1) / temperature
    return tf.reduce_mean(tf.reduce_logsumexp(logits, axis=1) - logits[:, 0])


def looc_nce(
    q: tf.Tensor, keys: tf.Tensor, queues: tf.Tensor, differs: tf.Tensor, temperature: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """LooC's loss on one batch: (total, per-space losses [S]).

    Args:
      q: the query's embeddings in every space, l2-normalised: [B, S, D] (S = n + 1 spaces, Z_0 first).
      keys: the keys' embeddings in every space, l2-normalised, gradient stopped by the caller: [S, B, S, D]
        (key j first, then the batch, then the space; key j is k_0 for j = 0, else k_j).
      queues: every space's queue of past keys, l2-normalised: [Q, S, D].
      differs: whether key j's draw of space s's augmentation differs from q's, [S, B, S] (key, example,
        space), bool or 1.0 / 0.0; read for s >= 1 and j != s only.
      temperature: the softmax temperature.

    Returns:
      (sum over spaces of the space's loss, the per-space losses [S]) as float32.
    """
    q = tf.cast(q, tf.float32)
    keys = tf.cast(keys, tf.float32)
    queues = tf.cast(queues, tf.float32)
    differs = tf.cast(differs, tf.float32)
    num_spaces = int(q.shape[1])
    per_space = []
    # Z_0: every key is a positive, each in its own softmax against the queue.
    queue_logits = tf.einsum("bd,qd->bq", q[:, 0], queues[:, 0])
    positives = tf.einsum("bd,kbd->kb", q[:, 0], keys[:, :, 0])
    per_space.append(tf.reduce_mean(tf.stack([_nce(positives[j], queue_logits, temperature)
                                              for j in range(num_spaces)])))
    for s in range(1, num_spaces):
        queue_logits = tf.einsum("bd,qd->bq", q[:, s], queues[:, s])
        key_logits = tf.einsum("bd,kbd->bk", q[:, s], keys[:, :, s])  # [B, S]: q against every key in Z_s
        others = [j for j in range(num_spaces) if j != s]
        negative = tf.transpose(tf.gather(differs[:, :, s], others)) > 0.5  # [B, S - 1]
        in_batch = tf.where(negative, tf.gather(key_logits, others, axis=1), -float("inf"))
        per_space.append(_nce(key_logits[:, s], tf.concat([in_batch, queue_logits], axis=1), temperature))
    per_space = tf.stack(per_space)
    return tf.reduce_sum(per_space), per_space
