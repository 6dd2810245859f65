"""Which TF variable is which reference weight: torch's module path and tensor layout of every weight, BN
statistic and EMA target of our model, and the check that the map covers both sides."""

from __future__ import annotations

import re

import keras
import numpy as np
import tensorflow as tf

_BLOCK = re.compile(r"^s(\d)b(\d)_(conv\d|bn\d|down_conv|down_bn)$")


def _torch_backbone_name(keras_name: str) -> str | None:
    """torchvision's module path of a Keras backbone layer (``s2b1_down_conv`` → ``layer2.0.downsample.0``)."""
    if keras_name in ("stem_conv", "stem_bn"):
        return {"stem_conv": "conv1", "stem_bn": "bn1"}[keras_name]
    m = _BLOCK.match(keras_name)
    if not m:
        return None
    stage, block, part = m.groups()
    part = {"down_conv": "downsample.0", "down_bn": "downsample.1"}.get(part, part)
    return f"layer{stage}.{int(block) - 1}.{part}"


def _torch_mlp_name(seq_name: str, keras_name: str) -> str | None:
    """Index in the reference's ``load_mlp`` Sequential: fc i → 3(i−1), bn i → 3(i−1)+1."""
    m = re.match(rf"^{re.escape(seq_name)}_(fc|bn)(\d+)$", keras_name)
    if not m:
        return None
    kind, i = m.group(1), int(m.group(2))
    return str(3 * (i - 1) + (0 if kind == "fc" else 1))


def _layer_entries(layer, path: str) -> list[tuple[str, tf.Variable, str]]:
    """(torch name, TF variable, layout) of one Conv2D / Dense / BN layer."""
    if isinstance(layer, keras.layers.Conv2D):
        return [(f"{path}.weight", layer.kernel, "conv")]
    if isinstance(layer, keras.layers.Dense):
        out = [(f"{path}.weight", layer.kernel, "dense")]
        return out + ([(f"{path}.bias", layer.bias, "same")] if layer.use_bias else [])
    if isinstance(layer, keras.layers.BatchNormalization):
        return [(f"{path}.weight", layer.gamma, "same"), (f"{path}.bias", layer.beta, "same"),
                (f"{path}.running_mean", layer.moving_mean, "same"),
                (f"{path}.running_var", layer.moving_variance, "same")]
    return []


def variable_map(model, method: str) -> list[tuple[str, tf.Variable, str]]:
    """Every TF weight of ``model`` with its torch name in ``reference_torch`` and its layout."""
    entries = []

    def backbone(keras_backbone, prefix):
        for layer in keras_backbone.layers:
            name = _torch_backbone_name(layer.name)
            if name is not None:
                entries.extend(_layer_entries(layer, f"{prefix}.{name}"))

    def mlp(seq, prefix):
        for layer in seq.layers:
            name = _torch_mlp_name(seq.name, layer.name)
            if name is not None:
                entries.extend(_layer_entries(layer, f"{prefix}.{name}"))

    backbone(model.backbone, "backbone")
    mlp(model.projector, "projector")
    if method in ("simsiam", "byol"):
        mlp(model.predictor, "predictor")
    for aug, head in model.augself_heads.items():
        mlp(head, f"heads.{aug}")
    encoder = {"moco": "key_encoder", "byol": "target_encoder"}.get(method)
    if encoder:
        backbone(getattr(model, encoder).backbone, "target_backbone")
        mlp(getattr(model, encoder).projector, "target_projector")
    return entries


def to_torch_layout(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "conv":  # Keras HWIO → torch OIHW
        return np.transpose(x, (3, 2, 0, 1))
    if layout == "dense":  # Keras (in, out) → torch (out, in)
        return x.T
    return x


def check_coverage(model, entries, torch_model) -> None:
    """Every trainable TF variable and BN statistic is mapped, and every torch weight receives one."""
    mapped = {id(v) for _, v, _ in entries}
    loose = [v.path for v in model.trainable_variables if id(v) not in mapped]
    if loose:
        raise RuntimeError(f"TF variables without a torch counterpart: {loose[:5]}")
    names = {n for n, _, _ in entries}
    state = dict(torch_model.named_parameters()) | {n: b for n, b in torch_model.named_buffers()
                                                    if not n.endswith("num_batches_tracked") and n != "queue"}
    missing = sorted(set(state) - names)
    extra = sorted(names - set(state))
    if missing or extra:
        raise RuntimeError(f"torch weights not fed from TF: {missing[:5]}; unknown torch names: {extra[:5]}")
    for name, var, layout in entries:
        if tuple(state[name].shape) != to_torch_layout(var.numpy(), layout).shape:
            raise RuntimeError(f"shape mismatch at {name}: torch {tuple(state[name].shape)} vs TF {var.shape}")
