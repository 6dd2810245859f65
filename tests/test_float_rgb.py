"""One image -> float32 RGB [0, 1] conversion (augself_tf/image_preprocess.py:to_float_rgb) for the augmentations
and the evaluation view, each kind of input against its NumPy reading: uint8 / 255, uint16 / 65535, floats clipped
to [0, 1], gray replicated, alpha dropped."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from augself_tf.augment import ops
from augself_tf.data import eval_view
from augself_tf.image_preprocess import preprocess, to_float_rgb

RNG = np.random.default_rng(0)
U8 = RNG.integers(0, 256, size=(5, 7, 4), dtype=np.uint8)
U16 = RNG.integers(0, 65536, size=(5, 7, 4), dtype=np.uint16)


def _rgb(x: np.ndarray) -> np.ndarray:
    """NumPy's channel reading: [H, W] and 1 or 2 channels -> the first replicated 3 times, 3 or 4 -> the first 3."""
    x = x[..., None] if x.ndim == 2 else x
    return np.repeat(x[..., :1], 3, axis=-1) if x.shape[-1] < 3 else x[..., :3]


def _over(x: np.ndarray, scale: float) -> np.ndarray:
    """x / scale, worked in float64 and rounded once to float32."""
    return (x.astype(np.float64) / scale).astype(np.float32)


def _convert(image: np.ndarray) -> np.ndarray:
    out = to_float_rgb(tf.constant(image)).numpy()
    assert out.dtype == np.float32 and out.shape == image.shape[:2] + (3,)
    return out


def test_uint8_is_divided_by_255():
    out = _convert(U8[..., :3])
    np.testing.assert_array_max_ulp(out, _over(U8[..., :3], 255), maxulp=1)
    # Bit for bit, the pair stream's pinned pixels: the cast times float32(1 / 255) (tf.image.convert_image_dtype).
    np.testing.assert_array_equal(out, U8[..., :3].astype(np.float32) * np.float32(1 / 255))
    assert _convert(np.array([[[0, 255, 0]]], np.uint8)).tolist() == [[[0.0, 1.0, 0.0]]]  # the ends exactly


def test_uint16_is_divided_by_65535_not_255():
    out = _convert(U16[..., :3])
    np.testing.assert_array_max_ulp(out, _over(U16[..., :3], 65535), maxulp=1)
    assert out.max() <= 1.0
    assert _convert(np.array([[[0, 255, 65535]]], np.uint16))[0, 0].tolist() == pytest.approx([0.0, 255 / 65535, 1.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_floats_out_of_range_are_clipped(dtype):
    x = np.array([[[-0.5, 0.25, 1.5], [1.0, 0.0, 2.0]], [[0.75, -1e-3, 1 + 1e-3], [0.5, 0.125, -3.0]]], dtype)
    np.testing.assert_array_equal(_convert(x), np.clip(x.astype(np.float32), 0.0, 1.0))


@pytest.mark.parametrize("shape", [(5, 7), (5, 7, 1)], ids=["HW", "HW1"])
def test_gray_is_replicated(shape):
    x = U8[..., 0].reshape(shape)
    np.testing.assert_array_max_ulp(_convert(x), _over(_rgb(x), 255), maxulp=1)
    out = _convert(x)
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 0] == out[..., 2]).all()


@pytest.mark.parametrize("image", [U8, U16], ids=["uint8", "uint16"])
@pytest.mark.parametrize("channels", [2, 4], ids=["gray+alpha", "RGBA"])
def test_alpha_is_dropped(image, channels):
    x = image[..., :channels]
    expected = _over(_rgb(x), np.iinfo(image.dtype).max)
    np.testing.assert_array_max_ulp(_convert(x), expected, maxulp=1)
    x_alpha = x.copy()
    x_alpha[..., -1] = 0  # the alpha channel changes nothing
    np.testing.assert_array_equal(_convert(x_alpha), _convert(x))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_unknown_channel_count_in_a_graph(channels):
    fn = tf.function(to_float_rgb, input_signature=[tf.TensorSpec([None, None, None], tf.uint8)])
    x = U8[..., :channels]
    out = fn(tf.constant(x)).numpy()
    np.testing.assert_array_max_ulp(out, _over(_rgb(x), 255), maxulp=1)


def test_bad_ranks_and_channel_counts_are_refused():
    with pytest.raises(ValueError, match="rank 2 or 3"):
        to_float_rgb(tf.zeros([2, 3, 3, 3], tf.uint8))
    with pytest.raises(ValueError, match="1, 2, 3 or 4 channels"):
        to_float_rgb(tf.zeros([3, 3, 5], tf.uint8))


def test_the_augmentations_and_the_evaluation_view_share_it():
    assert ops.to_float_rgb is to_float_rgb and eval_view.to_float_rgb is to_float_rgb


def test_the_evaluation_view_of_a_16_bit_image_is_that_of_its_floats():
    """uint16 pixels reach the resize as x / 65535 (a /255 reading would be clipped white almost everywhere)."""
    image = RNG.integers(0, 65536, size=(20, 30, 3), dtype=np.uint16)
    floats = _over(image, 65535)
    got = preprocess(tf.constant(image), 16).numpy()
    np.testing.assert_allclose(got, preprocess(tf.constant(floats), 16).numpy(), atol=1e-6)
    assert 0.3 < got.mean() < 0.7
