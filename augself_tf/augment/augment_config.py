"""Configuration of the augmentation pipeline (pure Python, no TensorFlow).

The settings a user sets are :func:`~augself_tf.flag_fields.option` fields (augself-train's ``--image_size``,
``--color_strength``, ``--crop_min_scale``); the jitter strengths and the crop scale range are derived from
them. Each step's probability is an entry of one mapping, ``probabilities``: the registry declares every
step's knob and default (``declare_probabilities``, called when it publishes its pipeline), and a config
fills the knobs it is not given from those declarations. This module imports nothing of the registry.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterator, Mapping

from augself_tf.flag_fields import option

# The paper's colour-jitter strengths at strength factor s = 1 (brightness, contrast, saturation, hue).
DEFAULT_JITTER_STRENGTH: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
MAX_HUE_STRENGTH = 0.5

# Every registered step's probability knob and its default, in pipeline order; the registry writes it.
_DECLARED: dict[str, float] = {}


def declare_probabilities(defaults: Mapping[str, float]) -> None:
    """Sets the probability knobs that exist and their defaults (the registry, whenever its pipeline changes)."""
    _DECLARED.clear()
    _DECLARED.update(defaults)


def declared_probabilities() -> dict[str, float]:
    """``{knob: default}`` of every registered step's probability."""
    return dict(_DECLARED)


class Probabilities(Mapping[str, float]):
    """An immutable, hashable ``{knob: probability}`` (a frozen config's field)."""

    def __init__(self, items: Mapping[str, float]) -> None:
        self._items = dict(items)

    def __getitem__(self, name: str) -> float:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __repr__(self) -> str:
        return f"Probabilities({self._items!r})"


def _pair(name: str, value: object) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of numbers (lo, hi), got {value!r}") from None
    return lo, hi


def _real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """Parameters of the AugSelf / SimSiam augmentation pipeline.

    The order of application is fixed (see ``registry.PIPELINE``): RandomResizedCrop -> horizontal flip
    -> colour jitter -> solarization -> grayscale -> Gaussian blur -> rotation by k*90 degrees.

    Attributes:
      image_size: side S of the square output view.
      color_strength: the colour-jitter strength factor s; the strengths are ``jitter_base`` times s.
      crop_min_scale / crop_max_scale: range of the crop area as a fraction of the original image area.
      probabilities: ``{knob: probability}`` of the steps' knobs (``flip_prob``, ``jitter_prob``, ...); a
        knob not given takes the default its step declares.
      crop_ratio: range of the crop aspect ratio (width / height, in pixels).
      jitter_base: (brightness, contrast, saturation, hue) strengths at s = 1 (the paper's 0.4, 0.4, 0.4,
        0.1); hue at most 0.5.
      blur_sigma: range of the blur standard deviation, in output pixels.
    """

    image_size: int = option(96, "Side of the augmented views in pixels (paper: 96 STL10, 224 ImageNet100).")
    color_strength: float = option(1.0, "Colour-jitter strength factor s (0.4s, 0.4s, 0.4s, 0.1s).")
    crop_min_scale: float = option(0.2, "Smallest RandomResizedCrop area fraction.")
    probabilities: Mapping[str, float] = dataclasses.field(default_factory=dict)
    crop_max_scale: float = 1.0
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    jitter_base: tuple[float, float, float, float] = DEFAULT_JITTER_STRENGTH
    blur_sigma: tuple[float, float] = (0.1, 2.0)

    @property
    def jitter_strength(self) -> tuple[float, float, float, float]:
        """(brightness, contrast, saturation, hue) strengths: ``jitter_base`` times s, the hue capped at 0.5.

        Factors are sampled from [max(0, 1 - s), 1 + s] for the first three and from [-s, s] for the hue.
        """
        b, c, sat, h = self.jitter_base
        s = self.color_strength
        return (b * s, c * s, sat * s, min(h * s, MAX_HUE_STRENGTH))

    @property
    def crop_scale(self) -> tuple[float, float]:
        """(crop_min_scale, crop_max_scale)."""
        return (self.crop_min_scale, self.crop_max_scale)

    def probability(self, knob: str) -> float:
        """The probability of a step's knob: its entry in ``probabilities``, else its declared default.

        Raises:
          KeyError: no registered step has a knob of that name.
        """
        if knob in self.probabilities:
            return self.probabilities[knob]
        if knob in _DECLARED:  # a step registered after this config was made
            return _DECLARED[knob]
        raise KeyError(f"no augmentation has a probability named {knob!r}")

    @property
    def blur_kernel_size(self) -> int:
        """Odd Gaussian kernel size 2*floor(0.05*S)+1 (9 at 96 px, 23 at 224 px)."""
        return 2 * (self.image_size // 20) + 1  # floor(0.05*S) in exact integer arithmetic

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen dataclass: normalise fields in place
        if not isinstance(self.image_size, numbers.Integral) or isinstance(self.image_size, bool) \
                or self.image_size < 1:
            raise ValueError(f"image_size must be a positive int, got {self.image_size!r}")
        set_(self, "image_size", int(self.image_size))

        s = self.color_strength
        if not _real(s) or not 0.0 <= s < math.inf:
            raise ValueError(f"color_strength must be a finite number >= 0, got {s!r}")
        set_(self, "color_strength", float(s))

        lo, hi = self.crop_min_scale, self.crop_max_scale
        if not (_real(lo) and _real(hi) and 0.0 < lo <= hi <= 1.0):
            raise ValueError(f"crop scale must satisfy 0 < crop_min_scale <= crop_max_scale <= 1, got ({lo!r}, "
                             f"{hi!r})")
        set_(self, "crop_min_scale", float(lo))
        set_(self, "crop_max_scale", float(hi))

        lo, hi = _pair("crop_ratio", self.crop_ratio)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"crop_ratio must satisfy 0 < lo <= hi < inf, got {self.crop_ratio!r}")
        set_(self, "crop_ratio", (lo, hi))

        set_(self, "probabilities", self._checked_probabilities())

        try:
            base = tuple(float(v) for v in self.jitter_base)
        except (TypeError, ValueError):
            base = ()
        if len(base) != 4 or not all(0.0 <= v < math.inf for v in base):
            raise ValueError("jitter_base must be 4 finite non-negative numbers (brightness, contrast, saturation, "
                             f"hue), got {self.jitter_base!r}")
        if base[3] > MAX_HUE_STRENGTH:
            raise ValueError(f"hue strength must be <= {MAX_HUE_STRENGTH}, got {base[3]!r}")
        set_(self, "jitter_base", base)

        lo, hi = _pair("blur_sigma", self.blur_sigma)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"blur_sigma must satisfy 0 < lo <= hi < inf, got {self.blur_sigma!r}")
        set_(self, "blur_sigma", (lo, hi))

    def _checked_probabilities(self) -> Probabilities:
        """``probabilities`` completed with the declared defaults, each checked to lie in [0, 1]."""
        try:
            given = {str(k): v for k, v in dict(self.probabilities).items()}
        except (TypeError, ValueError):
            raise ValueError(f"probabilities must be a mapping {{knob: probability}}, got {self.probabilities!r}") \
                from None
        unknown = sorted(set(given) - set(_DECLARED))
        if unknown:
            raise ValueError(f"unknown augmentation probability {unknown[0]!r}; known: {', '.join(sorted(_DECLARED))}")
        values = {**_DECLARED, **given}
        for name, p in values.items():
            if not _real(p) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
        return Probabilities({name: float(p) for name, p in values.items()})
