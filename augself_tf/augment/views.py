"""Which views of an image a method needs, and which augmentation draws each view takes from another view.

A method declares its views once, as a ``ViewPlan``: how many, and for each view the steps whose draws it
copies from an earlier view (``ViewSpec.shares``). Everything downstream follows from that declaration: the
pretraining input (``augself_tf.data.pretrain``) draws every view of an example from the plan's per-slot
seeds, host or device mode alike (``finish_views`` finishes however many views a batch carries), and the ω of
every view rides along, so equal draws show as equal ω. Replay and resume stay exact because the seeds are a
function of (seed, epoch, index) and the plan alone.

How a draw is copied: every step draws from its own seed slot (``registry``), row ``seed_slot`` of
``stateless_split(view seed, NUM_SEED_SLOTS)``. A view that shares step ``s`` with view ``j`` uses view ``j``'s
row for that slot, so it draws exactly what view ``j`` drew (a step's draws depend on its seed and on the
original image's shape only, never on the image entering it). The views' own seeds are
``stateless_split(example seed, N)``, whose first two rows are the two-view pipeline's seeds: with no
shared step, views 1 and 2 of any plan are the pair every two-view method sees.

LooC (Xiao et al., ICLR 2021) is ``leave_one_out(("color", "rotation"))``: q and k0 independent, then one
key per left-out augmentation that copies q's draw of it.

A view may also be the evaluation view of the image (``ViewSpec(eval_view=True)``: EquiMod's unaugmented x0):
``augself_tf.data.eval_view.preprocess``, no augmentation, ω of the identity. It draws nothing, so its seed
row goes unused and the other views' draws are what they would be without it.

Aligned pairs (STL, Yu et al., NeurIPS 2024): a plan's ``aligned`` steps are drawn once per pair of examples.
Example 2i+1 of every batch takes example 2i's rows of those slots, view by view (its view j draws what
example 2i's view j draws), so the pair shares, say, the crop and colour of view 1 and those of view 2 while
every other step stays its own. The pairing is the input pipeline's (``augself_tf.data.pretrain``): it hands
``slot_seeds`` the partner's example seed; example 2i is its own partner, so it is what it is without pairs.

An objective's views (``augself_tf.objectives.extend_views``) are recorded on the plan as that objective's
(``objective_views``, ``views_of(key)``), so its loss reads them from the plan the model was built with.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from augself_tf.augment import registry
from augself_tf.augment.augment_config import AugmentConfig


def parse_area_range(flag: str, text: str) -> tuple[float, float]:
    """``"lo,hi"`` -> (lo, hi), a crop's area range as fractions of the image (an extra view's ``crop_scale``).

    Raises:
      ValueError: not two numbers with 0 < lo <= hi <= 1 (one line naming ``--flag``).
    """
    try:
        lo, hi = (float(v) for v in str(text).split(","))
    except ValueError:
        lo = hi = math.nan
    if not 0.0 < lo <= hi <= 1.0:
        raise ValueError(f"--{flag} must be lo,hi with 0 < lo <= hi <= 1, got {text!r}")
    return lo, hi


def side_pixels(size: float, image_size: int) -> int:
    """A view's side: ``size`` pixels when above 1, else that fraction of ``image_size`` rounded half up (the
    rounding :meth:`ViewSpec.config_for` applies to ``size_fraction``)."""
    return int(size) if size > 1 else max(1, math.floor(size * image_size + 0.5))


def copyable_steps() -> list[str]:
    """Steps whose draws a view can copy: registered steps with parameters ω (so equal draws can be seen)."""
    return [s.name for s in sorted(registry.PIPELINE, key=lambda s: s.seed_slot) if s.omega is not None]


def check_copyable(name: str, what: str = "a shared step") -> None:
    """Raises ValueError (one line) unless ``name`` is a registered step with parameters to copy."""
    steps = {s.name: s for s in registry.PIPELINE}
    if name not in steps:
        raise ValueError(f"{what}: unknown augmentation {name!r}; choose from {', '.join(copyable_steps())}")
    if steps[name].omega is None:
        raise ValueError(f"{what}: augmentation {name!r} has no parameters ω to copy; choose from "
                         f"{', '.join(copyable_steps())}")


@dataclasses.dataclass(frozen=True)
class ViewSpec:
    """One view: the steps whose draws it copies, as ``((step name, index of the source view), ...)``, and
    optionally its own output size and crop area range (E-SSL's small extra crop).

    A view with no shared step draws every augmentation afresh from its own seed. Its size is ``image_size``
    pixels, or ``size_fraction`` of the run's ``--image_size`` (rounded half up), or the run's; its crop area
    range is ``crop_scale`` (lo, hi), or the run's. Every other setting is the run's. ``eval_view``: the view is
    the image's evaluation view instead (resize + centre crop, no augmentation, ω of the identity).
    """

    shares: tuple[tuple[str, int], ...] = ()
    eval_view: bool = False
    image_size: int | None = None
    size_fraction: float | None = None
    crop_scale: tuple[float, float] | None = None
    #: ``((knob, probability), ...)``: this view's own probabilities of those steps (MoCo v3's and BYOL's views: view
    #: 1 always blurred, view 2 blurred at 0.1 and solarized at 0.2), every other knob the run's.
    probabilities: tuple[tuple[str, float], ...] = ()

    def config_for(self, config: AugmentConfig) -> AugmentConfig:
        """The run's augmentation settings as this view takes them: ``config`` itself for a view of the run's
        size, crop range and probabilities (so a plan without such views runs exactly what it ran before)."""
        if self.probabilities:
            config = dataclasses.replace(config, probabilities={**config.probabilities, **dict(self.probabilities)})
        if self.image_size is None and self.size_fraction is None and self.crop_scale is None:
            return config
        size = self.image_size
        if size is None:
            size = config.image_size if self.size_fraction is None else side_pixels(self.size_fraction,
                                                                                     config.image_size)
        lo, hi = self.crop_scale if self.crop_scale is not None else config.crop_scale
        return dataclasses.replace(config, image_size=int(size), crop_min_scale=lo, crop_max_scale=hi)

    def check(self, number: int) -> None:
        """Raises ValueError (one line naming view ``number``) for a size or crop range no view can have."""
        if self.image_size is not None and self.size_fraction is not None:
            raise ValueError(f"view {number} gives both image_size and size_fraction; give one")
        if self.image_size is not None and (isinstance(self.image_size, bool) or not isinstance(self.image_size, int)
                                            or self.image_size < 1):
            raise ValueError(f"view {number}: image_size must be a positive int, got {self.image_size!r}")
        if self.size_fraction is not None and not 0.0 < self.size_fraction <= 1.0:
            raise ValueError(f"view {number}: size_fraction must be in (0, 1], got {self.size_fraction!r}")
        for knob, p in self.probabilities:
            knobs = [k.field for k in registry.probabilities()]
            if knob not in knobs:
                raise ValueError(f"view {number}: unknown augmentation probability {knob!r}; known: "
                                 f"{', '.join(knobs)}")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"view {number}: {knob} must be a probability in [0, 1], got {p!r}")
        if self.crop_scale is not None:
            lo, hi = self.crop_scale
            if not 0.0 < lo <= hi <= 1.0:
                raise ValueError(f"view {number}: crop_scale must satisfy 0 < lo <= hi <= 1, got ({lo}, {hi})")


@dataclasses.dataclass(frozen=True)
class ViewPlan:
    """The views a method needs: view ``j`` (0-based) is ``views[j]``; the batch carries it as ``view{j+1}``.

    Raises:
      ValueError: fewer than two views, a step shared twice by one view, a source view that is not an earlier
        view, or a step that has no parameters to copy (shared or aligned), or an aligned step named twice.
    """

    views: tuple[ViewSpec, ...]
    #: steps whose draws example 2i+1 of a batch takes from example 2i (each view from the same view); () = none
    aligned: tuple[str, ...] = ()
    #: ``((objective key, view index), ...)``: the views an objective added (`extended_by`), which its loss reads.
    #: Who reads a view is not what is drawn: plans that differ here draw the same batches and compare equal.
    objective_views: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        if len(self.views) < 2:
            raise ValueError(f"a view plan needs at least 2 views, got {len(self.views)}")
        if len(set(self.aligned)) != len(self.aligned):
            raise ValueError(f"aligned steps repeat a step: {list(self.aligned)}")
        for name in self.aligned:
            check_copyable(name, "an aligned step")
        for j, view in enumerate(self.views):
            view.check(j + 1)
            names = [name for name, _ in view.shares]
            if len(set(names)) != len(names):
                raise ValueError(f"view {j + 1} shares a step twice: {names}")
            if view.eval_view and view.shares:
                raise ValueError(f"view {j + 1} is the evaluation view: it draws nothing, so it can copy nothing")
            for name, source in view.shares:
                check_copyable(name, f"view {j + 1}")
                if not 0 <= source < j:
                    raise ValueError(f"view {j + 1} can copy {name!r} only from an earlier view, not view {source + 1}")
                if self.views[source].eval_view:
                    raise ValueError(f"view {j + 1} cannot copy {name!r} from view {source + 1}, the evaluation "
                                     "view (it draws nothing)")

    def with_view(self, view: ViewSpec) -> ViewPlan:
        """This plan with ``view`` appended (an objective's own view), everything else (aligned steps) kept."""
        return dataclasses.replace(self, views=(*self.views, view))

    def extended_by(self, key: str, extended: ViewPlan) -> ViewPlan:
        """``extended`` (this plan as objective ``key`` extended it) with the views it appended recorded as
        ``key``'s; ``extended`` itself when it appended none (aligned pairs, or no change at all).

        Raises:
          ValueError: ``extended`` does not keep this plan's views first (an objective may only append).
        """
        if extended.views[:self.num_views] != self.views:
            raise ValueError(f"objective {key!r} changed the views before its own; an objective may only append "
                             "views (ViewPlan.with_view)")
        added = tuple((key, j) for j in range(self.num_views, extended.num_views))
        if not added:
            return extended
        return dataclasses.replace(extended, objective_views=(*extended.objective_views, *added))

    def views_of(self, key: str) -> tuple[int, ...]:
        """The indices (0-based: view ``j`` is the batch's ``view{j+1}``) of the views objective ``key`` added."""
        return tuple(j for owner, j in self.objective_views if owner == key)

    @property
    def num_views(self) -> int:
        """N, the views per example."""
        return len(self.views)

    def slot_seeds(self, seed: tf.Tensor, pair_seed: tf.Tensor | None = None) -> list[tf.Tensor]:
        """Every view's per-slot seeds [NUM_SEED_SLOTS, 2] from one example seed [2] (graph-safe).

        ``pair_seed``: the example seed of the example's partner (example 2i of its pair), whose rows of the
        ``aligned`` steps' slots replace the example's own; ignored by a plan without aligned steps.
        """
        own = self._own_seeds(seed)
        slot_of = {s.name: s.seed_slot for s in registry.PIPELINE}
        if self.aligned and pair_seed is not None:
            partner = self._own_seeds(pair_seed)
            aligned = [slot_of[name] for name in self.aligned]
            own = [tf.stack([p[k] if k in aligned else o[k] for k in range(registry.NUM_SEED_SLOTS)])
                   for o, p in zip(own, partner, strict=True)]
        out: list[tf.Tensor] = []
        for j, view in enumerate(self.views):
            rows = tf.unstack(own[j])
            for name, source in view.shares:
                rows[slot_of[name]] = out[source][slot_of[name]]  # the source's row, itself possibly copied
            out.append(tf.stack(rows) if view.shares else own[j])
        return out

    def _own_seeds(self, seed: tf.Tensor) -> list[tf.Tensor]:
        seed = tf.ensure_shape(tf.cast(tf.convert_to_tensor(seed), tf.int64), [2])
        view_seeds = tf.unstack(tf.random.experimental.stateless_split(seed, self.num_views))
        return [tf.random.experimental.stateless_split(s, num=registry.NUM_SEED_SLOTS) for s in view_seeds]


def check_pair_batch(plan: ViewPlan, batch_size: int) -> None:
    """Raises ValueError (one line) when ``plan`` aligns pairs and the per-replica ``batch_size`` is odd: a pair
    must lie inside one replica's batch."""
    if plan.aligned and batch_size % 2:
        raise ValueError(f"aligned pairs ({', '.join(plan.aligned)}) need an even batch per replica, got "
                         f"{batch_size}: choose --batch_size as a multiple of 2 x the replicas")


#: The plan of every two-view method: two independent views.
TWO_VIEWS = ViewPlan((ViewSpec(), ViewSpec()))


def leave_one_out(names: tuple[str, ...] | list[str]) -> ViewPlan:
    """LooC's views: q, k0 (independent), then for each name a key that copies q's draw of that step."""
    return ViewPlan((ViewSpec(), ViewSpec(), *(ViewSpec(((name, 0),)) for name in names)))


def view_keys(j: int) -> tuple[str, str, str]:
    """The batch keys of view ``j`` (0-based): (images, ω, device-stage draws), e.g. view1, omega1, device1."""
    return f"view{j + 1}", f"omega{j + 1}", f"device{j + 1}"


def batch_views(batch) -> int:
    """How many views a batch carries (view1, view2, ... present)."""
    n = 0
    while f"view{n + 1}" in batch:
        n += 1
    return n
