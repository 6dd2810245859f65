"""DINO (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021;
facebookresearch/dino ``main_dino.py``, ``vision_transformer.py`` `DINOHead`, ``utils.py``).

Self-distillation without labels: a student (the online backbone and `DINOHead`) learns to give every crop of an
image the teacher's centred, sharpened distribution over K outputs, the teacher seeing only the global crops
(`augself_tf.losses.dino_distillation`). The teacher is the EMA of the student, backbone and head, with m on a
per-step cosine from ``teacher_momentum`` to 1 (``utils.cosine_scheduler``); it runs without drop-path (a ViT teacher
is called in inference mode, which only turns drop-path off; a ResNet teacher keeps its batch statistics, as DINO's
in train mode). The center is an EMA of the teacher outputs' global batch mean, updated after the step. τ_t is warmed up
linearly per epoch (``teacher_temp_schedule[epoch]``). The head's last layer is left out of the optimizer's update
for the first ``freeze_last_layer_epochs`` (`held_variables`; zero gradients would still decay it under AdamW).

Views (multi-crop, ``DataAugmentationDINO``): ``global_crops`` at ``--image_size`` with area ``global_crop_scale``,
the first two BYOL's asymmetric pair (blur 1.0 / 0.1, solarization 0 / 0.2; ``--asymmetric_views``), then
``local_crops`` smaller crops at ``local_crop_size`` with area ``local_crop_scale``, the run's other augmentations.
Each is a `ViewSpec` of the method's `view_plan`, so every crop has its own ω, drawn from its own seed row. Crops
of one size go through a backbone together (DINO's ``MultiCropWrapper``: the batch statistics of a ResNet are those
of all crops of that size). AugSelf reads the student features of global crops 1 and 2 (views 1 and 2).
"""

from __future__ import annotations

import dataclasses
import math

import keras
import tensorflow as tf

from augself_tf.augment.views import ViewPlan, ViewSpec, parse_area_range, side_pixels
from augself_tf.flag_fields import declared_options, option
from augself_tf.losses.dino_distillation import dino_cross_entropy, global_batch_mean, teacher_entropy, updated_center
from augself_tf.methods.augself_model import Forward
from augself_tf.methods.mocov3 import ASYMMETRIC_VIEWS
from augself_tf.methods.momentum import MomentumMethod, cosine_tau
from augself_tf.models.resnet import batch_norm
from augself_tf.models.vit import is_vit_model

#: DINO's global crop area without local crops (its help: "we recommend --global_crops_scale 0.14 1.") and with.
GLOBAL_SCALE_ALONE, GLOBAL_SCALE_MULTI_CROP = (0.14, 1.0), (0.4, 1.0)


