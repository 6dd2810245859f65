"""Object localization: least-squares linear regression from frozen features to the object box.

Paper (appendix "Object localization", Table "bird_local"): sklearn ``LinearRegression`` from f(x) to
the box as (top-left x, top-left y, width, height), fitted on all CUB200 training images, "ℓ2 error"
on the test images. The paper does not define that error further; its values (≈0.003–0.005 for boxes
in [0, 1] coordinates) can only be a squared error, so :func:`localization_eval` reports sklearn's
``mean_squared_error`` — the squared difference averaged over test images and the 4 coordinates —
and also records the mean squared ℓ2 distance (sum over coordinates), the mean ℓ2 distance and the
mean IoU. Boxes are fractions of the centre crop the model sees (see ``features``): the paper's
figure draws boxes on the model's input.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from augself_tf.evaluation.estimators.errors import EvalError


def yxyx_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """(ymin, xmin, ymax, xmax) -> (x_topleft, y_topleft, width, height), same units."""
    boxes = np.asarray(boxes, np.float64)
    return np.stack(
        [boxes[:, 1], boxes[:, 0], boxes[:, 3] - boxes[:, 1], boxes[:, 2] - boxes[:, 0]], axis=1
    )


def box_iou_xywh(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise IoU of (x, y, w, h) boxes (negative sizes count as empty)."""
    ax0, ay0 = a[:, 0], a[:, 1]
    ax1, ay1 = a[:, 0] + np.maximum(a[:, 2], 0), a[:, 1] + np.maximum(a[:, 3], 0)
    bx0, by0 = b[:, 0], b[:, 1]
    bx1, by1 = b[:, 0] + np.maximum(b[:, 2], 0), b[:, 1] + np.maximum(b[:, 3], 0)
    iw = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None)
    ih = np.clip(np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None)
    inter = iw * ih
    union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


@dataclasses.dataclass
class LocalizationResult:
    """Test errors of the box regression.

    Attributes:
      mse: mean over test images and coordinates of the squared error (the reported value).
      mean_sq_l2: mean over test images of the squared ℓ2 distance (= 4 · mse).
      mean_l2: mean ℓ2 distance.
      mean_iou: mean IoU of predicted and true boxes.
      predictions: (x, y, w, h) predictions [n_test, 4].
      targets: true (x, y, w, h) [n_test, 4].
      n_train, n_test: examples used (rows without a box dropped).
      test_rows: indices of the scored rows in the test inputs.
    """

    mse: float
    mean_sq_l2: float
    mean_l2: float
    mean_iou: float
    predictions: np.ndarray
    targets: np.ndarray
    n_train: int
    n_test: int
    seconds: float
    test_rows: np.ndarray


def _valid_rows(boxes: np.ndarray) -> np.ndarray:
    return np.all(np.isfinite(boxes), axis=1)


def localization_eval(
    x_train: np.ndarray, boxes_train: np.ndarray, x_test: np.ndarray, boxes_test: np.ndarray
) -> LocalizationResult:
    """Fit ``LinearRegression`` features -> (x, y, w, h) on train and score test.

    Args:
      x_train, x_test: features [n, d].
      boxes_train, boxes_test: (ymin, xmin, ymax, xmax) fractions [n, 4]; rows with NaN are dropped.
    """
    from sklearn.linear_model import LinearRegression

    start = time.perf_counter()
    tr, te = _valid_rows(boxes_train), _valid_rows(boxes_test)
    if tr.sum() < 2 or te.sum() < 1:
        raise EvalError(f"localization needs boxes: {int(tr.sum())} train / {int(te.sum())} test images have one")
    y_tr, y_te = yxyx_to_xywh(boxes_train[tr]), yxyx_to_xywh(boxes_test[te])
    reg = LinearRegression().fit(np.asarray(x_train, np.float64)[tr], y_tr)
    pred = reg.predict(np.asarray(x_test, np.float64)[te])
    diff = pred - y_te
    sq = np.sum(diff**2, axis=1)
    return LocalizationResult(
        mse=float(np.mean(diff**2)),
        mean_sq_l2=float(np.mean(sq)),
        mean_l2=float(np.mean(np.sqrt(sq))),
        mean_iou=float(np.mean(box_iou_xywh(pred, y_te))),
        predictions=pred,
        targets=y_te,
        n_train=int(tr.sum()),
        n_test=int(te.sum()),
        seconds=time.perf_counter() - start,
        test_rows=np.flatnonzero(te),
    )
