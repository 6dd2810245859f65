"""Exports the backbone alone as a SavedModel that needs neither Keras code nor this package to load (and,
for a method that declares them, more representations as extra signatures: LooC's ``looc_plus_features``; for a
ViT, its patch tokens as ``patch_tokens``)."""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf

from augself_tf.models.vit import patch_token_model
from augself_tf.runtime import files

_IMAGES = [tf.TensorSpec([None, None, None, 3], tf.float32, name="images")]
#: The signature of a ViT export that gives its patch tokens.
PATCH_TOKENS = "patch_tokens"


class _ServingBackbone(tf.Module):
    # The exported module (serving_default, train_features); evaluation.extraction.FeatureExtractor is
    # the unrelated reader that runs such exports over datasets.
    def __init__(self, backbone: keras.Model, extra: Mapping[str, keras.layers.Layer]) -> None:
        super().__init__(name="augself_backbone")
        self.backbone = backbone
        self.extra = dict(extra)  # tracked: the heads' variables are saved with the signatures that read them
        self.feature_dim = tf.constant(int(backbone.output_shape[-1]))
        self.tokens = patch_token_model(backbone)  # None but for a ViT
        # Restored without Keras, the model has no variable lists of its own: fine-tuning needs these.
        self.trainable_weights = list(backbone.trainable_variables)
        self.non_trainable_weights = list(backbone.non_trainable_variables)

    @tf.function(input_signature=_IMAGES)
    def serve(self, images: tf.Tensor) -> dict:
        return {"features": tf.cast(self.backbone(images, training=False), tf.float32)}

    def extra_signature(self, name: str) -> tf.types.experimental.ConcreteFunction:
        """images -> {"features": extra[name](backbone features)}, batch norm in inference mode."""
        layer = self.extra[name]

        @tf.function(input_signature=_IMAGES)
        def serve(images: tf.Tensor) -> dict:
            features = self.backbone(images, training=False)
            return {"features": tf.cast(layer(features), tf.float32)}

        return serve.get_concrete_function()

    def tokens_signature(self) -> tf.types.experimental.ConcreteFunction:
        """images -> {"tokens": the ViT's patch tokens after its final LayerNorm, [N, h·w, D]}."""
        @tf.function(input_signature=_IMAGES)
        def serve(images: tf.Tensor) -> dict:
            return {"tokens": tf.cast(self.tokens(images, training=False), tf.float32)}

        return serve.get_concrete_function()

    @tf.function(input_signature=_IMAGES)
    def train_features(self, images: tf.Tensor) -> tf.Tensor:
        # Batch statistics, and the BN moving averages updated as a side effect: fine-tuning as in PyTorch.
        return tf.cast(self.backbone(images, training=True), tf.float32)


def export_backbone(backbone: keras.Model, path: str, extra: Mapping[str, keras.layers.Layer] | None = None) -> str:
    """Writes `path`: saved to a sibling temp dir, then renamed over any previous export (atomic on a local path;
    a ``gs://`` URL's export is moved in file by file, ``saved_model.pb`` last: `augself_tf.runtime.files`).

    The `serving_default` signature takes float32 images [N, H, W, 3] in [0, 1] and returns
    {"features": [N, d]} (batch norm in inference mode). Each entry of `extra` (a method's
    ``exported_features()``: signature name -> layer reading the backbone features) adds a signature of that
    name with the same input and {"features": layer(backbone features)}; evaluation picks one with
    ``augself-eval --signature``. For fine-tuning, the loaded object also has
    `train_features(images)` (batch norm in training mode: batch statistics, moving averages updated),
    `trainable_weights` and `non_trainable_weights` (the BN moving statistics). A ViT's export also has
    ``patch_tokens``: the same input, {"tokens": [N, h·w, D]} (the patch tokens after the final LayerNorm;
    ``serving_default`` gives the class token).
    """
    path = files.absolute(path)
    files.makedirs(files.parent(path))
    tmp = files.sibling(path, "tmp")
    module = _ServingBackbone(backbone, extra or {})
    signatures = {"serving_default": module.serve, **{name: module.extra_signature(name) for name in module.extra}}
    if module.tokens is not None:
        signatures[PATCH_TOKENS] = module.tokens_signature()
    tf.saved_model.save(module, tmp, signatures=signatures)
    files.replace_dir(tmp, path, last="saved_model.pb")
    return path
