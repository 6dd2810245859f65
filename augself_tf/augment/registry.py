"""THE registry of augmentations: the pipeline's order, and what it publishes to everything that loops over it.

``PIPELINE`` lists the steps in their (fixed) order of application (docs/architecture.md): RandomResizedCrop
-> horizontal flip -> colour jitter -> solarization -> grayscale -> Gaussian blur -> rotation by k*90°.
The steps themselves are declared in ``geometric.py`` and ``photometric.py`` from the types of ``steps.py``
(draws, stage, probability knob, ω, measurements, descriptors, AugSelf target and loss). Steps whose
parameters AugSelf can predict are ``Augmentation`` entries and appear in ``AUGMENTATIONS`` (grayscale has
an ω, 1 if applied, but is not predicted). Adding an augmentation = its op + its entry, placed in
``_publish`` below or added with ``register(entry, after=...)``; ``augment_view``, ``finish_views``,
``omega_diff``, train_main's probability flags, ``AugmentConfig``'s probabilities, the model's heads, losses
and conditioning all loop over what this module publishes.

Randomness: ``augment_view`` gives every step its own seed, row ``seed_slot`` of
``stateless_split(seed, NUM_SEED_SLOTS)``; a step splits it further for its own draws. Slots are fixed per
step (not positions), so adding a step never changes the draws of the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from augself_tf.augment.augment_config import declare_probabilities
from augself_tf.augment.geometric import CROP, FLIP, ROTATION
from augself_tf.augment.photometric import BLUR, COLOR, GRAYSCALE, SOLARIZE
from augself_tf.augment.steps import DEVICE, HOST, Augmentation, Descriptor, Probability, Step

# Order of application (fixed; docs/architecture.md): solarization comes right after colour jitter, as in the
# paper's appendix (it does not commute with grayscale or blur). Seed slots are independent of positions.
# Lists and dicts below are updated in place by `register`, so importers see registered steps.
PIPELINE: list[Step] = []
# Listed by seed slot, not by position: the public order (AUGSELF_CHOICES, error messages, heads) does not
# change when a step moves in PIPELINE. Read-only: steps are added with `register`, which refuses a taken name.
_AUGMENTATIONS: dict[str, Augmentation] = {}
AUGMENTATIONS: Mapping[str, Augmentation] = MappingProxyType(_AUGMENTATIONS)
AUGSELF_CHOICES: list[str] = []
NUM_SEED_SLOTS: int = 0
# Every ω entry of a view and its size: the steps' ω and their measurements.
OMEGA_DIMS: dict[str, int] = {}
# The descriptors --condition can choose, by name (listed by seed slot, as AUGMENTATIONS).
DESCRIPTORS: dict[str, Descriptor] = {}
CONDITION_CHOICES: list[str] = []


def _check(pipeline: list[Step]) -> None:
    if len({s.seed_slot for s in pipeline}) != len(pipeline) or len({s.name for s in pipeline}) != len(pipeline):
        raise ValueError("pipeline steps must have unique names and seed slots")
    seen_device = False
    for step in pipeline:
        if step.stage not in (HOST, DEVICE):
            raise ValueError(f"step {step.name!r}: stage must be {HOST!r} or {DEVICE!r}, got {step.stage!r}")
        if step.stage == DEVICE and step.transform_batch is None:
            raise ValueError(f"device step {step.name!r} needs a transform_batch")
        if step.stage == HOST and seen_device and not step.commutes_with_device:
            raise ValueError(f"host step {step.name!r} follows a device step but does not commute with it")
        if (step.omega is None) != (step.omega_dim == 0):
            raise ValueError(f"step {step.name!r}: omega and omega_dim go together")
        seen_device |= step.stage == DEVICE
    omega_names = [s.name for s in pipeline if s.omega is not None]
    omega_names += [m.name for s in pipeline for m in s.measurements]
    step_names = {s.name for s in pipeline}
    measured = {m.name for s in pipeline for m in s.measurements}
    if len(set(omega_names)) != len(omega_names) or measured & step_names:
        raise ValueError("measurements must have names distinct from each other and from every step")
    descriptors = [d.name for s in pipeline for d in s.descriptors]
    if len(set(descriptors)) != len(descriptors):
        raise ValueError("descriptors must have unique names")
    knobs = [s.probability.field for s in pipeline if s.probability is not None]
    if len(set(knobs)) != len(knobs):
        raise ValueError("probability knobs must have unique names")


def _publish(pipeline: list[Step]) -> None:
    global NUM_SEED_SLOTS
    _check(pipeline)
    PIPELINE[:] = pipeline
    _AUGMENTATIONS.clear()
    _AUGMENTATIONS.update(
        {s.name: s for s in sorted(pipeline, key=lambda s: s.seed_slot) if isinstance(s, Augmentation)}
    )
    AUGSELF_CHOICES[:] = list(AUGMENTATIONS)
    NUM_SEED_SLOTS = max(s.seed_slot for s in pipeline) + 1
    by_slot = sorted(pipeline, key=lambda s: s.seed_slot)
    OMEGA_DIMS.clear()
    OMEGA_DIMS.update({s.name: s.omega_dim for s in by_slot if s.omega is not None})
    OMEGA_DIMS.update({m.name: m.dim for s in by_slot for m in s.measurements})
    DESCRIPTORS.clear()
    DESCRIPTORS.update({d.name: d for s in by_slot for d in s.descriptors})
    CONDITION_CHOICES[:] = list(DESCRIPTORS)
    declare_probabilities({k.field: k.default for k in probabilities()})


def register(step: Step, *, after: str) -> None:
    """Adds a step to the pipeline right after the step named ``after`` (an augmentation is then predictable).

    Raises:
      ValueError: a name already registered, a clash of seed slot, an unknown ``after``, or a host step that
        would follow a device step without commuting with it.
    """
    names = [s.name for s in PIPELINE]
    if step.name in names:
        raise ValueError(f"augmentation step {step.name!r} is already registered; choose another name")
    if after not in names:
        raise ValueError(f"unknown step {after!r}; steps are {', '.join(names)}")
    pipeline = list(PIPELINE)
    pipeline.insert(names.index(after) + 1, step)
    _publish(pipeline)


def unregister(name: str) -> None:
    """Removes a registered step (undoes ``register``)."""
    _publish([s for s in PIPELINE if s.name != name])


@contextlib.contextmanager
def registered(step: Step, *, after: str) -> Iterator[Step]:
    """``register(step, after=after)`` for the ``with`` block, then ``unregister`` (tests)."""
    register(step, after=after)
    try:
        yield step
    finally:
        unregister(step.name)


def probabilities() -> list[Probability]:
    """Every step's probability knob, in pipeline order (flags and config validation read this)."""
    return [s.probability for s in PIPELINE if s.probability is not None]


