"""The one bound on ids, keys and durations (`durability.interfaces`), against its documented
rules written out again here, so the checks and the documentation cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durability.interfaces import (
    INBOX,
    MAX_DURATION,
    MAX_NAME,
    check_key,
    check_workflow,
    positive,
)
from durability.postgres.checkpointer import page_bounds
from durability.testing.conformance.bounds import names


def _valid_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def documented_id(name: str) -> bool:
    """The rule as the interfaces module states it."""
    return (
        1 <= len(name) <= MAX_NAME
        and _valid_text(name)
        and "\x00" not in name
        and "{" not in name
        and "}" not in name
    )


def documented_key(name: str) -> bool:
    return (
        1 <= len(name) <= MAX_NAME
        and _valid_text(name)
        and "\x00" not in name
        and not name.startswith(INBOX)
    )


def accepts(check: Callable[[str], str], name: str) -> bool:
    try:
        check(name)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(names(MAX_NAME))
def test_the_checks_accept_exactly_what_the_documentation_says(name: str) -> None:
    assert accepts(check_workflow, name) == documented_id(name)
    assert accepts(check_key, name) == documented_key(name)


def test_the_bound_is_inclusive_and_counts_characters_not_bytes() -> None:
    for fill in ("x", "é", "漢", "🎉"):  # one to four bytes of UTF-8 each
        assert check_workflow(fill * MAX_NAME) == fill * MAX_NAME
        assert check_key(fill * MAX_NAME) == fill * MAX_NAME
        with pytest.raises(ValueError, match=f"the bound is {MAX_NAME}"):
            check_workflow(fill * (MAX_NAME + 1))
        with pytest.raises(ValueError, match=f"the bound is {MAX_NAME}"):
            check_key(fill * (MAX_NAME + 1))


def test_a_refusal_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="NUL"):
        check_workflow("a\x00b")
    with pytest.raises(ValueError, match="not valid Unicode"):
        check_key("bad \ud800")
    with pytest.raises(ValueError, match="brace"):
        check_workflow("{tag}")
    assert check_key("{tag}") == "{tag}"  # a key is never part of a Redis key name
    with pytest.raises(TypeError, match="must be a str"):
        check_workflow(b"bytes")  # type: ignore[arg-type]


def test_a_huge_name_is_refused_by_its_length_alone() -> None:
    # The length is checked before anything scans the text, so the message is about length
    # even where the text is also bad in other ways.
    with pytest.raises(ValueError, match="characters; the bound"):
        check_workflow("{\x00\ud800" * 1_000_000)


def test_durations_are_bounded_both_ways() -> None:
    assert positive("lease", MAX_DURATION) == MAX_DURATION
    assert positive("lease", timedelta(microseconds=1)) == timedelta(microseconds=1)
    with pytest.raises(ValueError, match="lease must be at most MAX_DURATION"):
        positive("lease", MAX_DURATION + timedelta(microseconds=1))
    with pytest.raises(ValueError, match="lease must be a positive duration"):
        positive("lease", timedelta(0))
    with pytest.raises(TypeError, match="lease must be a timedelta"):
        positive("lease", 30)  # type: ignore[arg-type]


@given(st.timedeltas())
def test_every_duration_positive_accepts_can_be_added_to_now_on_every_store(
    duration: timedelta,
) -> None:
    try:
        positive("d", duration)
    except ValueError:
        assert duration <= timedelta(0) or duration > MAX_DURATION
        return
    # What the stores do with it: add it to now (twice, for a TTL past a deadline), in
    # datetime and in whole milliseconds, which Lua prints exactly (14 significant digits)
    # only below 10**14.
    later = datetime.now(UTC) + duration + duration
    assert later.year < 9999
    assert int(later.timestamp() * 1000) < 10**14


_IDS = st.text(alphabet=st.sampled_from("ab\ud7ff\ue000\U0010ffff"), min_size=1, max_size=4)


@settings(deadline=None)
@given(ids=st.lists(_IDS, max_size=30), prefix=st.one_of(st.none(), _IDS),
       after=st.one_of(st.none(), _IDS))
def test_a_postgres_page_range_holds_exactly_the_ids_past_the_cursor_with_the_prefix(
    ids: list[str], prefix: str | None, after: str | None
) -> None:
    # The listing reads a range of an index (low inclusive, high exclusive, the cursor left
    # out) in place of "starts with the prefix and sorts after the cursor": the two must agree,
    # at the top of the code points and beside the surrogates included.
    low, high = page_bounds(prefix, after)
    ranged = {i for i in ids if low <= i < high and i != after}
    wanted = {i for i in ids if i.startswith(prefix or "") and (after is None or i > after)}
    assert ranged == wanted
