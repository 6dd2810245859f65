"""Precise BN: a backbone's BN running statistics recomputed on one set of images, for comparisons.

During pretraining every training-mode call writes the running statistics, so an objective whose extra views
pass through the backbone (EquiMod's unaugmented x0, E-SSL's small rotated crops) changes the statistics every
evaluation reads, independently of what the objective teaches. Recomputing them for every arm on the same images
under the same transform takes that out of a comparison (Wu & Johnson, "Rethinking 'Batch' in BatchNorm", 2021;
fvcore's ``update_bn_stats``): each layer's running mean and variance become the mean over the batches of its batch
mean and unbiased batch variance, in training mode, layer inputs computed by the layers below in training mode.
"""

from __future__ import annotations

from collections.abc import Iterable

import keras
import tensorflow as tf


def batch_norm_layers(model: keras.Model) -> list[keras.layers.BatchNormalization]:
    """Every batch-normalisation layer of ``model``, nested ones included (none in a LayerNorm network)."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.BatchNormalization)]


def single_device_copy(backbone: keras.Model) -> keras.Model:
    """A copy of ``backbone`` with the same weights; called outside any strategy's scope, its variables are plain
    ones and its BN layers compute local statistics, whatever replicas trained the original (which stays as it
    is: the run's own export keeps the running statistics)."""
    copy = keras.models.clone_model(backbone)
    copy.set_weights(backbone.get_weights())
    return copy


def recompute_bn_statistics(backbone: keras.Model, batches: Iterable[tf.Tensor]) -> int:
    """Sets every BN layer's running mean and variance of ``backbone`` to the mean over ``batches`` of its batch
    statistics (unbiased variance, as PyTorch's running variance), computed in training mode; the trainable
    weights are not touched. Returns the number of batches (0 leaves the statistics as they were).

    The layers' momentum is set to 0 for each forward pass (the running statistics then hold that batch's) and
    restored afterwards: each layer's average is taken here, in float64, not by the layer's exponential average.
    """
    layers = batch_norm_layers(backbone)
    momenta = [layer.momentum for layer in layers]
    sums: list[list[tf.Tensor]] = [[tf.zeros(layer.moving_mean.shape, tf.float64)] * 2 for layer in layers]
    count = 0
    try:
        for layer in layers:
            layer.momentum = 0.0
        for images in batches:
            backbone(images, training=True)
            for acc, layer in zip(sums, layers, strict=True):
                acc[0] = acc[0] + tf.cast(layer.moving_mean, tf.float64)
                acc[1] = acc[1] + tf.cast(layer.moving_variance, tf.float64)
            count += 1
    finally:
        for layer, momentum in zip(layers, momenta, strict=True):
            layer.momentum = momentum
    if not count:
        return 0
    for (mean, variance), layer in zip(sums, layers, strict=True):
        layer.moving_mean.assign(tf.cast(mean / count, layer.moving_mean.dtype))
        layer.moving_variance.assign(tf.cast(variance / count, layer.moving_variance.dtype))
    return count
