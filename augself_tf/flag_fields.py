"""Dataclass fields that are also absl flags: a default, its help line and its allowed values, written once.

`TrainConfig`'s settings (train_main, ``--<field>``) and the evaluation protocols' options (eval_main,
``--<protocol>_<field>``) are declared with :func:`option`; :func:`define_flags` turns the fields into flags
and :func:`values_from_flags` / :func:`options_from_flags` read them back. The flag's kind follows the
default (its annotation when the default is None): bool, int, float, str (an enum with ``choices``), or a
tuple (a comma-separated list whose items take the type of the default's items).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


def option(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:  # noqa: A002
    """A dataclass field that is also a flag: ``default``, its ``help`` line and, for strings, ``choices``."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a dataclass that are flags (declared with :func:`option`), in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def _flag_name(prefix: str, field: dataclasses.Field) -> str:
    return f"{prefix}_{field.name}" if prefix else field.name


def _kind(cls: type, field: dataclasses.Field) -> type:
    """The type a flag parses to: the default's, or for a None default the annotation's (``X | None`` -> X)."""
    if field.default is not None:
        return type(field.default)
    hint = typing.get_type_hints(cls)[field.name]
    return next((t for t in typing.get_args(hint) if t is not type(None)), hint)


def define_flags(prefix: str, cls: type, flag_values: Any, module_name: str) -> None:
    """Define ``--{prefix}_{field}`` (``--{field}`` for an empty prefix) for every :func:`option` of ``cls``.

    ``module_name``: the module the flags are listed under (the program's, so that ``--help`` shows them).
    """
    from absl import flags

    kw = {"flag_values": flag_values, "module_name": module_name}
    for f in flag_fields(cls):
        name, default, help_text = _flag_name(prefix, f), f.default, f.metadata["help"]
        choices, kind = f.metadata["choices"], _kind(cls, f)
        if choices:
            flags.DEFINE_enum(name, default, list(choices), help_text, **kw)
        elif kind is bool:
            flags.DEFINE_bool(name, default, help_text, **kw)
        elif kind is int:
            flags.DEFINE_integer(name, default, help_text, **kw)
        elif kind is float:
            flags.DEFINE_float(name, default, help_text, **kw)
        elif kind is tuple:
            flags.DEFINE_list(name, [f"{v:g}" if isinstance(v, float) else str(v) for v in default], help_text, **kw)
        else:
            flags.DEFINE_string(name, default, help_text, **kw)


def _parse_list(flag: str, default: tuple, items: list[str]) -> tuple:
    kind = type(default[0]) if default else str
    if kind is str:
        return tuple(s.strip() for s in items if s.strip())
    try:
        return tuple(kind(float(s)) if kind is int and float(s).is_integer() else kind(s) for s in items if s.strip())
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise ValueError(f"--{flag} must be {noun}, got {','.join(items)}") from None


def values_from_flags(prefix: str, cls: type, flag_values: Any) -> dict[str, Any]:
    """``{field: value}`` of the :func:`option` fields of ``cls`` from their flags (lists made tuples).

    Raises:
      ValueError: a list flag whose items do not parse as the default's items.
    """
    values = {}
    for f in flag_fields(cls):
        name = _flag_name(prefix, f)
        value = flag_values[name].value
        values[f.name] = _parse_list(name, f.default, value) if isinstance(f.default, tuple) else value
    return values


def options_from_flags(prefix: str, cls: type, flag_values: Any) -> Any:
    """An instance of ``cls`` from the values of its ``--{prefix}_*`` flags (see :func:`values_from_flags`)."""
    return cls(**values_from_flags(prefix, cls, flag_values))
