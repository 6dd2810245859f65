"""Precise BN: each layer's recomputed statistics equal the mean over batches of a NumPy computation of the batch
statistics of that layer's input (inputs taken in training mode), on our BN layer inside a real backbone."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from augself_tf.export.precise_bn import batch_norm_layers, recompute_bn_statistics, single_device_copy
from augself_tf.models.batch_norm import BatchNorm
from augself_tf.models.resnet import build_backbone


def _small_net() -> keras.Model:
    inputs = keras.Input([8, 8, 3])
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = BatchNorm(momentum=0.9, name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(5, 3, strides=2, padding="same")(x)
    x = BatchNorm(momentum=0.9, name="bn2")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(6)(x)
    outputs = BatchNorm(momentum=0.9, name="bn3")(x)
    return keras.Model(inputs, outputs)


def test_statistics_are_the_mean_of_each_layers_batch_statistics():
    keras.utils.set_random_seed(0)
    net = _small_net()
    rng = np.random.default_rng(0)
    batches = [rng.normal(1.0, 2.0, size=(16, 8, 8, 3)).astype(np.float32) for _ in range(3)]
    layers = batch_norm_layers(net)
    assert [layer.name for layer in layers] == ["bn1", "bn2", "bn3"]
    # Each BN layer's input, in training mode (the layers below normalise with their batch statistics).
    taps = keras.Model(net.input, [layer.input for layer in layers])
    expected_mean = [np.zeros(layer.moving_mean.shape) for layer in layers]
    expected_var = [np.zeros(layer.moving_mean.shape) for layer in layers]
    for b in batches:
        for i, x in enumerate(taps(b, training=True)):
            x = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
            expected_mean[i] += x.mean(0) / len(batches)
            expected_var[i] += x.var(0, ddof=1) / len(batches)  # PyTorch's running variance: unbiased
    kernels = [w.numpy() for w in net.trainable_weights]
    assert recompute_bn_statistics(net, batches) == 3
    for i, layer in enumerate(layers):
        np.testing.assert_allclose(layer.moving_mean.numpy(), expected_mean[i], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layer.moving_variance.numpy(), expected_var[i], rtol=1e-4, atol=1e-5)
        assert layer.momentum == 0.9  # restored
    for before, w in zip(kernels, net.trainable_weights, strict=True):
        np.testing.assert_array_equal(before, w.numpy())


def test_with_one_batch_inference_reproduces_training_mode():
    """One batch: the running statistics are that batch's, so inference computes what training mode did (up to the
    unbiased/biased variance, n/(n-1) over 64·8·8 values)."""
    keras.utils.set_random_seed(1)
    net = build_backbone("resnet18_cifar", width=0.0625)
    images = tf.random.stateless_uniform([64, 16, 16, 3], seed=[1, 2])
    assert recompute_bn_statistics(net, [images]) == 1
    np.testing.assert_allclose(net(images, training=False).numpy(), net(images, training=True).numpy(),
                               rtol=2e-2, atol=2e-3)


def test_the_copy_is_independent_and_no_batches_change_nothing():
    keras.utils.set_random_seed(2)
    net = _small_net()
    copy = single_device_copy(net)
    for a, b in zip(net.weights, copy.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert recompute_bn_statistics(copy, []) == 0
    recompute_bn_statistics(copy, [np.ones([4, 8, 8, 3], np.float32) * np.arange(3, dtype=np.float32)])
    assert not np.allclose(copy.get_layer("bn1").moving_mean.numpy(), net.get_layer("bn1").moving_mean.numpy())
    np.testing.assert_array_equal(net.get_layer("bn1").moving_mean.numpy(), 0.0)


if __name__ == "__main__":
    pytest.main([__file__])


@pytest.mark.slow
def test_a_never_trained_run_exports_its_initialisation_with_and_without_recomputed_statistics(tmp_path):
    """--max_steps=0 --precise_bn_images: no step; saved_model/ holds the initialiser's BN statistics (0 and 1),
    saved_model_precise_bn/ the same weights with statistics of the pretraining images (what a floor evaluates)."""
    from helpers import tiny_run

    from augself_tf.training.loop import train

    result = train(tiny_run(str(tmp_path / "run"), max_steps=0, precise_bn_images=40))
    assert result.steps == 0
    plain = tf.saved_model.load(str(tmp_path / "run" / "saved_model"))
    precise = tf.saved_model.load(str(tmp_path / "run" / "saved_model_precise_bn"))
    for a, b in zip(plain.trainable_weights, precise.trainable_weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    means = [(a.numpy(), b.numpy()) for a, b in zip(plain.non_trainable_weights, precise.non_trainable_weights,
                                                     strict=True) if "moving_mean" in a.name]
    assert means and all(np.all(a == 0.0) for a, _ in means)
    assert all(np.all(np.isfinite(b)) for _, b in means) and sum(np.abs(b).sum() > 0 for _, b in means) == len(means)
    images = tf.random.stateless_uniform([4, 16, 16, 3], seed=[0, 1])
    assert not np.allclose(plain.signatures["serving_default"](images=images)["features"].numpy(),
                           precise.signatures["serving_default"](images=images)["features"].numpy())
