"""Every field of a config dataclass checked by its declared type and range, in one place.

A field declares its type with its annotation and, where a type alone is not enough, its range with
``typing.Annotated``::

    steps: Annotated[int, at_least(1)] = 60
    top_p: Annotated[float, Range(0, 1, lo_open=True)] = 1.0
    seed: Annotated[int, SEED] = 0

``check_fields(obj)`` (called first in a config's ``__post_init__``) then refuses, naming the field and the value:

- ``bool``: only ``True`` or ``False`` (the string ``"false"`` is truthy: it would silently mean yes);
- ``int``: an integer, never a bool nor a float (``2.5`` steps, ``16.0`` prompts);
- ``float``: a finite real number (an int is fine; a bool, NaN or inf are not);
- ``str``: a string (a ``pathlib.Path`` or other ``os.PathLike`` becomes its string; other types are refused);
- ``X | None``: ``None`` or an ``X``; ``tuple[...]``, ``list[...]``, ``dict``: an instance of that container;
- a declared ``Range``; without one an ``int`` must be >= 0 (every integer of a config here is a count, a size, a
  seed or an interval) and a ``float`` only finite.
- declared choices (``field(metadata={"choices": (...)})``, as TRL's configs declare theirs): a value that is not one
  of them is refused naming the choices (``None`` of an optional field aside).

New fields are covered by their annotation alone; a field that needs a range or choices declares them where it is
declared.
"""

from __future__ import annotations

import math
import numbers
import os
import types
import typing
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Range:
    """Allowed values ``lo ≤ x ≤ hi`` (``None``: unbounded; ``*_open``: the bound itself is excluded)."""

    lo: float | None = None
    """Lower bound (None: none)."""
    hi: float | None = None
    """Upper bound (None: none)."""
    lo_open: bool = False
    """Exclude ``lo`` itself (``x > lo``)."""
    hi_open: bool = False
    """Exclude ``hi`` itself (``x < hi``)."""

    def holds(self, x) -> bool:
        """Whether ``x`` lies in the range."""
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    def text(self) -> str:
        """``>= 1``, ``> 0``, ``in [0, 1]``, ``in (0, 1]``."""
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}" if self.lo is not None else "any number"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"


def at_least(lo) -> Range:
    """``x >= lo``."""
    return Range(lo)


def positive() -> Range:
    """``x > 0``."""
    return Range(0, lo_open=True)


def unit(lo_open: bool = False) -> Range:
    """``x in [0, 1]`` (``lo_open``: ``(0, 1]``)."""
    return Range(0, 1, lo_open=lo_open)


SEED = Range(0, 2**32 - 1)
"""A seed: numpy, torch and vLLM all take a 32-bit unsigned seed."""

DEFAULT_INT = Range(0)
"""The range of an ``int`` field that declares none."""


class FieldTypeError(TypeError):
    """A config field holds a value of the wrong type (the message names the field, the value and the type)."""


class FieldRangeError(ValueError):
    """A config field holds a value outside its range (the message names the field, the value and the range)."""


class FieldChoiceError(ValueError):
    """A config field holds a value that is none of its declared choices (the message names the field, the value and
    the choices)."""


def spec(cls) -> dict[str, tuple[object, bool, Range | None]]:
    """Field name → (base type, None allowed, declared range) from ``cls``'s annotations."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in fields(cls):
        hint, rng = hints[f.name], None
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extra = typing.get_args(hint)
            rng = next((e for e in extra if isinstance(e, Range)), None)
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
        base = next((a for a in args if a is not type(None)), hint) if args else hint
        out[f.name] = (base, type(None) in args, rng)
    return out


def check_value(name: str, value, base, optional: bool, rng: Range | None):
    """``value`` checked against the field's declaration; returns it (a path-like as ``str``) or raises."""
    if value is None:
        if optional:
            return None
        raise FieldTypeError(f"{name} must be {_what(base)}, got None")
    if base is bool:
        if not isinstance(value, bool):
            raise FieldTypeError(f"{name} must be True or False (a bool), got {value!r}")
        return value
    if base is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise FieldTypeError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise FieldTypeError(f"{name} must be a finite number, got {value!r}")
        if not math.isfinite(value):
            raise FieldRangeError(f"{name} must be a finite number, got {value!r}")
    elif base is str:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise FieldTypeError(f"{name} must be a string, got {value!r} ({type(value).__name__})")
    else:
        origin = typing.get_origin(base) or base
        if isinstance(origin, type) and not isinstance(value, origin):
            raise FieldTypeError(f"{name} must be a {origin.__name__}, got {value!r} ({type(value).__name__})")
        return value
    rng = rng if rng is not None else (DEFAULT_INT if base is int else None)
    if rng is not None and not rng.holds(value):
        raise FieldRangeError(f"{name} must be {rng.text()}, got {value!r}")
    return value


def check_fields(obj) -> None:
    """Check every field of the dataclass instance ``obj`` (see the module doc); the first bad one raises."""
    specs = spec(type(obj))
    for f in fields(obj):
        value = check_value(f.name, getattr(obj, f.name), *specs[f.name])
        choices = f.metadata.get("choices")
        if choices is not None and value is not None and value not in choices:
            raise FieldChoiceError(f"unknown {f.name} {value!r}; choose one of {tuple(choices)}")
        if value is not getattr(obj, f.name):
            object.__setattr__(obj, f.name, value)


def _what(base) -> str:
    return {bool: "True or False", int: "an integer", float: "a finite number", str: "a string"}.get(
        base, f"a {getattr(typing.get_origin(base) or base, '__name__', base)}"
    )


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
