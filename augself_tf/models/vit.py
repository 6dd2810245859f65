"""Vision Transformers (Dosovitskiy et al. 2021) in plain Keras layers, as MoCo v3 and DINO build them.

Not keras-hub's `ViTBackbone`: installing keras-hub drags the full `tensorflow` package in beside
tensorflow-cpu, `keras.models.clone_model` fails on its patch layer (momentum encoders clone the backbone), and
it has no position-embedding interpolation, sin-cos embedding or drop-path.

The network is timm's `VisionTransformer` as MoCo v3's ``vits.py`` configures it: patch projection (a k×k
stride-k convolution), a class token, a position embedding (fixed 2-D sin-cos, MoCo v3's
``build_2d_sincos_position_embedding``, or learned), pre-norm blocks ``x + DropPath(Attn(LN(x)))``,
``x + DropPath(MLP(LN(x)))`` (LayerNorm ε 1e-6, exact GELU, qkv with bias), a final LayerNorm; the feature is
the class token after it. MoCo v3's initialisation: Xavier-uniform linears with q, k and v each a square
matrix of its own bound, the patch projection uniform over ±√(6/(3·k²+D)), zero biases, the class token
N(0, 1e-6). ``frozen_patch_projection`` is MoCo v3's ``--stop-grad-conv1``: the random projection is
non-trainable, so no optimizer ever holds it. Images of another size than the one built for get the patch
position embedding interpolated bicubically, DINO's ``interpolate_pos_encoding`` (PyTorch's bicubic kernel,
a = −0.75, and DINO's +0.1 scale), so an export evaluates at any size that is a multiple of the patch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from augself_tf.image_statistics import IMAGENET_MEAN, IMAGENET_STD
from augself_tf.models.resnet import InputNormalization


class ViTSize(NamedTuple):
    """Width, depth, heads and default patch of a named ViT."""

    dim: int
    depth: int
    heads: int
    patch: int


#: The named sizes: DeiT's Tiny, MoCo v3's Small (12 heads, where DeiT and DINO use 6) and Base, and a CPU size
#: whose step at 64 px / patch 8 costs about what the ledger's ResNet-18 at width 0.25 costs (docs/benchmarks.md).
VIT_SIZES = {
    "vit_pico": ViTSize(96, 4, 3, 8),
    "vit_tiny": ViTSize(192, 12, 3, 16),
    "vit_small": ViTSize(384, 12, 12, 16),
    "vit_base": ViTSize(768, 12, 12, 16),
}
#: Patches per side the image-size default keeps (`default_patch_size`): solo-learn's CIFAR ViTs take patch 4 at
#: 32 px, 8 x 8 patches.
MIN_GRID = 8
POS_EMBEDDINGS = ("sincos", "learned")
LN_EPSILON = 1e-6
#: Name of the final LayerNorm: the export's patch-token signature reads its output.
FINAL_NORM = "encoder_norm"


def default_patch_size(name: str, image_size: int) -> int:
    """The patch a run of ViT ``name`` at ``image_size`` takes when ``--patch_size`` is 0: the size's own patch
    (16; 8 for ``vit_pico``) where the image holds `MIN_GRID` of them per side (224 px: 16), else the largest power
    of two that does (96 px: 8, 32 px: 4, 16 px: 2), at least 1.

    The size's own patch at 32 px would leave a 2 x 2 grid and be larger than DINO's 14-pixel local crops;
    published small-image ViTs shrink the patch with the image (solo-learn's CIFAR ViTs: patch 4 at 32 px).

    Raises:
      ValueError: an unknown name.
    """
    if name not in VIT_SIZES:
        raise ValueError(f"unknown ViT '{name}'; choose from {', '.join(VIT_SIZES)}")
    fits = 1
    while fits * 2 * MIN_GRID <= image_size:
        fits *= 2
    return min(VIT_SIZES[name].patch, fits)


def sincos_position_embedding(grid_h: int, grid_w: int, dim: int, temperature: float = 10000.0) -> np.ndarray:
    """MoCo v3's fixed embedding [1 + h·w, dim]: a zero row for the class token, then per patch
    [sin(a·ω), cos(a·ω), sin(b·ω), cos(b·ω)] with ω_i = T^(−i/(dim/4)).

    As in ``vits.py``, ``meshgrid(arange(w), arange(h))`` (torch's 'ij' indexing) makes a the slow index of
    the flattened grid, so for a square grid a is the patch's row and b its column.
    """
    if dim % 4:
        raise ValueError(f"the 2-D sin-cos position embedding needs a width divisible by 4, got {dim}")
    grid_a, grid_b = np.meshgrid(np.arange(grid_w, dtype=np.float32), np.arange(grid_h, dtype=np.float32),
                                 indexing="ij")
    pos_dim = dim // 4
    omega = 1.0 / temperature ** (np.arange(pos_dim, dtype=np.float32) / pos_dim)
    out_a = np.einsum("m,d->md", grid_a.reshape(-1), omega)
    out_b = np.einsum("m,d->md", grid_b.reshape(-1), omega)
    table = np.concatenate([np.sin(out_a), np.cos(out_a), np.sin(out_b), np.cos(out_b)], axis=1)
    return np.concatenate([np.zeros([1, dim], np.float32), table], axis=0).astype(np.float32)


def _cubic_weights(t: tf.Tensor, a: float = -0.75) -> list[tf.Tensor]:
    """PyTorch's ``get_cubic_upsample_coefficients``: the 4 taps' weights at fractional offset t."""
    def near(x):  # |x| <= 1
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def bicubic_matrix(size_in: int | tf.Tensor, size_out: int | tf.Tensor) -> tf.Tensor:
    """[size_out, size_in] float32: the 1-D map of ``torch.nn.functional.interpolate(mode='bicubic',
    scale_factor=(size_out + 0.1) / size_in)`` (align_corners False, borders clamped), DINO's call; the identity
    when the sizes are equal (DINO keeps the table as it is then)."""
    n_in = tf.cast(size_in, tf.int32)
    n_out = tf.cast(size_out, tf.int32)
    scale = tf.cast(n_in, tf.float32) / (tf.cast(n_out, tf.float32) + 0.1)  # torch's 1 / scale_factor
    src = (tf.cast(tf.range(n_out), tf.float32) + 0.5) * scale - 0.5
    base = tf.floor(src)
    weights = _cubic_weights(src - base)
    matrix = tf.zeros([n_out, n_in], tf.float32)
    for tap, w in enumerate(weights):
        index = tf.clip_by_value(tf.cast(base, tf.int32) + tap - 1, 0, n_in - 1)
        matrix += w[:, None] * tf.one_hot(index, n_in, dtype=tf.float32)
    # A select, not a branch (XLA and every replica run the same ops); both sides are [n_out, n_in].
    identity = tf.one_hot(tf.minimum(tf.range(n_out), n_in - 1), n_in, dtype=tf.float32)
    return tf.where(tf.equal(n_in, n_out), identity, matrix)


@keras.saving.register_keras_serializable(package="augself_tf")
class TokenEmbedding(layers.Layer):
    """Patch grid [B, h, w, D] -> tokens [B, 1 + h·w, D]: the class token first, plus the position embedding.

    Args:
      grid: (h, w) of the patch grid the embedding is built for; another grid gets it interpolated.
      position: ``sincos`` (fixed, not trained) or ``learned`` (truncated normal σ 0.02, as timm and DINO).
    """

    def __init__(self, grid: tuple[int, int], position: str = "sincos", **kwargs) -> None:
        super().__init__(**kwargs)
        if position not in POS_EMBEDDINGS:
            raise ValueError(f"unknown position embedding {position!r}; choose from {', '.join(POS_EMBEDDINGS)}")
        self.grid = (int(grid[0]), int(grid[1]))
        self.position = position

    def build(self, input_shape) -> None:
        dim = int(input_shape[-1])
        self.cls_token = self.add_weight(shape=(1, 1, dim), initializer=keras.initializers.RandomNormal(0.0, 1e-6),
                                         name="cls_token")
        rows = 1 + self.grid[0] * self.grid[1]
        if self.position == "sincos":
            init = keras.initializers.Constant(sincos_position_embedding(*self.grid, dim)[None])
        else:
            init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.pos_embed = self.add_weight(shape=(1, rows, dim), initializer=init, name="pos_embed",
                                         trainable=self.position == "learned")
        super().build(input_shape)

    def position_embedding(self, grid_h: tf.Tensor, grid_w: tf.Tensor) -> tf.Tensor:
        """[1, 1 + h·w, D] for a grid of h × w patches (the built table when it is the built grid)."""
        table = tf.convert_to_tensor(self.pos_embed)
        dim = table.shape[-1]
        patches = tf.reshape(tf.cast(table[0, 1:], tf.float32), [self.grid[0], self.grid[1], dim])
        rows = bicubic_matrix(self.grid[0], grid_h)
        cols = bicubic_matrix(self.grid[1], grid_w)
        patches = tf.einsum("hi,ijd,wj->hwd", rows, patches, cols)
        patches = tf.cast(tf.reshape(patches, [1, -1, dim]), table.dtype)
        return tf.concat([table[:, :1], patches], axis=1)

    def call(self, grid_tokens: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(grid_tokens)
        dim = grid_tokens.shape[-1]
        tokens = tf.reshape(grid_tokens, [shape[0], shape[1] * shape[2], dim])
        cls = tf.cast(tf.tile(self.cls_token, [shape[0], 1, 1]), tokens.dtype)
        tokens = tf.concat([cls, tokens], axis=1)
        return tokens + tf.cast(self.position_embedding(shape[1], shape[2]), tokens.dtype)

    def compute_output_shape(self, input_shape) -> tuple:
        h, w = input_shape[1], input_shape[2]
        return (input_shape[0], None if h is None or w is None else 1 + h * w, input_shape[-1])

    def get_config(self) -> dict:
        return {**super().get_config(), "grid": list(self.grid), "position": self.position}


@keras.saving.register_keras_serializable(package="augself_tf")
class DropPath(layers.Layer):
    """Stochastic depth: in training, each example's residual branch is zeroed with probability ``rate`` and
    kept ones are scaled by 1/(1 − rate) (timm's ``drop_path``); the identity at inference."""

    def __init__(self, rate: float = 0.0, seed: int | None = None, seed_name: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop-path rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_name = seed_name
        # Named: the state is checkpointed by its name, and Keras' automatic names count creations in the process.
        self.seed_generator = keras.random.SeedGenerator(seed, name=seed_name) if self.rate else None

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        if not training or not self.rate:
            return x
        keep = 1.0 - self.rate
        local = tf.shape(x)[0]
        # The generator's state is the same on every replica: each draws the global batch's mask and keeps its own
        # rows, so replicas drop different examples and N replicas drop what one device does with the whole batch.
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        draw = keras.random.uniform([local * replicas], seed=self.seed_generator, dtype=x.dtype)
        if replicas > 1:  # a slice of static size: XLA compiles it on every replica (a dynamic-slice)
            draw = tf.slice(draw, [tf.cast(context.replica_id_in_sync_group, tf.int32) * local], [local])
        mask = tf.reshape(tf.floor(keep + draw), [local] + [1] * (len(x.shape) - 1))
        return x / tf.cast(keep, x.dtype) * mask

    def get_config(self) -> dict:
        return {**super().get_config(), "rate": self.rate, "seed": self.seed, "seed_name": self.seed_name}


@keras.saving.register_keras_serializable(package="augself_tf")
class TransformerBlock(layers.Layer):
    """Pre-norm block: x + DropPath(Attention(LN(x))), then x + DropPath(MLP(LN(x))) (timm's ``Block``).

    Args:
      dim, heads: width and attention heads (dim / heads per head, scale (dim/heads)^−½).
      mlp_ratio: the MLP's hidden width over ``dim`` (GELU, exact).
      drop_path: the block's stochastic-depth rate.
    """

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, drop_path: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        if dim % heads:
            raise ValueError(f"ViT width {dim} is not divisible by its {heads} heads")
        self.dim, self.heads, self.mlp_ratio, self.drop_path = int(dim), int(heads), float(mlp_ratio), float(drop_path)
        xavier = keras.initializers.GlorotUniform()
        # q, k and v are three D×D matrices: each its own Xavier bound √(6/(D + D)), as MoCo v3 initialises them.
        qkv_bound = math.sqrt(6.0 / (dim + dim))
        self.norm1 = layers.LayerNormalization(epsilon=LN_EPSILON, name="norm1")
        self.qkv = layers.Dense(3 * dim, kernel_initializer=keras.initializers.RandomUniform(-qkv_bound, qkv_bound),
                                name="qkv")
        self.proj = layers.Dense(dim, kernel_initializer=xavier, name="proj")
        self.norm2 = layers.LayerNormalization(epsilon=LN_EPSILON, name="norm2")
        self.fc1 = layers.Dense(int(dim * mlp_ratio), kernel_initializer=xavier, name="fc1")
        self.fc2 = layers.Dense(dim, kernel_initializer=xavier, name="fc2")
        self.drop = DropPath(drop_path, seed_name=f"{self.name}_drop_path", name="drop_path")

    def build(self, input_shape) -> None:
        tokens = (None, None, self.dim)
        self.norm1.build(tokens)
        self.qkv.build(tokens)
        self.proj.build(tokens)
        self.norm2.build(tokens)
        self.fc1.build(tokens)
        self.fc2.build((None, None, int(self.dim * self.mlp_ratio)))
        super().build(input_shape)

    def attention(self, x: tf.Tensor) -> tf.Tensor:
        """Multi-head self-attention of tokens [B, N, D]; the logits and softmax in float32."""
        shape = tf.shape(x)
        head_dim = self.dim // self.heads
        qkv = tf.reshape(self.qkv(x), [shape[0], shape[1], 3, self.heads, head_dim])
        q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))  # each [B, heads, N, head_dim]
        logits = tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), transpose_b=True) * head_dim ** -0.5
        attn = tf.cast(tf.nn.softmax(logits, axis=-1), v.dtype)
        out = tf.transpose(tf.matmul(attn, v), [0, 2, 1, 3])
        return self.proj(tf.reshape(out, [shape[0], shape[1], self.dim]))

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        x = x + self.drop(self.attention(self.norm1(x)), training=training)
        hidden = keras.activations.gelu(self.fc1(self.norm2(x)), approximate=False)
        return x + self.drop(self.fc2(hidden), training=training)

    def compute_output_shape(self, input_shape) -> tuple:
        return tuple(input_shape)

    def get_config(self) -> dict:
        return {**super().get_config(), "dim": self.dim, "heads": self.heads, "mlp_ratio": self.mlp_ratio,
                "drop_path": self.drop_path}


