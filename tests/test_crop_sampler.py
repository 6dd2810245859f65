"""RandomResizedCrop's box must be drawn from torchvision's distribution (``RandomResizedCrop.get_params``).

An independent NumPy implementation of torchvision's sampler is the reference; the TF sampler (the crop
step (augment/geometric.py), ω = (cy, cx, h, w) as fractions of the original image) is compared with it by
two-sample Kolmogorov-Smirnov tests on the area fraction, the log aspect ratio and the offsets, and the
fallback (no box fits in 10 attempts -> clamped centre crop) is checked exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from augself_tf.augment import AugmentConfig
from augself_tf.augment.crop_sampler import crop_box
from augself_tf.augment.geometric import CROP

N_TF = 4000  # draws of the TF sampler per image shape
N_NP = 40000  # draws of the NumPy reference (cheap; a large reference sample reduces the noise)
P_MIN = 1e-3  # every draw is seeded, so the test is deterministic; the old sampler gives p < 1e-20


def np_get_params(rng: np.random.Generator, height: int, width: int, scale, ratio, n: int) -> np.ndarray:
    """torchvision's RandomResizedCrop.get_params, n times -> int array [n, 4] of (i, j, h, w).

    Literal algorithm: up to 10 attempts of area ~ U(scale) * H * W, log aspect ~ U(log ratio),
    w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)) (Python's round: half to even, as
    np.round); the first attempt with 0 < w <= W and 0 < h <= H is kept, with i ~ U{0..H-h} and
    j ~ U{0..W-w}. If none fits: the centre crop clamped to the ratio range. Drawing all 10 attempts and
    keeping the first valid one has the same distribution as stopping at it.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    target_area = area * rng.uniform(scale[0], scale[1], (n, 10))
    aspect = np.exp(rng.uniform(log_lo, log_hi, (n, 10)))
    w = np.round(np.sqrt(target_area * aspect)).astype(np.int64)
    h = np.round(np.sqrt(target_area / aspect)).astype(np.int64)
    valid = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = valid.argmax(axis=1)
    found = valid.any(axis=1)
    w = w[np.arange(n), first]
    h = h[np.arange(n), first]
    _, _, fh, fw = np_fallback(height, width, ratio)
    w = np.where(found, w, fw)
    h = np.where(found, h, fh)
    i = np.where(found, rng.integers(0, height - h + 1), (height - h) // 2)
    j = np.where(found, rng.integers(0, width - w + 1), (width - w) // 2)
    return np.stack([i, j, h, w], axis=1)


def np_fallback(height: int, width: int, ratio) -> tuple[int, int, int, int]:
    """torchvision's fallback box (i, j, h, w): the centre crop clamped to the ratio range."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def boxes_from_omega(omega: np.ndarray, height: int, width: int) -> np.ndarray:
    """ω_crop [n, 4] = (cy, cx, h, w) fractions -> int pixel boxes [n, 4] of (i, j, h, w)."""
    cy, cx, fh, fw = omega.astype(np.float64).T
    h = np.round(fh * height).astype(np.int64)
    w = np.round(fw * width).astype(np.int64)
    i = np.round(cy * height - h / 2).astype(np.int64)
    j = np.round(cx * width - w / 2).astype(np.int64)
    return np.stack([i, j, h, w], axis=1)


def tf_crop_omegas(height: int, width: int, config: AugmentConfig, n: int, salt: int = 7) -> np.ndarray:
    """ω_crop of n independent seeds through the registry's crop step, in one batched tf.data pass."""
    image = tf.zeros([height, width, 3], tf.float32)

    def one(k):
        _, omega = CROP.apply(image, tf.stack([k, tf.constant(salt, tf.int64)]), config)
        return omega

    ds = tf.data.Dataset.range(n).map(one, num_parallel_calls=tf.data.AUTOTUNE).batch(n)
    return next(iter(ds)).numpy()


def features(boxes: np.ndarray, height: int, width: int) -> dict[str, np.ndarray]:
    i, j, h, w = boxes.T
    return {"area": h * w / (height * width), "log_aspect": np.log(w / h)}


def jittered_offsets(boxes: np.ndarray, height: int, width: int, ratio, seed: int) -> dict[str, np.ndarray]:
    """(offset + U(0, 1)) / (number of possible offsets), where the box can move: exactly U(0, 1) if the
    integer offset is uniform over its range, whatever the distribution of the box size.

    Boxes of the fallback's size are left out (the fallback is centred, not uniform).
    """
    i, j, h, w = boxes.T
    _, _, fh, fw = np_fallback(height, width, ratio)
    rng = np.random.default_rng(seed)
    out = {}
    for name, offset, room in (("offset_y", i, height - h), ("offset_x", j, width - w)):
        movable = (room > 0) & ~((h == fh) & (w == fw))
        out[name] = (offset[movable] + rng.uniform(size=movable.sum())) / (room[movable] + 1)
    return out


SHAPES = [(96, 96), (64, 160), (200, 90)]


@pytest.fixture(scope="module", params=SHAPES, ids=[f"{h}x{w}" for h, w in SHAPES])
def samples(request):
    height, width = request.param
    config = AugmentConfig(image_size=8)  # the paper's scale (0.2, 1) and ratio (3/4, 4/3)
    omega = tf_crop_omegas(height, width, config, N_TF)
    tf_boxes = boxes_from_omega(omega, height, width)
    np_boxes = np_get_params(
        np.random.default_rng(height * 1000 + width), height, width, config.crop_scale, config.crop_ratio, N_NP
    )
    return height, width, config, omega, tf_boxes, np_boxes


def test_omega_encodes_an_integer_pixel_box_inside_the_image(samples):
    height, width, config, omega, boxes, _ = samples
    i, j, h, w = boxes.T
    # ω is exactly (offset + size / 2) / full and size / full of that integer box.
    expected = np.stack([(i + h / 2) / height, (j + w / 2) / width, h / height, w / width], axis=1)
    np.testing.assert_allclose(omega, expected, atol=1e-6)
    assert np.all(h >= 1) and np.all(w >= 1)
    assert np.all(i >= 0) and np.all(j >= 0) and np.all(i + h <= height) and np.all(j + w <= width)
    # Area within the scale range up to the rounding of h and w, aspect within the ratio range likewise
    # (the fallback boxes of these shapes satisfy both too).
    lo, hi = config.crop_scale
    slack_area = (h + w) / 2 + 0.25  # |round(a) round(b) - ab| <= (a + b) / 2 + 1/4
    assert np.all(h * w >= lo * height * width - slack_area)
    assert np.all(h * w <= hi * height * width + slack_area)
    r_lo, r_hi = config.crop_ratio
    assert np.all((w + 0.5) / (h - 0.5) >= r_lo) and np.all((w - 0.5) / (h + 0.5) <= r_hi)


def test_area_and_aspect_follow_torchvision(samples):
    height, width, _, _, tf_boxes, np_boxes = samples
    tf_f, np_f = features(tf_boxes, height, width), features(np_boxes, height, width)
    for name in ("area", "log_aspect"):
        result = stats.ks_2samp(tf_f[name], np_f[name])
        assert result.pvalue > P_MIN, (name, tf_f[name].mean(), np_f[name].mean(), result)
    assert abs(tf_f["area"].mean() - np_f["area"].mean()) < 0.015
    assert abs(tf_f["log_aspect"].mean() - np_f["log_aspect"].mean()) < 0.015


def test_offsets_uniform_over_their_range(samples):
    height, width, config, _, tf_boxes, np_boxes = samples
    tf_f = jittered_offsets(tf_boxes, height, width, config.crop_ratio, 0)
    np_f = jittered_offsets(np_boxes, height, width, config.crop_ratio, 1)
    for name in ("offset_y", "offset_x"):
        assert len(tf_f[name]) > N_TF // 4, name
        assert stats.kstest(np_f[name], "uniform").pvalue > P_MIN, name  # the reference is uniform
        result = stats.kstest(tf_f[name], "uniform")
        assert result.pvalue > P_MIN, (name, result)
    # Both extremes are reached: offset 0 and offset H - h (W - w).
    i, j, h, w = tf_boxes.T
    assert np.any((i == 0) & (h < height)) and np.any((i == height - h) & (h < height))
    assert np.any((j == 0) & (w < width)) and np.any((j == width - w) & (w < width))


def test_fallback_rate_and_box_in_the_distribution(samples):
    """On non-square images no attempt fits a few % of the time (4.6% at 64x160, 1.9% at 200x90): the
    fallback box, centred, must show up as often as in torchvision."""
    height, width, config, _, tf_boxes, np_boxes = samples
    fallback = np.array(np_fallback(height, width, config.crop_ratio))
    tf_size = np.all(tf_boxes[:, 2:] == fallback[2:], axis=1)
    np_size = np.all(np_boxes[:, 2:] == fallback[2:], axis=1)
    p = np_size.mean()
    assert abs(tf_size.mean() - p) <= 4 * math.sqrt(p * (1 - p) / N_TF) + 1e-9, (tf_size.mean(), p)
    if height != width:
        assert p > 0.01  # the fallback is exercised here
        # Nearly all boxes of that size are the centred fallback (a fitting attempt of that exact size
        # at that exact offset is rare).
        centred = np.all(tf_boxes[tf_size] == fallback, axis=1)
        assert centred.mean() > 0.9


def test_square_image_mean_area_matches_torchvision():
    """On 96x96 torchvision's mean area fraction is ~0.54 (tf.image's bounding-box sampler gives ~0.50)."""
    np_boxes = np_get_params(np.random.default_rng(0), 96, 96, (0.2, 1.0), (3 / 4, 4 / 3), N_NP)
    reference = features(np_boxes, 96, 96)["area"].mean()
    assert 0.53 < reference < 0.55
    omega = tf_crop_omegas(96, 96, AugmentConfig(image_size=8), N_TF, salt=11)
    area = omega[:, 2] * omega[:, 3]
    assert abs(area.mean() - reference) < 0.012, (area.mean(), reference)


# ---------------------------------------------------------------------------------------- fallback


def crop_omega(height: int, width: int, config: AugmentConfig, seed=(3, 4)) -> np.ndarray:
    _, omega = CROP.apply(tf.zeros([height, width, 3]), tf.constant(seed, tf.int64), config)
    return omega.numpy()


def expected_omega(height: int, width: int, i: int, j: int, h: int, w: int) -> list[float]:
    return [(i + h / 2) / height, (j + w / 2) / width, h / height, w / width]


@pytest.mark.parametrize(
    "height, width, scale, ratio, box",
    [
        # Very wide: no attempt fits (h >= 52 > 10) -> h = H, w = round(H * 4/3) = 13, centred.
        (10, 400, (0.9, 1.0), (3 / 4, 4 / 3), (0, (400 - 13) // 2, 10, 13)),
        # Very tall: w = W, h = round(W / (3/4)) = 13, centred.
        (400, 10, (0.9, 1.0), (3 / 4, 4 / 3), ((400 - 13) // 2, 0, 13, 10)),
        # Half-way rounding is half to even like Python's round: h = round(10 / 0.8) = round(12.5) = 12.
        (400, 10, (0.9, 1.0), (0.8, 1.25), ((400 - 12) // 2, 0, 12, 10)),
        # Whole area at aspect 1 on 40x56: w = h = round(sqrt(2240)) = 47 > 40 never fits -> 40x40.
        (40, 56, (1.0, 1.0), (1.0, 1.0), (0, (56 - 40) // 2, 40, 40)),
    ],
    ids=["wide", "tall", "half-to-even", "non-square-identity-ratio"],
)
def test_fallback_is_torchvisions_clamped_centre_crop(height, width, scale, ratio, box):
    config = AugmentConfig(image_size=8, crop_min_scale=scale[0], crop_max_scale=scale[1], crop_ratio=ratio)
    np_box = np_get_params(np.random.default_rng(1), height, width, scale, ratio, 50)
    np.testing.assert_array_equal(np_box, np.tile(box, (50, 1)))  # the reference agrees
    for seed in [(0, 0), (3, 4), (12345, 678)]:
        np.testing.assert_allclose(crop_omega(height, width, config, seed), expected_omega(height, width, *box))


def test_fallback_whole_image_when_the_input_ratio_is_in_range():
    # Target areas of 1.5-2x the image never fit; the input ratio 36/30 is inside [3/4, 4/3] -> whole image.
    scale, ratio = (1.5, 2.0), (3 / 4, 4 / 3)
    for seed in [(5, 6), (0, 1)]:
        offset, size = crop_box(tf.constant(30), tf.constant(36), tf.constant(seed, tf.int64), scale, ratio)
        np.testing.assert_array_equal(offset.numpy(), [0, 0])
        np.testing.assert_array_equal(size.numpy(), [30, 36])
    np_boxes = np_get_params(np.random.default_rng(2), 30, 36, scale, ratio, 5)
    np.testing.assert_array_equal(np_boxes, np.tile([0, 0, 30, 36], (5, 1)))


def test_sampler_is_deterministic_per_seed_and_graph_safe():
    config = AugmentConfig(image_size=8)
    a = crop_omega(64, 160, config, (9, 9))
    np.testing.assert_array_equal(a, crop_omega(64, 160, config, (9, 9)))
    assert not np.array_equal(a, crop_omega(64, 160, config, (9, 10)))

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32), tf.TensorSpec([2], tf.int64)])
    def traced(image, seed):
        return CROP.apply(image, seed, config)[1]

    np.testing.assert_array_equal(traced(tf.zeros([64, 160, 3]), tf.constant([9, 9], tf.int64)).numpy(), a)
