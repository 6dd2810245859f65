"""The augmentation pipeline: one view of one image with its parameters ω, and AugSelf targets."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import tensorflow as tf

from augself_tf.augment import ops, registry
from augself_tf.augment.augment_config import AugmentConfig
from augself_tf.augment.steps import DEVICE
from augself_tf.augment.views import TWO_VIEWS, ViewPlan, batch_views, view_keys
from augself_tf.image_preprocess import preprocess

PHOTOMETRIC_MODES = ("host", "device")


def slot_seeds(seed: tf.Tensor) -> tf.Tensor:
    """The per-slot seeds [NUM_SEED_SLOTS, 2] of one view's seed [2]: step ``s`` draws from row ``s.seed_slot``."""
    seed = tf.ensure_shape(tf.cast(tf.convert_to_tensor(seed), tf.int64), [2])
    return tf.random.experimental.stateless_split(seed, num=registry.NUM_SEED_SLOTS)


def _run(
    image: tf.Tensor, step_seeds: tf.Tensor, config: AugmentConfig, device_params: dict | None
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Draws every step from its row of ``step_seeds``; applies all of them, or (``device_params`` given) only
    the host ones, collecting the device steps' draws into ``device_params`` instead."""
    size = config.image_size
    view = ops.to_float_rgb(image)
    omega: dict[str, tf.Tensor] = {}
    for step in registry.PIPELINE:
        params = step.sample(step_seeds[step.seed_slot], tf.shape(view), config)
        if device_params is not None and step.stage == DEVICE:
            device_params[step.name] = params  # its measurements are taken in finish_views
        else:
            before = view
            view = step.transform(view, params, config)
            view = tf.ensure_shape(view, [size, size, 3])  # keep the static shape through tf.cond branches
            measured = step.measure(before, view, params, config)
            omega.update({m.name: tf.ensure_shape(measured[m.name], [m.dim]) for m in step.measurements})
        if step.omega is not None:
            omega[step.name] = tf.ensure_shape(tf.cast(step.omega(params, config), tf.float32), [step.omega_dim])
    return tf.ensure_shape(tf.clip_by_value(view, 0.0, 1.0), [size, size, 3]), omega


def augment_view(
    image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig | None = None
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Draws one augmented view of one image, deterministically from ``seed``.

    Graph-safe (use it inside ``tf.data.Dataset.map``); all randomness is ``tf.random.stateless_*``.

    Args:
      image: one unbatched image [H, W] or [H, W, C], any (dynamic) H and W, C in {1, 2, 3, 4}
        (gray is replicated to RGB, alpha dropped); uint8 (or any integer dtype) or float in [0, 1].
      seed: int32 or int64 tensor of shape [2] (int32 and int64 seeds with equal values give equal views).
      config: the pipeline's parameters; ``AugmentConfig()`` if None.

    Returns:
      (view, omega): view float32 [S, S, 3] in [0, 1] with S = config.image_size; omega a dict of float32
      tensors {"crop": [4], "flip": [1], "color": [4], "color_diff": [3], "solarize": [1], "grayscale": [1],
      "blur": [1], "rotation": [1]} (``registry.OMEGA_DIMS``; see docs/architecture.md and ``registry``).
    """
    return _view_function(AugmentConfig() if config is None else config, "host")(image, slot_seeds(seed))


def augment_view_for_device(
    image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig | None = None
) -> tuple[tf.Tensor, dict[str, tf.Tensor], dict[str, dict[str, tf.Tensor]]]:
    """The host half of ``augment_view``: the same draws and ω, the host steps applied, a uint8 view.

    The device steps (``DEVICE``: the photometric ops) are left to ``finish_views``, which reads
    their draws from the returned params; ``finish_views`` of this equals ``augment_view`` up to the uint8
    rounding of the geometric stage.

    Returns:
      (view uint8 [S, S, 3], omega as ``augment_view``'s but for the device steps' measurements (colour
      jitter's ``color_diff``), which ``finish_views`` adds, {device step name: its draws}).
    """
    return _view_function(AugmentConfig() if config is None else config, "device")(image, slot_seeds(seed))


def _device_view(image: tf.Tensor, step_seeds: tf.Tensor, config: AugmentConfig) -> tuple:
    params: dict[str, dict[str, tf.Tensor]] = {}
    view, omega = _run(image, step_seeds, config, params)
    return tf.cast(tf.round(view * 255.0), tf.uint8), omega, params


def augment_views(
    image: tf.Tensor, seed: tf.Tensor, config: AugmentConfig, plan: ViewPlan = TWO_VIEWS, photometric: str = "host",
    pair_seed: tf.Tensor | None = None,
) -> dict:
    """Every view of ``plan`` of one image from one example seed [2], as the batch carries them.

    Returns {view1, omega1, ..., viewN, omegaN} (``augment_view``'s views and ω) or, with
    ``photometric="device"``, uint8 views, ω and the device steps' draws {..., device1, ..., deviceN}
    (``augment_view_for_device``'s), for ``finish_views``. View j copies the draws ``plan`` says it shares, at
    its own size and crop range where its `ViewSpec` declares them, and the draws of the plan's aligned steps come
    from ``pair_seed``, the partner example's seed, if given.
    """
    if photometric not in PHOTOMETRIC_MODES:
        raise ValueError(f"photometric must be one of {', '.join(PHOTOMETRIC_MODES)}, got {photometric!r}")
    out = {}
    for j, (spec, seeds) in enumerate(zip(plan.views, plan.slot_seeds(seed, pair_seed), strict=True)):
        view_key, omega_key, params_key = view_keys(j)
        view_config = spec.config_for(config)
        if spec.eval_view:
            # float32 in both modes, with no device-stage draws: finish_views only casts it, so its pixels are
            # the evaluation view's exactly, whichever mode made the batch
            out[view_key], out[omega_key] = eval_view_of(image, config)
            continue
        draw = _view_function(view_config, photometric)
        if photometric == "device":
            out[view_key], out[omega_key], out[params_key] = draw(image, seeds)
        else:
            out[view_key], out[omega_key] = draw(image, seeds)
    return out


#: The view functions traced in this process, most recent last: (config, photometric mode, pipeline) and its function.
_VIEW_FUNCTIONS: list[tuple[tuple, Callable]] = []
#: Enough for every distinct view of a run and of its evaluations; the oldest is dropped past it.
_MAX_VIEW_FUNCTIONS = 32


def _view_function(view_config: AugmentConfig, photometric: str) -> Callable:
    """One view's pipeline for ``view_config``: in a graph, a function traced once per process and input signature
    and called by every view of that config, in every dataset and every graph that calls ``augment_view`` (tracing
    the pipeline per view was most of a pair dataset's build time). It is keyed on the registered steps too, so a
    step registered or replaced later gets a new trace. No AutoGraph: the pipeline's branches are tf.cond already,
    and converting them took longer than tracing them."""
    if tf.executing_eagerly():
        return functools.partial(_draw, view_config=view_config, photometric=photometric)
    key = (view_config, photometric, tuple(registry.PIPELINE))
    for known, draw in _VIEW_FUNCTIONS:
        if known == key:
            return draw
    draw = tf.function(functools.partial(_draw, view_config=view_config, photometric=photometric), autograph=False)
    _VIEW_FUNCTIONS.append((key, draw))
    del _VIEW_FUNCTIONS[:-_MAX_VIEW_FUNCTIONS]
    return draw


def _draw(image: tf.Tensor, seeds: tf.Tensor, *, view_config: AugmentConfig, photometric: str) -> tuple:
    if photometric == "device":
        return _device_view(image, seeds, view_config)
    return _run(image, seeds, view_config, None)


def eval_view_of(image: tf.Tensor, config: AugmentConfig) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """The evaluation view of one image (`augself_tf.image_preprocess.preprocess`: resize, centre crop, no
    augmentation; the pixels ``data.eval_view`` shows a backbone) and its ω, the identity's: every step drawn
    with its probability at 0, the crop the centre square it shows
    ((0.5, 0.5, 1, 1) for a square image), the measurements of an unchanged image.

    Returns:
      (view float32 [S, S, 3] in [0, 1], ω with every entry of ``registry.OMEGA_DIMS``).
    """
    view = preprocess(image, config.image_size)
    off = dataclasses.replace(config, probabilities=dict.fromkeys(config.probabilities, 0.0))
    full = tf.shape(image)[:2]
    side = tf.reduce_min(full)
    centre = {"offset": (full - side) // 2, "size": tf.stack([side, side]), "full": full}
    seed = tf.zeros([2], tf.int64)  # nothing is drawn at probability 0 but the crop, replaced by the centre box
    omega: dict[str, tf.Tensor] = {}
    for step in registry.PIPELINE:
        params = centre if step.name == "crop" else step.sample(seed, tf.shape(view), off)
        if step.omega is not None:
            omega[step.name] = tf.ensure_shape(tf.cast(step.omega(params, config), tf.float32), [step.omega_dim])
        omega.update({m.name: tf.ensure_shape(tf.cast(m.measure(view, view, params, config), tf.float32), [m.dim])
                      for m in step.measurements})
    return view, omega


def finish_views(batch: Mapping[str, tf.Tensor], config: AugmentConfig) -> dict:
    """Views float32 in [0, 1], applying the device stage batched where the pipeline left it.

    A batch from ``make_pair_dataset(..., photometric="device")`` carries uint8 views and the device steps'
    draws under ``device1`` / ``device2`` (and ``device3``... for a method with more views): colour jitter
    (per-example factors and order), solarization, grayscale and Gaussian blur run here as batched tensor ops,
    in pipeline order, and the ω entries those steps measure on their images (``steps.Measurement``) are added
    to ``omega1`` / ``omega2`` / .... A host-mode batch (float views, no draws, ω complete) is only cast.
    Graph-safe, XLA-compatible, per replica.
    """
    out = dict(batch)
    for j in range(batch_views(batch)):
        view_key, omega_key, params_key = view_keys(j)
        views = batch[view_key]
        if params_key not in batch:
            if views.dtype == tf.uint8:
                raise ValueError(f"{view_key} is uint8 but the batch has no {params_key!r} device-stage draws")
            out[view_key] = tf.cast(views, tf.float32)
            continue
        x = tf.cast(views, tf.float32) / 255.0
        measured = {}
        view_config = _sized(config, views.shape[1])
        for step in registry.PIPELINE:
            if step.stage == DEVICE:
                params = batch[params_key][step.name]
                before, x = x, step.transform_batch(x, params, view_config)
                measured.update(step.measure(before, x, params, view_config))
        out[view_key] = tf.clip_by_value(x, 0.0, 1.0)
        if measured:
            out[omega_key] = {**batch.get(omega_key, {}), **measured}
    return out


def _sized(config: AugmentConfig, size: int | None) -> AugmentConfig:
    """``config`` for a view of side ``size`` (a view of its own size: the blur kernel follows the view's side)."""
    if size is None or size == config.image_size:
        return config
    return dataclasses.replace(config, image_size=int(size))


def omega_diff(omega1: Mapping[str, tf.Tensor], omega2: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """AugSelf targets ω_diff(1, 2) for every registered augmentation present in both ω dicts.

    Works batched ([B, k] per entry) or unbatched ([k]). Conventions (docs/architecture.md):
    crop (centre1 - centre2, size1 - size2) in view 1's displayed frame [.., 4]; flip 1.0 if equal [.., 1];
    color / blur / solarize ω1 - ω2; rotation (k1 - k2) mod 4 as int32 with the ω axis dropped ([B] or []).
    """
    return {
        name: aug.target(omega1, omega2)
        for name, aug in registry.AUGMENTATIONS.items()
        if name in omega1 and name in omega2
    }
