"""What a recorded value becomes in a store, and how it comes back.

A store keeps text; a workflow keeps values. The codec is the boundary, and it owes one thing
above all: what comes back equals what went in. A value that would come back different (a tuple
through JSON comes back a list) is refused when it is first written, with `Unencodable`, rather
than discovered on the replay that reads it back.

The `as_*` parsers turn a decoded value into the type a step promised its caller; they raise
`TypeError` when the recorded value is not of that shape.
"""

from __future__ import annotations

import json
import math
from typing import Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class Unencodable(ValueError):
    """A value the codec cannot store and bring back unchanged."""


@runtime_checkable
class Codec(Protocol):
    def encode(self, value: object) -> str:
        """Text for `value`; raises `Unencodable` unless `decode` would give `value` back."""
        ...

    def decode(self, text: str) -> object: ...


def _native(value: object, path: str) -> None:
    """Refuse anything that JSON would not bring back as the same value *and type*.

    Exact types, not isinstance: a `StrEnum` member or an `OrderedDict` encodes fine but comes
    back as a plain `str` or `dict`, which is a different value to code that checks its type.
    """
    kind = type(value)
    if value is None or kind in (bool, str, int):
        return
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise Unencodable(f"{path}: {value!r} has no JSON form")
        return
    if isinstance(value, list) and kind is list:
        for index, item in enumerate(value):
            _native(item, f"{path}[{index}]")
        return
    if isinstance(value, dict) and kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise Unencodable(
                    f"{path}: key {key!r} is a {type(key).__name__}; JSON keys come back as str"
                )
            _native(item, f"{path}[{key!r}]")
        return
    raise Unencodable(
        f"{path}: a {kind.__name__} does not survive JSON unchanged"
        " (use a list, dict, str, int, float, bool or None, or a codec that knows the type)"
    )


class JsonCodec:
    """The standard library's JSON, restricted to values that round-trip exactly."""

    __slots__ = ()

    def encode(self, value: object) -> str:
        _native(value, "value")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def decode(self, text: str) -> object:
        return json.loads(text)


# --- parsers: a recorded value back into the type a step promised ---------------------------


def as_json(value: object) -> object:
    """Any decoded value, unchanged."""
    return value


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, recorded value is {type(value).__name__}")
    return value


def as_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, recorded value is {type(value).__name__}")
    return value


as_count = as_int


def as_float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, recorded value is {type(value).__name__}")
    return float(value)


def as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, recorded value is {type(value).__name__}")
    return value


def as_list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, recorded value is {type(value).__name__}")
    return value


def as_dict(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping, recorded value is {type(value).__name__}")
    return value


def as_none(value: object) -> None:
    if value is not None:
        raise TypeError(f"expected nothing, recorded value is {type(value).__name__}")
