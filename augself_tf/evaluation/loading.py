"""Exported SavedModels as ``images -> features`` (the export contract of docs/architecture.md).

A SavedModel qualifies when its ``serving_default`` signature (or the one ``--signature`` names, e.g. LooC's
``looc_plus_features``) takes one float image tensor [N, H, W, 3] in [0, 1] and returns a ``features`` output
(or exactly one output).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.estimators.errors import EvalError, first_line
from augself_tf.runtime import files

#: The backbone's features in every export of this project.
DEFAULT_SIGNATURE = "serving_default"


@dataclasses.dataclass
class LoadedModel:
    """A SavedModel's ``serving_default`` (or another) signature wrapped as images -> features.

    Attributes:
      path: directory the SavedModel was loaded from.
      name: short display name (the model directory's name).
      input_name: keyword of the signature's image input.
      input_dtype: its dtype (float32 normally).
      output_key: the output used as features.
      fixed_size: (H, W) when the signature only accepts one image size, else None.
      signature: the signature's name.
    """

    path: str
    name: str
    input_name: str
    input_dtype: tf.DType
    output_key: str
    fixed_size: tuple[int | None, int | None] | None
    _fn: Callable[..., dict] = dataclasses.field(repr=False)
    _module: object = dataclasses.field(repr=False, default=None)
    signature: str = DEFAULT_SIGNATURE

    def check_size(self, size: int) -> None:
        """Raise :class:`EvalError` if the signature has a static image size other than ``size``."""
        if self.fixed_size is None:
            return
        h, w = self.fixed_size
        if (h is not None and h != size) or (w is not None and w != size):
            raise EvalError(
                f"model {self.name} only accepts {h}x{w} images but --image_size is {size}; "
                f"pass --image_size {h or w}"
            )

    def features_tensor(self, images: tf.Tensor) -> tf.Tensor:
        """Features float32 [N, d] as a tensor: differentiable with respect to ``images`` (FGSM)."""
        out = self._fn(**{self.input_name: tf.cast(images, self.input_dtype)})
        return tf.cast(out[self.output_key], tf.float32)

    def __call__(self, images: tf.Tensor) -> np.ndarray:
        """Features float32 [N, d] of float images [N, S, S, 3] in [0, 1]."""
        out = self._fn(**{self.input_name: tf.cast(images, self.input_dtype)})
        feats = out[self.output_key]
        if feats.shape.rank != 2:
            raise EvalError(
                f"model {self.name}: output {self.output_key!r} has shape {feats.shape}, expected [N, d]"
            )
        return feats.numpy().astype(np.float32, copy=False)


def model_display_name(path: str) -> str:
    """Short name of a model directory (``runs/simsiam/saved_model`` -> ``simsiam``)."""
    p = files.absolute(path if files.is_url(path) else os.path.normpath(path))
    base = os.path.basename(p)
    if base in ("saved_model", "export", "model") and os.path.basename(os.path.dirname(p)):
        return os.path.basename(os.path.dirname(p))
    return base


def _resolve_saved_model_dir(path: str) -> str:
    if not path:
        raise EvalError("no SavedModel given: pass --saved_model PATH")
    if not files.exists(path):
        raise EvalError(f"SavedModel not found: {path}")
    if files.isdir(path) and not files.exists(os.path.join(path, "saved_model.pb")):
        nested = os.path.join(path, "saved_model")
        if files.exists(os.path.join(nested, "saved_model.pb")):
            return nested
        raise EvalError(f"not a SavedModel directory (no saved_model.pb): {path}")
    if not files.isdir(path):
        raise EvalError(f"not a SavedModel directory: {path}")
    return path


def load_model(path: str, signature: str = DEFAULT_SIGNATURE) -> LoadedModel:
    """Load an exported feature extractor.

    The SavedModel must have the signature named ``signature`` (default ``serving_default``: the backbone's
    features) with one floating-point image input ([N, H, W, 3], values in [0, 1]) and either a ``features``
    output or exactly one output. Another signature's name is shown after the model's: ``run:looc_plus_features``.

    Raises:
      EvalError: missing path, unloadable SavedModel, no usable signature.
    """
    path = _resolve_saved_model_dir(path)
    name = model_display_name(path)
    try:
        module = tf.saved_model.load(path)
    except Exception as e:  # noqa: BLE001 - any loader failure becomes one clear line
        raise EvalError(f"cannot load SavedModel {path}: {first_line(e)}") from None
    signatures = module.signatures
    if signature not in signatures:
        found = ", ".join(sorted(signatures)) or "none"
        raise EvalError(f"SavedModel {path} has no {signature!r} signature (signatures: {found})")
    fn = signatures[signature]
    args, kwargs = fn.structured_input_signature
    inputs = dict(kwargs)
    for i, spec in enumerate(args):
        inputs[getattr(spec, "name", None) or f"arg{i}"] = spec
    if len(inputs) != 1:
        raise EvalError(
            f"SavedModel {path}: {signature} must take exactly one image tensor, it takes {sorted(inputs)}"
        )
    (input_name, spec), = inputs.items()
    if not isinstance(spec, tf.TensorSpec) or not spec.dtype.is_floating:
        raise EvalError(
            f"SavedModel {path}: {signature} input {input_name!r} is {spec}, expected a float image "
            "tensor [N, H, W, 3]"
        )
    shape = spec.shape
    if shape.rank is not None and (shape.rank != 4 or shape[-1] not in (None, 3)):
        raise EvalError(
            f"SavedModel {path}: {signature} input {input_name!r} has shape {shape}, expected [N, H, W, 3]"
        )
    fixed = None
    if shape.rank == 4 and (shape[1] is not None or shape[2] is not None):
        fixed = (shape[1], shape[2])
    outputs = fn.structured_outputs
    if not isinstance(outputs, dict) or not outputs:
        raise EvalError(f"SavedModel {path}: {signature} returns no named outputs")
    if "features" in outputs:
        key = "features"
    elif len(outputs) == 1:
        key = next(iter(outputs))
    else:
        raise EvalError(
            f"SavedModel {path}: {signature} has outputs {sorted(outputs)}; expected 'features' or one output"
        )
    rank = outputs[key].shape.rank
    if rank is not None and rank != 2:
        # A ViT export's patch_tokens signature gives [N, T, D]: the protocols read one vector per image.
        raise EvalError(f"SavedModel {path}: {signature} output {key!r} has shape {outputs[key].shape}, expected "
                        "[N, d] features; evaluate serving_default or another signature of one vector per image")
    if signature != DEFAULT_SIGNATURE:
        name = f"{name}:{signature}"
    return LoadedModel(path, name, input_name, spec.dtype, key, fixed, _fn=fn, _module=module, signature=signature)
