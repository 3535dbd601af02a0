"""The default codec and the parsers: what a step result becomes as text, and what comes back.

The codec's one promise is that a value comes back equal and of the same type; anything it
cannot keep that promise for is refused on the way in, naming where in the value the problem is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durability.codec import (
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
