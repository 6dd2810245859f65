"""Checkpoints keyed by where each variable lives, and the settings that define the model beside them.

Keras' own tracking keys a functional model's weights by layer POSITION (``backbone/_operations/22/...``) and
an optimizer's slots by their index in the variable list, so adding a weightless layer, reordering the heads
or adding a part silently restores values into the wrong variables wherever shapes match. Here every
variable is keyed by the model attribute that owns it and its Keras path (``model/backbone/stem_conv/kernel``,
``model/objectives/augself/augself_crop/augself_crop_fc1/kernel``), and every momentum buffer by the key of the variable
it belongs to (``optimizer/momentum/model/backbone/stem_conv/kernel``). ``run.json`` beside the checkpoints
holds the settings that define the model; resuming with other values stops with one line naming them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import keras
import tensorflow as tf

from augself_tf.models.vit import VIT_SIZES
from augself_tf.runtime import files
from augself_tf.training.checkpoint_files import checkpoint_reader

RUN_FILE = "run.json"
_STATE = "state"


class CheckpointMismatchError(ValueError):
    """A checkpoint that cannot be restored into this model; the message is one line saying why and what to do."""


def _add(key: str, v, out: dict[str, tf.Variable], seen: set[int]) -> None:
    if id(v) in seen:
        return
    if key in out:
        raise ValueError(f"two variables share the checkpoint key {key}")
    seen.add(id(v))
    out[key] = v


def _layer_variables(prefix: str, value, out: dict[str, tf.Variable], seen: set[int]) -> None:
    if isinstance(value, keras.layers.Layer):
        for v in value.variables:
            _add(f"{prefix}/{v.path}", v, out, seen)
    elif isinstance(value, keras.Variable | tf.Variable):
        _add(prefix, value, out, seen)
    elif isinstance(value, Mapping):
        for key in sorted(value):
            _layer_variables(f"{prefix}/{key}", value[key], out, seen)


def model_variables_by_key(model: keras.Model) -> dict[str, tf.Variable]:
    """Every variable of `model` keyed ``<attribute>[/<dict key>]/<variable path>``.

    Attributes are visited in sorted order and a variable reached twice (an alias such as MoCo's
    ``key_backbone``) keeps its first key, so keys depend on names only, never on the order of creation;
    layers that hold variables must therefore be named (Keras' automatic ``dense_3`` names count creations).

    Raises:
      ValueError: a variable of the model that no attribute reaches, or two variables with one key.
    """
    out: dict[str, tf.Variable] = {}
    seen: set[int] = set()
    for name in sorted(vars(model)):
        if name.startswith("_") or name == "optimizer":
            continue
        _layer_variables(name, getattr(model, name), out, seen)
    missing = [v.path for v in model.variables if id(v) not in seen]
    if missing:
        raise ValueError(f"{len(missing)} variables of {model.name} are reachable from no attribute, e.g. {missing[0]}")
    return {f"model/{k}": v for k, v in out.items()}


def _optimizer_chain(optimizer: keras.optimizers.Optimizer) -> list[keras.optimizers.Optimizer]:
    chain = [optimizer]
    while hasattr(chain[-1], "inner_optimizer"):
        chain.append(chain[-1].inner_optimizer)
    return chain


def training_state(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> dict[str, tf.Variable]:
    """Model variables, momentum buffers keyed by their variable's key, and the optimizer's own counters.

    Raises:
      ValueError: an optimizer variable that is neither a known slot nor uniquely named.
    """
    state = model_variables_by_key(model)
    key_of = {id(v): k for k, v in state.items()}
    slots: set[int] = set()
    for opt in _optimizer_chain(optimizer):
        for var, slot in zip(getattr(opt, "_trainable_variables", []), getattr(opt, "momentums", []) or [],
                             strict=False):
            state[f"optimizer/momentum/{key_of[id(var)]}"] = slot
            slots.add(id(slot))
    for v in optimizer.variables:
        if id(v) in slots:
            continue
        key = f"optimizer/{v.path}"
        if key in state:
            raise ValueError(f"two optimizer variables share the key {key}")
        state[key] = v
    return state


def make_checkpoint(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> tf.train.Checkpoint:
    """A `tf.train.Checkpoint` of :func:`training_state` (one dict, so each key is its own name)."""
    return tf.train.Checkpoint(**{_STATE: training_state(model, optimizer)})


def saved_name(key: str) -> str:
    """The name TensorFlow stores a dict entry under (its object-graph escaping of '.' and '/')."""
    return f"{_STATE}/{key.replace('.', '..').replace('/', '.S')}/.ATTRIBUTES/VARIABLE_VALUE"


def restore(checkpoint: tf.train.Checkpoint, path: str, state: Mapping[str, tf.Variable]) -> None:
    """Restores `path` into `checkpoint`, requiring the saved keys to be exactly those of `state`.

    Raises:
      CheckpointMismatchError: a checkpoint of the position-keyed layout (before this module), or one whose
        variables differ from the model's (named, with shapes).
    """
    saved = checkpoint_reader(path).get_variable_to_shape_map()
    if not any(name.startswith(_STATE + "/") for name in saved):
        raise CheckpointMismatchError(
            f"{path} is a checkpoint of an older augself-tf (variables keyed by position, trained before input "
            "normalisation and PyTorch's SGD semantics); it cannot be resumed: use a new --model_dir")
    expected = {saved_name(k): k for k in state}
    missing = [k for name, k in expected.items() if name not in saved]
    extra = [n for n in saved if n.startswith(_STATE + "/") and n not in expected]
    shapes = [k for name, k in expected.items()
              if name in saved and list(saved[name]) != list(state[k].shape)]
    if missing and not extra and not shapes and all(k.endswith("applied_steps") for k in missing):
        # Its AdamW counted skipped float16 steps in its bias correction: its count of applied steps is unknown.
        raise CheckpointMismatchError(f"{path} was written before AdamW counted its applied steps (no {missing[0]}); "
                                      "this version cannot resume it exactly: use a new --model_dir, or resume "
                                      "with the version that wrote it")
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} variables of this model are not in it (e.g. {missing[0]})")
        if extra:
            key = extra[0].split("/")[1].replace(".S", "/").replace("..", ".")
            parts.append(f"{len(extra)} of its variables are not in this model (e.g. {key})")
        if shapes:
            k = shapes[0]
            parts.append(f"{len(shapes)} shapes differ (e.g. {k}: {saved[saved_name(k)]} saved, "
                         f"{list(state[k].shape)} here)")
        raise CheckpointMismatchError(f"{path} was written by a different model: {'; '.join(parts)}; resume with "
                                      "the settings it was trained with, or use a new --model_dir")
    checkpoint.restore(path).assert_existing_objects_matched()


def _recorded(path: str) -> tuple[dict, dict]:
    """The ``model`` settings and the ``derived`` method options recorded in run.json at ``path``; a file that
    is not that is one line naming it."""
    try:
        recorded = json.loads(files.read_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointMismatchError(f"{path} cannot be read as run settings ({err}); restore it from a copy, or "
                                      "use a new --model_dir") from None
    model = recorded.get("model") if isinstance(recorded, dict) else None
    derived = recorded.get("derived", {}) if isinstance(recorded, dict) else None
    if not isinstance(model, dict) or not isinstance(derived, dict):
        raise CheckpointMismatchError(f"{path} is not a run settings file (expected {{\"model\": {{...}}}}, got "
                                      f"{json.dumps(recorded)[:60]}); restore it from a copy, or use a new --model_dir")
    # Written before a ViT's --patch_size=0 was resolved by the image size (the run records the patch it took),
    # a 0 meant the size's own patch, whatever the image size: compared as that, so such a run resumes where the
    # two agree (vit_pico at 64 px, any size at 224) and elsewhere the refusal names the patch it was built with.
    if model.get("patch_size") == 0 and model.get("backbone") in VIT_SIZES:
        model = {**model, "patch_size": VIT_SIZES[model["backbone"]].patch}
    return model, derived


def recorded_derived(model_dir: str, method_options: Mapping) -> dict:
    """The method options the run in ``model_dir`` derived when it started (``run.json``'s ``derived``: MoCo's
    queue size from its batch and data, ...) that ``method_options`` (this run's flags) leaves unset: a resume
    reuses them, whatever its batch, so its variables keep their shapes. {} for a new run."""
    path = os.path.join(model_dir, RUN_FILE)
    if not files.exists(path):
        return {}
    return {k: v for k, v in _recorded(path)[1].items() if method_options.get(k) is None}


#: run.json's records of option flags, compared as one set of flags (the names of the two are distinct). A run.json
#: written before the objectives' options had their own record holds them in ``method_options``.
OPTION_RECORDS = ("method_options", "objective_options")


def _options(settings: Mapping) -> dict:
    """Every option flag a run.json model record (or this run's) holds, method's and objectives' alike."""
    return {k: v for record in OPTION_RECORDS for k, v in settings.get(record, {}).items()}


def check_run_settings(model_dir: str, settings: Mapping, *, write: bool, derived: Mapping | None = None) -> None:
    """Compares `settings` (`ModelConfig.checked_settings`, JSON values) with ``model_dir/run.json``; writes the
    file (atomically) when it is absent, or adds the settings an older version did not record.

    ``derived`` are the method options the run derived from its data and batch rather than took from a flag
    (`augself_tf.methods.derived_options`); they are recorded apart (``derived``), and a resume that sets
    such a flag to another value is refused naming it.

    Raises:
      CheckpointMismatchError: a model-defining setting differs from the one the run was started with; the
        message names each one by its flag; the file is not a settings file (garbage, not a JSON object); or it
        is missing beside checkpoints.
    """
    path = os.path.join(model_dir, RUN_FILE)
    current, derived_now = dict(settings), dict(derived or {})
    if files.exists(path):
        recorded, derived_then = _recorded(path)
        # A setting an older run.json does not hold was not checked then: it is recorded from now on. Unset
        # method options are not recorded, so every option either side holds is compared; a derived one only
        # when this run sets its flag (unset, the recorded value is reused: `recorded_derived`).
        opts_now, opts_then = _options(current), _options(recorded)
        differ = [(k, recorded[k], current.get(k), "") for k in sorted(recorded) if k not in OPTION_RECORDS
                  and current.get(k) != recorded[k]]
        for k in sorted(set(opts_now) | set(opts_then) | set(derived_then)):
            then, now = opts_then.get(k, derived_then.get(k)), opts_now.get(k)
            if now != then and (k in opts_then or now is not None):
                differ.append((k, then, now, "" if k in opts_then else " (derived from its batch and data)"))
        if differ:
            what = ", ".join(f"--{k}={then!r} there{how}, {now!r} now" for k, then, now, how in differ)
            raise CheckpointMismatchError(f"{model_dir} holds a run with other model settings ({what}); resume with "
                                          "its settings or use a new --model_dir")
        derived_now = {**derived_now, **derived_then}
        if (set(current) <= set(recorded) and set(derived_now) <= set(derived_then)) or not write:
            return
        # An older record holds the objectives' options among the method's: this run's split replaces it (the
        # check above found them equal); every other setting is kept as recorded.
        split = {k: current[k] for k in OPTION_RECORDS if k in current} if "objective_options" not in recorded else {}
        current = {**current, **recorded, **split}
    else:
        ckpt_dir = os.path.join(model_dir, "checkpoints")
        if files.isdir(ckpt_dir) and any(n.startswith("ckpt-") for n in files.listdir(ckpt_dir)):
            # Without the record, other settings whose variables have the same shapes (input statistics, method
            # options, the conditioning set) would restore silently and the record be rewritten to match them.
            raise CheckpointMismatchError(f"{path} is missing but {ckpt_dir} holds checkpoints: the settings they "
                                          "were trained with cannot be checked; restore run.json, or use a new "
                                          "--model_dir")
    if write:
        files.makedirs(model_dir)
        files.replace_text(path, json.dumps({"model": current, **({"derived": derived_now} if derived_now else {})},
                                            indent=1, sort_keys=True))
