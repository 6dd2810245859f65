"""Configuration of the augmentation pipeline (pure Python, no TensorFlow)."""

from __future__ import annotations

import dataclasses
import math
import numbers

# The paper's colour-jitter strengths at strength factor s = 1 (brightness, contrast, saturation, hue).
DEFAULT_JITTER_STRENGTH: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
MAX_HUE_STRENGTH = 0.5


def _pair(name: str, value: object) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of numbers (lo, hi), got {value!r}") from None
    return lo, hi


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """Parameters of the AugSelf / SimSiam augmentation pipeline.

    The order of application is fixed (see ``registry.PIPELINE``): RandomResizedCrop -> horizontal flip
    -> colour jitter -> solarization -> grayscale -> Gaussian blur -> rotation by k*90 degrees.

    Attributes:
      image_size: side S of the square output view.
      crop_scale: range of the crop area as a fraction of the original image area.
      crop_ratio: range of the crop aspect ratio (width / height, in pixels).
      flip_prob: probability of a horizontal flip.
      jitter_prob: probability of applying colour jitter.
      jitter_strength: (brightness, contrast, saturation, hue) strengths; factors are sampled from
        [max(0, 1 - s), 1 + s] for the first three and from [-s, s] for hue (hue strength <= 0.5).
      gray_prob: probability of converting the view to grayscale.
      blur_prob: probability of a Gaussian blur.
      blur_sigma: range of the blur standard deviation, in output pixels.
      rotation_prob: probability of rotating by k*90 degrees, k uniform in {0, 1, 2, 3}.
      solarize_prob: probability of solarizing with a threshold delta ~ U(0, 1).
      probabilities: (knob name, probability) pairs for steps registered without a field of their own
        (see ``registry.register``); the built-in steps use the fields above.
    """

    image_size: int = 96
    crop_scale: tuple[float, float] = (0.2, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_prob: float = 0.5
    jitter_prob: float = 0.8
    jitter_strength: tuple[float, float, float, float] = DEFAULT_JITTER_STRENGTH
    gray_prob: float = 0.2
    blur_prob: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    rotation_prob: float = 0.0
    solarize_prob: float = 0.0
    probabilities: tuple[tuple[str, float], ...] = ()

    def probability(self, field: str) -> float:
        """The probability of a step's knob: its own field, else ``probabilities``, else the knob's default."""
        if field in _FIELDS:
            return getattr(self, field)
        value = dict(self.probabilities).get(field)
        if value is None:
            from augself_tf.augment import registry  # registry imports this module

            value = next((k.default for k in registry.probabilities() if k.field == field), None)
        if value is None:
            raise KeyError(f"no augmentation has a probability named {field!r}")
        return value

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen dataclass: normalise fields in place
        if (
            isinstance(self.image_size, bool)
            or not isinstance(self.image_size, numbers.Integral)
            or self.image_size < 1
        ):
            raise ValueError(f"image_size must be a positive int, got {self.image_size!r}")
        set_(self, "image_size", int(self.image_size))

        lo, hi = _pair("crop_scale", self.crop_scale)
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"crop_scale must satisfy 0 < lo <= hi <= 1, got {self.crop_scale!r}")
        set_(self, "crop_scale", (lo, hi))

        lo, hi = _pair("crop_ratio", self.crop_ratio)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"crop_ratio must satisfy 0 < lo <= hi < inf, got {self.crop_ratio!r}")
        set_(self, "crop_ratio", (lo, hi))

        from augself_tf.augment import registry  # registry imports this module

        try:
            extra = {str(k): v for k, v in dict(self.probabilities).items()}
        except (TypeError, ValueError):
            raise ValueError(f"probabilities must be (name, probability) pairs, got {self.probabilities!r}") from None
        known = {k.field for k in registry.probabilities()}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(f"unknown augmentation probability {unknown[0]!r}; known: {', '.join(sorted(known))}")
        for name in sorted(known | {f for f in _FIELDS if f.endswith("_prob")}):
            p = getattr(self, name) if name in _FIELDS else extra.get(name, 0.0)
            if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
            if name in _FIELDS:
                set_(self, name, float(p))
            elif name in extra:
                extra[name] = float(p)
        set_(self, "probabilities", tuple(sorted(extra.items())))

        try:
            strength = tuple(float(v) for v in self.jitter_strength)
        except (TypeError, ValueError):
            strength = ()
        if len(strength) != 4 or not all(0.0 <= v < math.inf for v in strength):
            raise ValueError(
                "jitter_strength must be 4 finite non-negative numbers (brightness, contrast, saturation, "
                f"hue), got {self.jitter_strength!r}"
            )
        if strength[3] > MAX_HUE_STRENGTH:
            raise ValueError(f"hue strength must be <= {MAX_HUE_STRENGTH}, got {strength[3]!r}")
        set_(self, "jitter_strength", strength)

        lo, hi = _pair("blur_sigma", self.blur_sigma)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"blur_sigma must satisfy 0 < lo <= hi < inf, got {self.blur_sigma!r}")
        set_(self, "blur_sigma", (lo, hi))

    def with_color_strength(self, s: float) -> AugmentConfig:
        """Returns a copy whose jitter strengths are the paper's defaults times ``s``.

        Brightness, contrast and saturation become 0.4*s; hue becomes 0.1*s capped at 0.5.
        """
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or not 0.0 <= s < math.inf:
            raise ValueError(f"colour strength factor must be a finite number >= 0, got {s!r}")
        b, c, sat, h = DEFAULT_JITTER_STRENGTH
        s = float(s)
        strength = (b * s, c * s, sat * s, min(h * s, MAX_HUE_STRENGTH))
        return dataclasses.replace(self, jitter_strength=strength)

    @property
    def blur_kernel_size(self) -> int:
        """Odd Gaussian kernel size 2*floor(0.05*S)+1 (9 at 96 px, 23 at 224 px)."""
        return 2 * (self.image_size // 20) + 1  # floor(0.05*S) in exact integer arithmetic


_FIELDS = frozenset(f.name for f in dataclasses.fields(AugmentConfig))
