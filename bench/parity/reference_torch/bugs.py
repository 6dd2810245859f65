"""The reference's deliberate one-line bugs, which the harness must catch (``parity.py --inject``)."""

from __future__ import annotations

#: name -> (methods it applies to, what it does). Each is one changed line of this package.
BUGS: dict[str, tuple[tuple[str, ...], str]] = {
    "no_normalisation": (("simsiam", "moco", "byol"), "views enter the stem in [0, 1], not mean/std-normalised"),
    "biased_running_var": (("simsiam", "moco", "byol"), "BN running variance from the biased batch variance"),
    "bn_momentum": (("simsiam", "moco", "byol"), "BN running statistics with momentum 0.01 instead of 0.1"),
    "keras_momentum": (("simsiam", "moco", "byol"), "Keras SGD: v ← μ·v − lr·g, w ← w + v (lr inside the buffer)"),
    "missing_wd": (("simsiam", "moco", "byol"), "no coupled L2 weight decay"),
    "crop_target_sign": (("simsiam", "moco", "byol"), "crop target ω_diff(2,1) instead of ω_diff(1,2)"),
    "detached_augself": (("simsiam", "moco", "byol"), "AugSelf heads read detached backbone features"),
    "predictor_scheduled_lr": (("simsiam",), "SimSiam predictor follows the cosine schedule"),
    "ema_swapped": (("moco", "byol"), "EMA target ← (1−m)·target + m·online"),
    "query_enqueue": (("moco",), "MoCo enqueues the online queries (the reference code's defect)"),
}


class Bugs:
    """The set of injected bugs; ``bugs("name")`` is True when that bug is on."""

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        unknown = [n for n in names if n not in BUGS]
        if unknown:
            raise ValueError(f"unknown bug {unknown[0]!r}; choose from {', '.join(BUGS)}")
        self.names = frozenset(names)

    def __call__(self, name: str) -> bool:
        return name in self.names
