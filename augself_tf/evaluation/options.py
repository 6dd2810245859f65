"""Protocol options as dataclasses whose fields are also eval_main's flags.

A field declared with :func:`option` carries its flag's help text (and choices); :func:`define_flags`
turns every field of an options class into ``--<prefix>_<field>`` and :func:`options_from_flags` reads
them back. The flag's kind follows the default: bool, int, float, str (an enum with ``choices``), or a
tuple (a comma-separated list whose items take the type of the default's items).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from augself_tf.evaluation.errors import EvalError


def option(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field that is also a flag: ``default``, its ``help`` line and, for strings, ``choices``."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of an options dataclass that are flags (declared with :func:`option`)."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def define_flags(prefix: str, cls: type, flag_values: Any, module_name: str) -> None:
    """Define ``--{prefix}_{field}`` in absl ``flag_values`` for every :func:`option` field of ``cls``.

    ``module_name``: the module the flags are listed under (the program's, so that ``--help`` shows them).
    """
    from absl import flags

    kw = {"flag_values": flag_values, "module_name": module_name}
    for f in flag_fields(cls):
        name, default, help_text = f"{prefix}_{f.name}", f.default, f.metadata["help"]
        choices = f.metadata["choices"]
        if isinstance(default, bool):
            flags.DEFINE_bool(name, default, help_text, **kw)
        elif isinstance(default, int):
            flags.DEFINE_integer(name, default, help_text, **kw)
        elif isinstance(default, float):
            flags.DEFINE_float(name, default, help_text, **kw)
        elif isinstance(default, tuple):
            flags.DEFINE_list(name, [f"{v:g}" if isinstance(v, float) else str(v) for v in default], help_text, **kw)
        elif choices:
            flags.DEFINE_enum(name, default, list(choices), help_text, **kw)
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
        raise EvalError(f"--{flag} must be {noun}, got {','.join(items)}") from None


def options_from_flags(prefix: str, cls: type, flag_values: Any) -> Any:
    """An instance of ``cls`` from the values of its ``--{prefix}_*`` flags (lists converted to tuples)."""
    kwargs = {}
    for f in flag_fields(cls):
        name = f"{prefix}_{f.name}"
        value = flag_values[name].value
        kwargs[f.name] = _parse_list(name, f.default, value) if isinstance(f.default, tuple) else value
    return cls(**kwargs)
