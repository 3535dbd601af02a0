"""What a recorded value becomes in a store, and how it comes back.

A store keeps text; a workflow keeps values. The codec is the boundary, and it owes one thing
above all: what comes back equals what went in. A value that would come back different (a tuple
through JSON comes back a list) is refused when it is first written, with `Unencodable`, rather
than discovered on the replay that reads it back. So is a value no store can carry, before any
store sees it; `JsonCodec` says exactly which it accepts.

A workflow's own records carry a stamp (`Stamped`) only `decode_checkpoint` reads back. The
`as_*` parsers turn a decoded value into the type a step promised (else `TypeError`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")

#: The most decimal digits an int may have (`sys.int_info.default_max_str_digits`).
MAX_DIGITS = 4300
#: How deep lists and dicts may nest: `[[1]]` is 2 deep.
MAX_DEPTH = 100

#: The smallest int too big to keep (MAX_DIGITS nines are the most allowed), and its negative.
_TOO_BIG = 10**MAX_DIGITS
_TOO_SMALL = -_TOO_BIG
#: The types `_native` passes as they are, whatever their value (exact types: not subclasses).
_LEAVES = frozenset({str, bool, type(None)})


class Unencodable(ValueError):
    """A value the codec cannot store and bring back unchanged."""


class Stamped(NamedTuple):
    """A value a workflow recorded itself, with the ordinal at which its body reached it:
    the n-th distinct step its own task reached in the pass (0-based), or `None` for a step
    reached in a task the body started (a branch), whose order depends on timing. A named
    tuple rather than a dataclass: one is made for every record a pass writes."""

    value: object
    ordinal: int | None


#: How a stamped text starts: no JSON text does, so a record without one (written before
#: stamps, or supplied from outside) reads as it always did. `#3:` then the value's JSON.
STAMP = "#"


@runtime_checkable
class Stamping(Protocol):
    """A codec that carries `Stamped` values, and can read their stamp back."""

    def decode_stamped(self, text: str) -> tuple[object, Stamped | None]: ...


@runtime_checkable
class Codec(Protocol):
    def encode(self, value: object) -> str:
        """Text for `value`; raises `Unencodable` unless `decode` would give `value` back."""
        ...

    def decode(self, text: str) -> object: ...


class _Refused(Exception):
    """Why a value was refused, and where: the path is built on the way out of the walk, so
    the walk itself formats nothing for the values it accepts."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []

    def where(self) -> str:
        steps = self.path[::-1]
        if len(steps) > 12:  # a value refused for its depth: the ends say where it is
            steps = [*steps[:6], "...", *steps[-3:]]
        return "value" + "".join(steps)


def _native(value: object, depth: int) -> None:
    """Refuse anything that JSON would not bring back as the same value *and type*.

    Exact types, not isinstance: a `StrEnum` member or an `OrderedDict` encodes fine but comes
    back as a plain `str` or `dict`, which is a different value to code that checks its type.
    """
    # Asked by exact type (each branch wants `kind is X`), not by a ladder of `isinstance`:
    # every record and ending a pass writes comes here.
    kind = type(value)
    if kind in _LEAVES:
        return
    if kind is int:
        if _TOO_SMALL < value < _TOO_BIG:
            return
        raise _Refused(f"an int of more than {MAX_DIGITS} digits has no portable text form")
    if kind is dict:
        if depth >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} (or contains itself)")
        key: object = None
        try:
            for key, item in value.items():  # type: ignore[attr-defined]
                if type(key) is not str:
                    raise _Refused(
                        f"key {key!r} is a {type(key).__name__}; JSON keys come back as str"
                    )
                # A plain leaf (text, bool, None, an int in range) is passed here, not by a
                # call each: every record and ending a pass writes is a dict of them.
                leaf = type(item)
                if leaf in _LEAVES or (leaf is int and _TOO_SMALL < item < _TOO_BIG):
                    continue
                _native(item, depth + 1)
        except _Refused as refused:
            if type(key) is str:  # the refusal is inside the item, not the key itself
                refused.path.append(f"[{key!r}]")
            raise
        return
    if kind is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return
        raise _Refused(f"{value!r} has no JSON form")
    if kind is list:
        if depth >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} (or contains itself)")
        at = 0
        try:
            for item in value:  # type: ignore[attr-defined]
                leaf = type(item)
                if not (leaf in _LEAVES or (leaf is int and _TOO_SMALL < item < _TOO_BIG)):
                    _native(item, depth + 1)
                at += 1
        except _Refused as refused:
            refused.path.append(f"[{at}]")
            raise
        return
    raise _Refused(
        f"a {kind.__name__} does not survive JSON unchanged"
        " (use a list, dict, str, int, float, bool or None, or a codec that knows the type)"
    )