class DINOHead(keras.layers.Layer):
    """``DINOHead``: Linear(hidden)–GELU–Linear(hidden)–GELU–Linear(bottleneck), l2 normalisation, then a bias-free
    weight-normalised Linear(K), W = g·v/‖v‖ per output unit, g fixed at 1 (``norm_last_layer``) or trained. With
    ``use_bn`` (DINO's ``--use_bn_in_head``), a BN between each hidden Linear and its GELU, the Linears keeping their
    bias as ``nn.Linear`` does; its statistics span the replicas with ``synchronized_bn`` (DINO converts the whole
    student to SyncBatchNorm).

    Initialisation as DINO's: the MLP's linears N(0, 0.02) (torch's ``trunc_normal_`` cuts at ±2, 100 σ: a plain
    normal), zero biases; v as ``nn.Linear``'s default, U(±1/√bottleneck); g ones, shaped [1, K] (torch's
    ``weight_g`` is 2-D, so the ``1d`` decay rule decays it as DINO's ``get_params_groups`` does).
    """

    def __init__(self, out_dim: int, hidden: int = 2048, bottleneck: int = 256, norm_last_layer: bool = True,
                 use_bn: bool = False, synchronized_bn: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out_dim, self.bottleneck, self.norm_last_layer = int(out_dim), int(bottleneck), bool(norm_last_layer)
        init = {"kernel_initializer": keras.initializers.RandomNormal(stddev=0.02), "bias_initializer": "zeros"}
        self.linears = [keras.layers.Dense(units, name=f"{self.name}_fc{i + 1}", **init)
                        for i, units in enumerate((hidden, hidden, bottleneck))]
        self.norms = [batch_norm(synchronized_bn, name=f"{self.name}_bn{i + 1}") for i in range(2)] if use_bn else []

    def build(self, input_shape) -> None:
        dim = int(input_shape[-1])
        for linear in self.linears:
            linear.build((None, dim))
            dim = linear.units
        for norm, linear in zip(self.norms, self.linears, strict=False):
            norm.build((None, linear.units))
        bound = 1.0 / math.sqrt(self.bottleneck)
        self.last_v = self.add_weight(shape=(self.bottleneck, self.out_dim), name="last_layer_v",
                                      initializer=keras.initializers.RandomUniform(-bound, bound))
        self.last_g = self.add_weight(shape=(1, self.out_dim), name="last_layer_g", initializer="ones",
                                      trainable=not self.norm_last_layer)
        super().build(input_shape)

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        for i, linear in enumerate(self.linears):
            x = linear(x)
            if i < len(self.linears) - 1:
                if self.norms:
                    x = self.norms[i](x, training=training)
                x = keras.activations.gelu(x, approximate=False)
        x = tf.math.l2_normalize(tf.cast(x, tf.float32), axis=-1)
        v = tf.cast(self.last_v, tf.float32)
        w = tf.cast(self.last_g, tf.float32) * v / tf.norm(v, axis=0, keepdims=True)
        return tf.matmul(x, w)

    def last_layer_variables(self) -> list[tf.Variable]:
        """The last layer's trained variables (v, and g unless fixed)."""
        return [self.last_v] + ([] if self.norm_last_layer else [self.last_g])

    def compute_output_shape(self, input_shape) -> tuple:
        return (input_shape[0], self.out_dim)


class DINO(MomentumMethod):
    """DINO: student and EMA teacher (backbone + `DINOHead`), multi-crop, centering and sharpening."""

    method_name = "dino"
    momentum_prefix = "teacher"  # its layers and checkpoint keys: teacher_encoder, teacher_backbone, teacher_projector

    @dataclasses.dataclass(frozen=True)
    class Options:
        dino_out_dim: int = option(65536, "DINO: K, the outputs of the head's weight-normalised last layer (its "
                                          "ImageNet value 65536)")
        dino_hidden: int = option(2048, "DINO: hidden units of the head's two GELU layers")
        dino_bottleneck: int = option(256, "DINO: the head's output before its l2 norm and last layer")
        norm_last_layer: bool = option(True, "DINO: the last layer's weight norm fixed at 1 (off: trained, DINO's "
                                             "choice for ViT-S at 300 epochs)")
        use_bn_in_head: bool = option(False, "DINO: BN between each hidden linear of the head and its GELU (DINO's "
                                             "--use_bn_in_head, off in its README runs)")
        student_temperature: float = option(0.1, "DINO: the student's softmax temperature")
        teacher_temperature: float = option(0.04, "DINO: the teacher's softmax temperature after its warm-up")
        warmup_teacher_temperature: float = option(0.04, "DINO: the teacher's temperature at the first epoch, raised "
                                                         "linearly to --teacher_temperature")
        teacher_temperature_epochs: int = option(0, "DINO: epochs of the teacher-temperature warm-up")
        center_momentum: float = option(0.9, "DINO: EMA momentum of the center of the teacher's outputs")
        teacher_momentum: float = option(0.996, "DINO: base EMA momentum of the teacher, raised to 1 on a per-step "
                                                "cosine")
        freeze_last_layer_epochs: int = option(1, "DINO: epochs the head's last layer is left out of the update")
        global_crops: int = option(2, "Multi-crop: global crops per image, at --image_size (the teacher's)")
        local_crops: int = option(0, "Multi-crop: local crops per image, at --local_crop_size (DINO's ImageNet "
                                     "recipe: 8)")
        global_crop_scale: str = option("auto", "Multi-crop: area range lo,hi of the global crops as fractions of "
                                                "the image (auto: 0.4,1 with local crops, 0.14,1 without, DINO's)")
        local_crop_scale: str = option("0.05,0.4", "Multi-crop: area range lo,hi of the local crops as fractions "
                                                   "of the image")
        local_crop_size: float = option(0.43, "Multi-crop: side of the local crops, a fraction of --image_size (<= "
                                              "1, rounded half up) or pixels (> 1); DINO: 96 of 224 px")
        asymmetric_views: bool = option(True, "BYOL's asymmetric views (MoCo v3's, DINO's global crops): view 1 "
                                              "always blurred, view 2 blurred at p 0.1 and solarized at p 0.2 (off: "
                                              "both take --blur_prob and --solarize_prob)")
        total_steps: int | None = None  # the training loop's
        steps_per_epoch: int | None = None

        def __post_init__(self) -> None:
            positive = ("dino_out_dim", "dino_hidden", "dino_bottleneck", "student_temperature",
                        "teacher_temperature", "warmup_teacher_temperature", "local_crop_size")
            for name in positive:
                if not getattr(self, name) > 0:
                    raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
            for name in ("teacher_temperature_epochs", "freeze_last_layer_epochs", "local_crops"):
                if getattr(self, name) < 0:
                    raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
            for name in ("center_momentum", "teacher_momentum"):
                if not 0.0 <= getattr(self, name) <= 1.0:
                    raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
            if self.global_crops < 2:
                raise ValueError(f"--global_crops must be >= 2 (the teacher's crops, each against the others), got "
                                 f"{self.global_crops}")
            if self.local_crop_size > 1 and self.local_crop_size != int(self.local_crop_size):
                raise ValueError(f"--local_crop_size in pixels must be a whole number, got {self.local_crop_size:g}")
            self.crop_scales()

        def crop_scales(self) -> tuple[tuple[float, float], tuple[float, float]]:
            """(global, local) crop area ranges."""
            local = parse_area_range("local_crop_scale", self.local_crop_scale)
            if self.global_crop_scale.strip() == "auto":
                return (GLOBAL_SCALE_MULTI_CROP if self.local_crops else GLOBAL_SCALE_ALONE), local
            return parse_area_range("global_crop_scale", self.global_crop_scale), local

    @classmethod
    def view_plan(cls, options) -> ViewPlan:
        """The global crops (the first two BYOL's asymmetric pair unless ``--noasymmetric_views``), then the local
        crops at their own size and area range."""
        o = declared_options(cls, options)
        global_scale, local_scale = o.crop_scales()
        first, second = ASYMMETRIC_VIEWS.views if o.asymmetric_views else (ViewSpec(), ViewSpec())
        glob = [dataclasses.replace(spec, crop_scale=global_scale) for spec in (first, second)]
        glob += [ViewSpec(crop_scale=global_scale)] * (o.global_crops - 2)
        size = o.local_crop_size
        local = ViewSpec(image_size=int(size), crop_scale=local_scale) if size > 1 else \
            ViewSpec(size_fraction=float(size), crop_scale=local_scale)
        return ViewPlan((*glob, *[local] * o.local_crops))

    def __init__(self, backbone, **kwargs) -> None:
        super().__init__(backbone, **kwargs)
        o = self.method_options
        self.global_crops, self.local_crops = o.global_crops, o.local_crops
        self.vit = is_vit_model(backbone)
        if self.vit and o.local_crops:
            patch = backbone.get_layer("patch_embed").kernel_size[0]
            pixels = side_pixels(o.local_crop_size, self.augment_config.image_size)
            if pixels < patch:
                raise ValueError(f"--local_crop_size={o.local_crop_size:g} gives {pixels}-pixel local crops at "
                                 f"--image_size={self.augment_config.image_size}, below the ViT's {patch}-pixel "
                                 "patch; choose a larger --local_crop_size")
        self.steps_per_epoch = int(o.steps_per_epoch or 0)
        self.total_steps = o.total_steps
        head = {"out_dim": o.dino_out_dim, "hidden": o.dino_hidden, "bottleneck": o.dino_bottleneck,
                "norm_last_layer": o.norm_last_layer, "use_bn": o.use_bn_in_head,
                "synchronized_bn": self.synchronized_bn}
        self.projector = DINOHead(name="student_head", **head)
        self.create_momentum_encoder(projector=DINOHead(name="teacher_head", **head))

    def build_heads(self, feature_dim: int) -> None:
        self.projector(tf.zeros([2, feature_dim]))
        self.initialize_momentum_encoder(feature_dim)
        # Identical on every replica, each writing the same all-reduced mean; aggregation NONE, as MoCo's queue.
        self.center = self.add_weight(shape=(1, self.method_options.dino_out_dim), initializer="zeros",
                                      trainable=False, name="center", aggregation="none", autocast=False)

    @property
    def evaluated_backbone(self) -> keras.Model:
        """The teacher's backbone: DINO evaluates the teacher (eval_knn.py and eval_linear.py default to
        ``--checkpoint_key teacher``), which leads the student through training."""
        return self.momentum_encoder.backbone

    def held_variables(self) -> tuple[list[tf.Variable], int]:
        """The student head's last layer, for the first ``freeze_last_layer_epochs`` epochs."""
        return self.projector.last_layer_variables(), self.method_options.freeze_last_layer_epochs * \
            self.steps_per_epoch

    def momentum_at(self, step: tf.Tensor) -> tf.Tensor:
        """m of the EMA update after step ``step``: DINO's ``momentum_schedule[it]``, the cosine from
        ``teacher_momentum`` to 1 over the run."""
        return cosine_tau(step, self.total_steps, self.method_options.teacher_momentum)

    def teacher_temperature_at(self, step: tf.Tensor) -> tf.Tensor:
        """τ_t of the epoch of step ``step``: ``linspace(warm-up, final, W)[epoch]`` for the first W epochs, then
        the final value (``DINOLoss.teacher_temp_schedule``)."""
        o = self.method_options
        warm, final, epochs = o.warmup_teacher_temperature, o.teacher_temperature, o.teacher_temperature_epochs
        if not epochs:
            return tf.constant(final, tf.float32)
        epoch = tf.cast(step, tf.float32) // float(max(1, self.steps_per_epoch))
        rising = warm + (final - warm) * epoch / float(max(1, epochs - 1))
        return tf.where(epoch < epochs, rising, final)

    def method_forward(self, batch: dict, training: bool) -> Forward:
        views = [batch[f"view{j + 1}"] for j in range(self.global_crops + self.local_crops)]
        global_images = tf.concat(views[:self.global_crops], axis=0)
        f_global = self.backbone(global_images, training=training)
        features = [f_global]
        if self.local_crops:
            features.append(self.backbone(tf.concat(views[self.global_crops:], axis=0), training=training))
        student = self.projector(tf.concat([tf.cast(f, tf.float32) for f in features], axis=0), training=training)
        # A ViT teacher runs in inference mode (no drop-path); its head, as DINO's whole teacher, in training mode
        # (a BN head normalises with the batch's statistics).
        teacher_features = self.momentum_encoder.backbone(global_images, training=training and not self.vit)
        teacher = self.momentum_encoder.projector(tf.cast(teacher_features, tf.float32), training=training)
        teacher = tf.stop_gradient(tf.cast(teacher, tf.float32))
        step = tf.cast(self.optimizer.iterations, tf.float32) if getattr(self, "optimizer", None) is not None else 0.0
        temperature = self.teacher_temperature_at(step)
        o = self.method_options
        loss = dino_cross_entropy(student, teacher, tf.convert_to_tensor(self.center), num_global=self.global_crops,
                                  student_temperature=o.student_temperature, teacher_temperature=temperature)
        f1, f2 = tf.split(f_global, self.global_crops, axis=0)[:2]
        entropy = teacher_entropy(teacher, self.center, temperature)
        # DINO's two collapse curves (its paper's Fig. 7): the loss is their sum.
        logs = {"dino/teacher_temperature": temperature, "dino/momentum": self.momentum_at(step),
                "collapse/teacher_entropy": entropy, "collapse/kl": loss - entropy}
        return Forward(f1, f2, loss, logs, aux={"batch_mean": global_batch_mean(teacher)})

    def post_step(self, batch: dict, forward: Forward) -> None:
        super().post_step(batch, forward)  # the teacher's EMA update, then the center
        self.center.assign(updated_center(self.center, forward.aux["batch_mean"],
                                          self.method_options.center_momentum))
