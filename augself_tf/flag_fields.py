"""Dataclass fields that are also absl flags: a default, its help line and its allowed values, written once.

Every user setting is declared with :func:`option` as a field of a settings dataclass: `TrainConfig` and
`AugmentConfig` (augself-train, ``--<field>``), each method's and each objective's ``Options`` (``--<field>``,
shared by the methods, or the objectives, that declare the same name: :class:`SharedOption`), `EvalSettings` and
eval_main's own flags (``--<field>``), and the evaluation protocols' options (``--<protocol>_<field>``).
:func:`define_flags` turns the fields into flags and :func:`values_from_flags` / :func:`options_from_flags` read
them back, checking ``minimum``.

The flag's kind follows the default (its annotation when the default is None): bool, int, float, str (an
enum with ``choices``), or a tuple (a comma-separated list whose items take the type of the default's
items). A field with ``parse`` is one string flag whose text ``parse`` turns into the value and ``text``
writes back (``--augself=crop,color``).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def option(default: Any, help: str | Callable[[], str], *, choices: tuple[str, ...] | None = None,  # noqa: A002
           minimum: float | None = None, above: float | None = None, maximum: float | None = None,
           parse: Callable[[str | None], Any] | None = None, text: Callable[[Any], str] | None = None) -> Any:
    """A dataclass field that is also a flag.

    Args:
      default: the value when the flag is not given.
      help: the flag's help line, or a function returning it when the flag is defined (a line that lists
        what a registry holds at that time).
      choices: the allowed strings (an enum flag).
      minimum: the smallest allowed value (1: "must be positive"); None values are not checked.
      above: a bound the value must exceed (0: a positive float); maximum: the largest allowed value.
      parse / text: the value from the flag's text and back, for a value written as one string flag.
    """
    metadata = {"help": help, "choices": choices, "minimum": minimum, "above": above, "maximum": maximum,
                "parse": parse, "text": text}
    return dataclasses.field(default=default, metadata=metadata)


def names_text(names: Sequence[str]) -> str:
    """A tuple of names as a flag writes it: comma-separated, ``none`` when empty."""
    return ",".join(names) or "none"


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a dataclass that are flags (declared with :func:`option`), in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def help_text(field: dataclasses.Field) -> str:
    """The help line of an :func:`option` field (a function's result, for a help given as one)."""
    text = field.metadata["help"]
    return text() if callable(text) else text


def _flag_name(prefix: str, field: dataclasses.Field) -> str:
    return f"{prefix}_{field.name}" if prefix else field.name


def flag_kind(cls: type, field: dataclasses.Field) -> type:
    """The type a flag parses to: str for a ``parse`` field, else the default's type, or for a None default the
    annotation's (``X | None`` -> X)."""
    if field.metadata.get("parse") is not None:
        return str
    if field.default is not None:
        return type(field.default)
    hint = typing.get_type_hints(cls)[field.name]
    return next((t for t in typing.get_args(hint) if t is not type(None)), hint)


def define_flag(name: str, kind: type, default: Any, help_line: str, flag_values: Any, module_name: str,
                choices: Sequence[str] | None = None) -> None:
    """Defines one flag of ``kind`` (bool, int, float, str, tuple; an enum with ``choices``)."""
    from absl import flags

    kw = {"flag_values": flag_values, "module_name": module_name}
    if choices:
        flags.DEFINE_enum(name, default, list(choices), help_line, **kw)
    elif kind is bool:
        flags.DEFINE_bool(name, default, help_line, **kw)
    elif kind is int:
        flags.DEFINE_integer(name, default, help_line, **kw)
    elif kind is float:
        flags.DEFINE_float(name, default, help_line, **kw)
    elif kind is tuple:
        items = None if default is None else [f"{v:g}" if isinstance(v, float) else str(v) for v in default]
        flags.DEFINE_list(name, items, help_line, **kw)
    else:
        flags.DEFINE_string(name, default, help_line, **kw)


def define_flags(prefix: str, cls: type, flag_values: Any, module_name: str, *, defaults: Any = None) -> None:
    """Define ``--{prefix}_{field}`` (``--{field}`` for an empty prefix) for every :func:`option` of ``cls``.

    ``module_name``: the module the flags are listed under (the program's, so that ``--help`` shows them).
    ``defaults``: an instance of ``cls`` whose values are the flags' defaults (default: the fields' own).
    """
    for f in flag_fields(cls):
        default = f.default if defaults is None else getattr(defaults, f.name)
        if f.metadata.get("parse") is not None:
            default = f.metadata["text"](default)
        define_flag(_flag_name(prefix, f), flag_kind(cls, f), default, help_text(f), flag_values, module_name,
                    f.metadata["choices"])


def _parse_list(flag: str, default: tuple, items: list[str]) -> tuple:
    kind = type(default[0]) if default else str
    if kind is str:
        return tuple(s.strip() for s in items if s.strip())
    try:
        return tuple(kind(float(s)) if kind is int and float(s).is_integer() else kind(s) for s in items if s.strip())
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise ValueError(f"--{flag} must be {noun}, got {','.join(items)}") from None


def check_minimum(flag: str, field: dataclasses.Field, value: Any) -> None:
    """Raises ValueError when ``value`` is a NaN/Inf float, below the field's ``minimum``, not above its
    ``above`` or beyond its ``maximum`` (None values pass)."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--{flag} must be a finite number, got {value}")
    low, above, high = (field.metadata.get(k) for k in ("minimum", "above", "maximum"))
    if low is not None and value < low:
        wanted = "positive" if low == 1 else f">= {low}"
        raise ValueError(f"--{flag} must be {wanted}, got {value}")
    if above is not None and value <= above:
        wanted = "positive" if above == 0 else f"> {above}"
        raise ValueError(f"--{flag} must be {wanted}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"--{flag} must be at most {high}, got {value}")


def values_from_flags(prefix: str, cls: type, flag_values: Any) -> dict[str, Any]:
    """``{field: value}`` of the :func:`option` fields of ``cls`` from their flags (lists made tuples).

    Raises:
      ValueError: a value below its field's ``minimum``, a ``parse`` that refuses its text, or a list flag
        whose items do not parse as the default's items.
    """
    values = {}
    for f in flag_fields(cls):
        name = _flag_name(prefix, f)
        value = flag_values[name].value
        if f.metadata.get("parse") is not None:
            value = f.metadata["parse"](value)
        elif isinstance(f.default, tuple):
            value = _parse_list(name, f.default, value)
        check_minimum(name, f, value)
        values[f.name] = value
    return values


def options_from_flags(prefix: str, cls: type, flag_values: Any) -> Any:
    """An instance of ``cls`` from the values of its ``--{prefix}_*`` flags (see :func:`values_from_flags`)."""
    return cls(**values_from_flags(prefix, cls, flag_values))


def flag_value(field: dataclasses.Field, value: Any) -> Any:
    """A field's value as its flag writes it: the ``text`` of a ``parse`` field, a tuple comma-joined, else as is
    (TensorBoard's HParams columns)."""
    if field.metadata.get("text") is not None:
        return field.metadata["text"](value)
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return value


def declared_options(cls: type, options: Mapping[str, Any] | None) -> Any:
    """``cls.Options`` from the run's option values: the entries it declares, None (unset) left out so that its
    defaults apply (the run's ``method_options`` for a method, its ``objective_options`` for an objective)."""
    names = {f.name for f in dataclasses.fields(cls.Options)}
    return cls.Options(**{k: v for k, v in (options or {}).items() if k in names and v is not None})


@dataclasses.dataclass(frozen=True)
class SharedOption:
    """One flag of the ``Options`` fields several owners (methods, objectives) declare under one name: its kind,
    help, choices and each declarer's default."""

    name: str
    kind: type
    help: str
    choices: tuple[str, ...] | None
    defaults: dict[str, Any]

    def help_line(self) -> str:
        """The help followed by every declaring owner's default, e.g. ``... (default moco: 0.2, swav: 0.1)``."""
        return f"{self.help} (default {', '.join(f'{m}: {v}' for m, v in self.defaults.items())})"


def declared_flags(owner: str, options_cls: type) -> dict[str, SharedOption]:
    """The flags one owner's ``Options`` dataclass declares, each with that owner's default."""
    return {f.name: SharedOption(f.name, flag_kind(options_cls, f), help_text(f), f.metadata["choices"],
                                 {owner: f.default}) for f in flag_fields(options_cls)}


def shared_options(owners: Sequence[tuple[str, type]]) -> dict[str, SharedOption]:
    """Every option name the ``(owner name, Options dataclass)`` pairs declare, in their order, one entry per name
    with each declarer's default."""
    merged: dict[str, SharedOption] = {}
    for owner, options_cls in owners:
        for name, declared in declared_flags(owner, options_cls).items():
            known = merged.get(name)
            merged[name] = declared if known is None else dataclasses.replace(
                known, defaults={**known.defaults, **declared.defaults})
    return merged


def define_shared_flags(options: Mapping[str, SharedOption], flag_values: Any, module_name: str) -> None:
    """One flag per shared option, default None (unset: each owner's own default applies)."""
    for o in options.values():
        define_flag(o.name, o.kind, None, o.help_line(), flag_values, module_name, o.choices)