@keras.saving.register_keras_serializable(package="augself_tf")
class ClassToken(layers.Layer):
    """Tokens [B, 1 + N, D] -> the class token [B, D]."""

    def call(self, tokens: tf.Tensor) -> tf.Tensor:
        return tokens[:, 0]

    def compute_output_shape(self, input_shape) -> tuple:
        return (input_shape[0], input_shape[-1])


def build_vit(
    name: str = "vit_small",
    *,
    image_size: int = 224,
    patch_size: int = 0,
    position: str = "sincos",
    drop_path: float = 0.0,
    frozen_patch_projection: bool = False,
    input_mean: tuple[float, ...] = IMAGENET_MEAN,
    input_std: tuple[float, ...] = IMAGENET_STD,
    model_name: str | None = None,
) -> keras.Model:
    """A ViT mapping [N, H, W, 3] images in [0, 1] to the class token after the final LayerNorm, [N, D].

    Args:
      name: one of `VIT_SIZES`.
      image_size: the side the position embedding is built for (the pretraining views'); another side
        interpolates it. Pixels beyond the last whole patch are dropped, as a stride-k convolution does.
      patch_size: side of a patch; 0 = the size's own (16, 8 for ``vit_pico``) whatever ``image_size`` is (a run
        resolves its 0 by the image size first, `default_patch_size`).
      position: ``sincos`` (MoCo v3) or ``learned`` (DINO).
      drop_path: stochastic-depth rate of the last block, rising linearly from 0 at the first (DINO's).
      frozen_patch_projection: MoCo v3's ``--stop-grad-conv1``: the random patch projection is not trained.
      input_mean, input_std: per-channel statistics the first layer normalises [0, 1] images with.
      model_name: Keras name of the returned model.
    """
    if name not in VIT_SIZES:
        raise ValueError(f"unknown ViT '{name}'; choose from {', '.join(VIT_SIZES)}")
    size = VIT_SIZES[name]
    patch = patch_size or size.patch
    if patch < 1 or image_size < patch:
        raise ValueError(f"--patch_size must be between 1 and the image size {image_size}, got {patch}")
    grid = image_size // patch
    bound = math.sqrt(6.0 / (3 * patch * patch + size.dim))
    inputs = keras.Input((None, None, 3), name="images")
    x = InputNormalization(input_mean, input_std, name="input_normalization")(inputs)
    x = layers.Conv2D(size.dim, patch, strides=patch, padding="valid", name="patch_embed",
                      kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                      trainable=not frozen_patch_projection)(x)
    x = TokenEmbedding((grid, grid), position, name="token_embedding")(x)
    rates = np.linspace(0.0, drop_path, size.depth) if size.depth > 1 else [drop_path]
    for i, rate in enumerate(rates):
        x = TransformerBlock(size.dim, size.heads, drop_path=float(rate), name=f"block{i + 1}")(x)
    x = layers.LayerNormalization(epsilon=LN_EPSILON, name=FINAL_NORM)(x)
    features = ClassToken(name="cls")(x)
    return keras.Model(inputs, features, name=model_name or name)


def is_vit_model(backbone: keras.Model) -> bool:
    """Whether ``backbone`` (or its clone) is a ViT of `build_vit` (MoCo v3 shapes its heads by it)."""
    return any(layer.name == FINAL_NORM for layer in getattr(backbone, "layers", ()))


def patch_token_model(backbone: keras.Model) -> keras.Model | None:
    """The ViT's patch tokens after its final LayerNorm, [N, h·w, D], sharing ``backbone``'s layers; None for a
    backbone without them (a ResNet)."""
    if not is_vit_model(backbone):
        return None
    norm = backbone.get_layer(FINAL_NORM)
    tokens = layers.Lambda(lambda t: t[:, 1:], name="patch_tokens")(norm.output)
    return keras.Model(backbone.input, tokens, name=f"{backbone.name}_patch_tokens")
