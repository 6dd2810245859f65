"""The augmentation-aware objectives' one way in: docs/architecture.md's walk-through, run as written."""

from __future__ import annotations

import math
import os
import re
import sys
import types

import numpy as np
import pytest
from helpers import batch, compile_model, make_model, run_steps

from augself_tf.augment import AugmentConfig
from augself_tf.augment.views import TWO_VIEWS, ViewPlan, ViewSpec
from augself_tf.data.pretrain import make_pair_dataset
from augself_tf.data.sources import load_source
from augself_tf.methods import METHODS, build_method, method_options, view_plan
from augself_tf.models.resnet import build_backbone
from augself_tf.objectives import OBJECTIVES, Objective, enabled_objectives, objective_options
from augself_tf.objectives.augself import AugSelf

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "architecture.md")


def _walkthrough_class() -> type[Objective]:
    """The objective of docs/architecture.md's "Adding an augmentation-aware objective", executed as written."""
    text = open(DOC).read()
    section = text.split("## Adding an augmentation-aware objective", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("augself_tf.objectives.myobjective")
    sys.modules[module.__name__] = module  # dataclasses resolve annotations through the module
    exec(compile(code, DOC, "exec"), module.__dict__)  # noqa: S102 - the walk-through, run as the doc shows it
    return module.MyObjective


MyObjective = _walkthrough_class()


def test_the_walkthrough_objective_is_one_class_and_one_registry_line():
    with OBJECTIVES.registered("myobjective", MyObjective):
        assert "myobjective_weight" in objective_options() and "myobjective_weight" not in method_options()
        assert [o.key for o in enabled_objectives({"myobjective_weight": 0.5})] == ["myobjective"]
        assert enabled_objectives({"myobjective_weight": 0.0}) == []
        plan = view_plan("simsiam", {}, {"myobjective_weight": 0.5})
        assert plan.num_views == 3 and view_plan("simsiam", {}).num_views == 2
        model = make_model("simsiam", myobjective_weight=0.5)
    objective = model.objectives["myobjective"]
    b = batch(4, views=3)
    total, logs, forward = model.compute_losses(b, training=False)
    # The objective's loss, computed independently from its head's weights.
    f3 = model.backbone(b["view3"], training=False).numpy().astype(np.float64)
    kernel, bias = (w.numpy().astype(np.float64) for w in objective.head.weights)
    want = np.mean((f3 @ kernel + bias - b["omega3"]["crop"]) ** 2)
    np.testing.assert_allclose(float(logs["myobjective/loss"]), want, rtol=1e-4)
    np.testing.assert_allclose(float(total), float(logs["loss/method"]) + float(logs["loss/augself"])
                               + 0.5 * want, rtol=1e-4)
    compile_model(model)
    logs = run_steps(model, [b, batch(5, views=3)])
    assert all(math.isfinite(v) for log in logs for v in log.values())
    assert logs[1]["myobjective/loss"] != logs[0]["myobjective/loss"]  # its head trains


def test_an_objective_view_comes_from_the_pipeline_with_its_shared_draw():
    with OBJECTIVES.registered("myobjective", MyObjective):
        plan = view_plan("simclr", {}, {"myobjective_weight": 1.0})
    ds = make_pair_dataset(load_source("shapes", "test"), AugmentConfig(), seed=3, batch_size=4, shuffle_buffer=16,
                           views=plan)
    b = next(iter(ds))
    assert b["view3"].shape == b["view1"].shape
    np.testing.assert_array_equal(b["omega3"]["crop"], b["omega1"]["crop"])  # the copied draw
    assert not np.array_equal(b["omega3"]["color"], b["omega1"]["color"])  # the rest drawn afresh


def test_an_objective_refuses_a_method_it_does_not_compose_with_in_one_line():
    class OnlySimCLR(MyObjective):
        methods = ("simclr",)

    objective = OnlySimCLR(MyObjective.Options(myobjective_weight=1.0))
    backbone = build_backbone("resnet18_cifar", 0.0625)
    with pytest.raises(ValueError, match=r"^--myobjective_weight does not compose with --method=simsiam; it "
                                         r"composes with simclr$"):
        METHODS["simsiam"](backbone, objectives=(objective,))


def test_a_negative_weight_is_one_clear_error():
    with pytest.raises(ValueError, match=r"^--myobjective_weight must be a finite number >= 0 \(0 = off\), got -1"):
        MyObjective.enabled({"myobjective_weight": -1.0})


def test_augself_is_an_objective_and_off_means_absent():
    model = make_model("simsiam", augself=("crop",))
    assert isinstance(model.objectives["augself"], AugSelf) and list(model.augself_heads) == ["crop"]
    plain = make_model("simsiam", augself=())
    assert plain.objectives == {} and plain.augself_heads == {}
    _, logs, _ = plain.compute_losses(batch(1), training=False)
    assert float(logs["loss/augself"]) == 0.0 and float(logs["loss/total"]) == float(logs["loss/method"])


def test_a_registered_objective_needs_its_key_and_weight_flag():
    class Misnamed(MyObjective):
        key = "other"

    with pytest.raises(ValueError, match="must have key 'misnamed' and weight option 'misnamed_weight'"):
        OBJECTIVES["misnamed"] = Misnamed
    assert "misnamed" not in OBJECTIVES


def test_objectives_views_compose_an_added_view_keeps_the_aligned_pairs():
    plan = view_plan("simsiam", {}, {"stl_weight": 1.0, "equimod_weight": 1.0})
    assert plan.aligned and plan.num_views == 3 and plan.views[2].eval_view
    with OBJECTIVES.registered("myobjective", MyObjective):
        plan = view_plan("simclr", {}, {"stl_weight": 1.0, "myobjective_weight": 1.0})
    assert plan.aligned and plan.num_views == 3


def test_each_objectives_views_are_recorded_on_the_plan_the_model_is_handed():
    options = {"equimod_weight": 1.0, "stl_weight": 1.0, "essl_weight": 0.4}
    plan = view_plan("simsiam", {}, options)
    assert [plan.views_of(k) for k in ("equimod", "stl", "essl")] == [(2,), (), (3,)]  # registration order
    assert plan == ViewPlan(plan.views, plan.aligned)  # who reads a view is not what is drawn
    model = make_model("simsiam", **options)
    assert model.plan.objective_views == plan.objective_views
    assert [model.objectives[k].view_index(model) for k in ("equimod", "essl")] == [2, 3]
    with pytest.raises(ValueError, match="objective 'bad' changed the views before its own"):
        TWO_VIEWS.extended_by("bad", ViewPlan((ViewSpec(eval_view=True), ViewSpec(), ViewSpec())))


def test_an_objectives_option_among_the_methods_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^--essl_weight is an objective's option: pass it in objective_options"):
        build_method("simclr", build_backbone("resnet18_cifar", 0.0625), options={"essl_weight": 0.4})