def _invalid(text: str) -> str | None:
    """Why `text` is not valid Unicode (a lone surrogate), or None if it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"{text!r} is not valid Unicode text ({error.reason} at position {error.start})"
    return None


def _unsendable(value: object, path: str) -> str | None:
    """Where in `value` (already walked by `_native`) a text is not valid Unicode, and why."""
    if isinstance(value, str):
        why = _invalid(value)
        return None if why is None else f"{path}: {why}"
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _unsendable(item, f"{path}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            why = _invalid(key)
            if why is not None:
                return f"{path}: key {why}"
            found = _unsendable(item, f"{path}[{key!r}]")
            if found is not None:
                return found
    return None


class JsonCodec:
    """The standard library's JSON, restricted to values that round-trip exactly. It accepts
    exactly:

    - `None`, `bool`, `str`, `int`, finite `float`, `list`, and `dict` with `str` keys (exact
      types: not subclasses, which would come back as the base type);
    - text that is valid Unicode, in values and keys alike (no lone surrogate, which is what
      `os.fsdecode` makes of a file name that is not UTF-8: no store's encoding can send it);
    - ints of at most `MAX_DIGITS` decimal digits (Python's own default limit on converting ints
      to text, so every reader can parse what any writer wrote);
    - containers nested at most `MAX_DEPTH` deep (past that the encoder, and every reader's
      decoder, would run out of stack; a value that contains itself is refused the same way).

    A `Stamped` value is its value's text behind a stamp (`#<ordinal>:`, or `#:` without an
    ordinal); `decode` reads it back as the bare value.
    """

    __slots__ = ()

    def encode(self, value: object) -> str:
        if type(value) is not Stamped:
            return _text(value)
        ordinal = value.ordinal
        if ordinal is None:
            return f"{STAMP}:{_text(value.value)}"
        if type(ordinal) is not int or ordinal < 0:
            raise Unencodable(f"stamp: an ordinal is a count from 0, not {ordinal!r}")
        return f"{STAMP}{ordinal}:{_text(value.value)}"

    def decode(self, text: str) -> object:
        if text[:1] == STAMP:
            return _after(text, text.index(":") + 1)
        return _whole(text)

    def decode_stamped(self, text: str) -> tuple[object, Stamped | None]:
        """The value of `text`, and its stamp if it has one (as a `Stamped` of that value)."""
        if text[:1] != STAMP:
            return _whole(text), None
        colon = text.index(":")
        value = _after(text, colon + 1)
        return value, Stamped(value, int(text[1:colon]) if colon > 1 else None)

    def copy(self, value: object) -> object:
        """What `decode(encode(value))` gives, refused with `Unencodable` exactly as `encode`
        refuses: a store that keeps values, not text (memory), checks and copies at the write
        and makes the text only if the value is read. ASCII text, word-sized ints, finite
        floats and shallow lists and dicts of them are copied directly; anything else goes
        through the text, so a rule `encode` keeps cannot be missed here."""
        try:
            return _copy(value, 0)
        except _Unusual:
            return self.decode(_text(value))


_DECODER = json.JSONDecoder()


def _whole(text: str) -> object:
    """`json.loads(text)`, read in one step where `text` is a JSON value from its first
    character to its last (as every text a store writes is; `_after` from 0): `loads` reads it
    through two more calls and a whitespace match at each end. Any other (padded, bytes, or
    not JSON) goes to `loads` itself, which reads it or says why not."""
    try:
        return _after(text, 0)
    except (json.JSONDecodeError, TypeError):  # (TypeError: bytes, which `loads` reads)
        return json.loads(text)


def read_json(data: str | bytes) -> object:
    """`json.loads` for the JSON a server sends (UTF-8 bytes, whole values), read as `_whole`
    reads a record: a Postgres pool's connections read the checkpoint a claim hands back
    through it (`psycopg.types.json.set_json_loads`)."""
    if isinstance(data, bytes):
        try:
            return _whole(data.decode("utf-8"))
        except UnicodeDecodeError:
            return json.loads(data)
    return _whole(data)


def _after(text: str, start: int) -> object:
    """The JSON value that fills `text` from `start` to its end (read in place, not sliced)."""
    value, end = _DECODER.raw_decode(text, start)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


class _Unusual(Exception):
    """A value `_copy` leaves to the text (`JsonCodec.copy`)."""


#: How deep `_copy` goes before it leaves a value to the text, and the ints it copies as they
#: are: well inside `MAX_DEPTH` and `MAX_DIGITS`, so nothing `encode` refuses is copied.
_SHALLOW = 32
_WORD = 2**63


def _copy(value: object, depth: int) -> object:
    """`value` as JSON brings it back, for the values that surely survive (else `_Unusual`):
    exact types only, as `_native` checks them (a subclass is left to the text). Asked by
    exact type first, not by a ladder of `isinstance`: a completed pass's ending comes here,
    and a container's plain items (ASCII text, word-sized ints, bools, None) are taken in
    its loop, not by a call each."""
    kind = type(value)
    if kind is dict:
        if depth < _SHALLOW:
            copied: dict[str, object] = {}
            for key, item in value.items():  # type: ignore[attr-defined]
                if type(key) is not str or not key.isascii():
                    raise _Unusual
                leaf = type(item)
                if (
                    (leaf is str and item.isascii())
                    or (leaf is int and -_WORD < item < _WORD)
                    or leaf is bool
                    or item is None
                ):
                    copied[key] = item
                else:
                    copied[key] = _copy(item, depth + 1)
            return copied
    elif kind is list:
        if depth < _SHALLOW:
            return [_copy(item, depth + 1) for item in value]  # type: ignore[attr-defined]
    elif kind is str:
        if value.isascii():  # type: ignore[attr-defined]
            return value
    elif kind is int:
        if -_WORD < value < _WORD:  # type: ignore[operator]
            return value
    elif kind is bool or value is None or (kind is float and math.isfinite(value)):  # type: ignore[arg-type]
        return value
    raise _Unusual


#: `json.dumps` with these options makes an encoder on every call: one, made once, does.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _text(value: object) -> str:
    """`JsonCodec`'s text for a bare value (a `Stamped` inside one is refused by `_native`)."""
    try:
        _native(value, 0)
    except _Refused as refused:
        raise Unencodable(f"{refused.where()}: {refused.reason}") from None
    try:
        text = _ENCODER.encode(value)
    except ValueError as error:  # an int past this process's own int_max_str_digits
        raise Unencodable(f"value: {error}") from None
    # One check of the whole text rather than one per string: ASCII text (the usual case)
    # is known to be ASCII without a scan, and any other is encoded once, in C.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise Unencodable(
                _unsendable(value, "value") or "value: is not valid Unicode text"
            ) from None
    return text