_publish([CROP, FLIP, COLOR, SOLARIZE, GRAYSCALE, BLUR, ROTATION])


def parse_augself(text: str | None) -> tuple[str, ...]:
    """Parses a comma-separated list of AugSelf augmentations, e.g. "crop,color" -> ("crop", "color").

    Empty text or "none" -> (). Whitespace is ignored; duplicates are dropped (first occurrence kept).

    Raises:
      ValueError: for a name that is not in ``AUGMENTATIONS``.
    """
    if text is None:
        return ()
    text = text.strip()
    if text.lower() in ("", "none"):
        return ()
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if name not in AUGMENTATIONS:
            raise ValueError(
                f"unknown AugSelf augmentation {name!r}; choose from {', '.join(AUGSELF_CHOICES)}"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def parse_condition(text: str | None) -> tuple[str, ...]:
    """Parses a comma-separated list of descriptors for ``--condition``, e.g. "crop,color" -> ("crop", "color").

    Empty text or "none" -> (). Whitespace is ignored; duplicates are dropped (first occurrence kept).

    Raises:
      ValueError: for a name that is not in ``DESCRIPTORS``.
    """
    if text is None or text.strip().lower() in ("", "none"):
        return ()
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if name not in DESCRIPTORS:
            raise ValueError(f"unknown descriptor {name!r} for --condition; choose from {', '.join(CONDITION_CHOICES)}")
        if name not in names:
            names.append(name)
    return tuple(names)
