"""The default codec and the parsers: what a step result becomes as text, and what comes back.

The codec's one promise is that a value comes back equal and of the same type; anything it
cannot keep that promise for is refused on the way in, naming where in the value the problem is.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from durability.codec import (
    MAX_DEPTH,
    MAX_DIGITS,
    Codec,
    JsonCodec,
    Unencodable,
    as_bool,
    as_count,
    as_dict,
    as_float,
    as_int,
    as_json,
    as_list,
    as_none,
    as_text,
    decode_checkpoint,
    read_json,
)

codec = JsonCodec()


def shape(value: object) -> object:
    """`value` with every scalar tagged by its type, so `1`, `1.0` and `True` differ."""
    if isinstance(value, dict):
        return ("dict", [(key, shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [shape(item) for item in value])
    return (type(value).__name__, value)


def round_trip(value: object) -> object:
    return codec.decode(codec.encode(value))


def test_the_default_codec_is_a_codec() -> None:
    assert isinstance(codec, Codec)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**100,
        1.0,
        -0.0,
        0.1,
        1e300,
        5e-324,
        "",
        "ünïcødé ✓ 漢字 🎉",
        "\x00 nul and \u2028 separators",
        'quote " back \\ slash',
        [],
        {},
        [None, [True, [1, [1.5, ["deep"]]]]],
        {"b": 1, "a": {"": [], "x": {"y": None}}},
    ],
)
def test_json_native_values_come_back_equal_and_of_the_same_type(value: object) -> None:
    assert shape(round_trip(value)) == shape(value)


def test_the_text_is_plain_json() -> None:
    text = codec.encode({"é": [1, 2.5, None]})
    assert json.loads(text) == {"é": [1, 2.5, None]}
    assert "é" in text, "non-ASCII text is kept as itself, not escaped"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_every_json_native_value_round_trips(value: object) -> None:
    assert shape(round_trip(value)) == shape(value)


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=4) | st.floats(),
        lambda children: (
            st.lists(children, max_size=3)
            | st.tuples(children)
            | st.dictionaries(st.text(max_size=3) | st.integers(), children, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_a_value_is_either_refused_or_brought_back_exactly(value: object) -> None:
    try:
        text = codec.encode(value)
    except Unencodable:
        return
    assert shape(codec.decode(text)) == shape(value)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ((1, 2), "value:"),
        ({1, 2}, "value:"),
        (frozenset(), "value:"),
        (b"raw", "value:"),
        (object(), "value:"),
        (math.nan, "value:"),
        (math.inf, "value:"),
        (-math.inf, "value:"),
        ({1: "one"}, "value:"),
        ([1, 2, (3,)], "value[2]:"),
        ({"a": [0, {"b": math.nan}]}, "value['a'][1]['b']:"),
        ({"outer": {2: "x"}}, "value['outer']:"),
    ],
)
def test_a_value_that_would_not_come_back_is_refused_with_its_path(
    value: object, where: str
) -> None:
    with pytest.raises(Unencodable) as refused:
        codec.encode(value)
    assert str(refused.value).startswith(where)


def _nested(depth: int) -> list[object]:
    value: list[object] = [0]
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "where", "why"),
    [
        ("bad \ud800", "value:", "not valid Unicode"),
        (os.fsdecode(b"caf\xe9"), "value:", "not valid Unicode"),
        ({"a": ["ok", "x\udcff"]}, "value['a'][1]:", "not valid Unicode"),
        ({"a": {"\ud800": 1}}, "value['a']: key", "not valid Unicode"),
        (10**MAX_DIGITS, "value:", f"more than {MAX_DIGITS} digits"),
        ({"n": [-(10**5000)]}, "value['n'][0]:", f"more than {MAX_DIGITS} digits"),
        (_nested(MAX_DEPTH + 1), "value[0][0][0][0][0][0]...[0][0][0]:", "deeper than"),
        (_nested(5000), "value[0]", "deeper than"),
    ],
    ids=["surrogate", "fsdecoded", "in-a-list", "in-a-key", "big-int", "5000-digits",
         "too-deep", "5000-deep"],
)
def test_a_value_no_store_can_carry_is_refused_with_its_path(
    value: object, where: str, why: str
) -> None:
    with pytest.raises(Unencodable, match=why) as refused:
        codec.encode(value)
    assert str(refused.value).startswith(where)


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    table: dict[str, object] = {}
    table["me"] = table
    for value in (loop, table):
        with pytest.raises(Unencodable, match="contains itself"):
            codec.encode(value)


def test_values_at_the_bounds_come_back_exactly() -> None:
    for value in (10**MAX_DIGITS - 1, -(10**MAX_DIGITS - 1), _nested(MAX_DEPTH)):
        assert shape(round_trip(value)) == shape(value)


def test_an_int_past_this_process_s_own_limit_is_unencodable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under the bound, but past a lower limit this process was given: still Unencodable, not
    # json's plain ValueError.
    monkeypatch.setattr(sys, "get_int_max_str_digits", sys.get_int_max_str_digits)
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(1000)
    try:
        with pytest.raises(Unencodable, match="value:"):
            codec.encode(10**2000)
    finally:
        sys.set_int_max_str_digits(previous)


# Any value a caller might hand a step, including everything the codec must refuse: text with
# lone surrogates, ints either side of the digit bound, nesting either side of the depth bound,
# tuples, sets, bytes, non-str keys, non-finite floats.
# Text with lone surrogates (category Cs) among the rest: joined from characters, because
# `st.text` over a union of alphabets leaves the surrogates out.
_characters = st.characters() | st.characters(categories=["Cs"])


def _text(most: int) -> st.SearchStrategy[str]:
    return st.lists(_characters, max_size=most).map("".join)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10 ** (MAX_DIGITS - 1), max_value=10 ** (MAX_DIGITS + 1))
    | st.floats()
    | st.sampled_from([math.nan, math.inf, -math.inf])
    | _text(6)
    | st.binary(max_size=3)
)
_anything = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(
            _text(3) | st.integers(),
            children,
            max_size=3,
        )
        | st.builds(_nested, st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3))
    ),
    max_leaves=12,
)


#: What a refusal says, for the statistics (`--hypothesis-show-statistics`): every kind of
#: refusal should show up in a run.
_REASONS = ("Unicode", "digits", "deeper", "survive", "keys come back", "no JSON form")


@settings(max_examples=300, deadline=None)
@given(_anything)
def test_any_value_round_trips_exactly_or_is_unencodable(value: object) -> None:
    # Never another exception: not json's ValueError, not RecursionError, not a
    # UnicodeEncodeError from whatever sends the text on.
    try:
        text = codec.encode(value)
    except Unencodable as refused:
        reason = str(refused)
        event(next((kind for kind in _REASONS if kind in reason), reason))
        return
    event("round trip")
    text.encode("utf-8")  # the text is sendable as it is
    assert shape(codec.decode(text)) == shape(value)


def _containers(value: object) -> list[int]:
    """The ids of every list and dict in `value`."""
    if isinstance(value, list):
        return [id(value), *(found for item in value for found in _containers(item))]
    if isinstance(value, dict):
        return [id(value), *(found for item in value.values() for found in _containers(item))]
    return []


@settings(max_examples=300, deadline=None)
@given(_anything)
def test_a_copy_is_what_the_text_brings_back_and_refused_as_the_text_is(value: object) -> None:
    # A store that keeps a checked copy instead of text (memory's ending) keeps every promise
    # the text keeps: the same refusal, the same value back, and nothing shared with the
    # caller's value, which may still change.
    try:
        text = codec.encode(value)
    except Unencodable as refused:
        with pytest.raises(Unencodable) as copying:
            codec.copy(value)
        assert str(copying.value) == str(refused)
        return
    copied = codec.copy(value)
    assert shape(copied) == shape(codec.decode(text))
    assert not set(_containers(copied)) & set(_containers(value))


def test_an_int_key_refusal_says_why() -> None:
    with pytest.raises(Unencodable, match="key 1 is a int"):
        codec.encode({1: "one"})


def test_unencodable_is_a_value_error() -> None:
    # Callers that validate input catch ValueError; a refused value is bad input.
    assert issubclass(Unencodable, ValueError)


# --- parsers ----------------------------------------------------------------------------------

Parser = Callable[[object], Any]


@pytest.mark.parametrize(
    ("parse", "good", "bad"),
    [
        (as_text, "text", [1, None, b"bytes", ["t"]]),
        (as_int, 3, [True, False, 3.0, "3", None]),
        (as_count, 0, [True, 1.5, "0"]),
        (as_bool, False, [0, 1, "true", None]),
        (as_list, [1, "x"], [(1,), {"a": 1}, "list", None]),
        (as_dict, {"a": 1}, [[("a", 1)], "dict", None]),
        (as_none, None, [0, False, "", [], {}]),
    ],
)
def test_a_parser_returns_its_type_and_refuses_others(
    parse: Parser, good: object, bad: list[object]
) -> None:
    assert shape(parse(good)) == shape(good)
    for wrong in bad:
        with pytest.raises(TypeError):
            parse(wrong)


def test_as_float_takes_any_number_but_a_bool() -> None:
    assert shape(as_float(2)) == shape(2.0)
    assert shape(as_float(2.5)) == shape(2.5)
    for wrong in [True, "2.5", None]:
        with pytest.raises(TypeError):
            as_float(wrong)


def test_as_json_passes_anything_through() -> None:
    value = {"a": [1, None]}
    assert as_json(value) is value


def test_a_parser_error_names_what_was_recorded() -> None:
    with pytest.raises(TypeError, match="list"):
        as_int([1])


def test_subclasses_of_native_types_are_refused_because_they_come_back_as_the_base_type() -> None:
    import enum
    from collections import OrderedDict

    class Colour(enum.StrEnum):
        RED = "red"

    class Size(enum.IntEnum):
        LARGE = 3

    for value in (Colour.RED, Size.LARGE, OrderedDict(a=1), [Colour.RED], {"k": Size.LARGE}):
        with pytest.raises(Unencodable):
            JsonCodec().encode(value)


@given(json_values, st.sampled_from(["", " ", "\n", " \t"]), st.sampled_from(["", " ", "\n"]))
def test_any_json_text_reads_as_json_loads_reads_it_padded_or_not(
    value: object, before: str, after: str
) -> None:
    # A store's own texts are read in one step; text from outside (padded, say) as loads reads it.
    text = before + json.dumps(value) + after
    expected = shape(json.loads(text))
    assert shape(codec.decode(text)) == expected
    assert shape(decode_checkpoint(codec, [("k", text)])[0]["k"]) == expected
    assert shape(read_json(text.encode())) == expected


@pytest.mark.parametrize("text", ["", "{", "1 2", "[1,]", '{"a":1}x', "\ufeff1"])
def test_text_that_is_not_json_is_refused_as_json_loads_refuses_it(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as loads:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as decoded:
        codec.decode(text)
    assert str(decoded.value) == str(loads.value)
    with pytest.raises(json.JSONDecodeError):
        decode_checkpoint(codec, [("k", text)])