def decode_checkpoint(
    codec: Codec, pairs: Iterable[Sequence[str]]
) -> tuple[dict[str, object], dict[str, int | None] | None]:
    """A checkpoint's `(key, text)` pairs (tuples, or the `[key, text]` lists a JSON row holds)
    as its records (bare values, in the pairs' order), and the ordinal of each record the
    workflow stamped (`None` ordinals included). The second is `None` for a codec that cannot
    stamp (no `decode_stamped`): its records carry no order to check."""
    records: dict[str, object] = {}
    ordinals: dict[str, int | None] = {}
    if type(codec) is JsonCodec:  # the usual codec, read inline: every claim of a pass
        for key, text in pairs:
            if text[:1] != STAMP:
                records[key] = _whole(text)
                continue
            colon = text.index(":")
            records[key] = _after(text, colon + 1)
            ordinals[key] = int(text[1:colon]) if colon > 1 else None
        return records, ordinals
    # Asked by attribute, not `isinstance(codec, Stamping)`: a protocol check costs a claim
    # more than the decoding does.
    read = getattr(codec, "decode_stamped", None)
    if read is None:
        return {key: codec.decode(text) for key, text in pairs}, None
    for key, text in pairs:
        records[key], stamp = read(text)
        if stamp is not None:
            ordinals[key] = stamp.ordinal
    return records, ordinals


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
