"""The checks a wakeup's priority and limit meet before any store sees them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durability import Limit
from durability.checks import MAX_PRIORITY, MIN_PRIORITY, check_limit, check_priority


def test_a_priority_in_range_passes_through() -> None:
    assert [check_priority(p) for p in (MIN_PRIORITY, 0, MAX_PRIORITY)] == [-100, 0, 100]


@pytest.mark.parametrize(
    ("priority", "kind", "said"),
    [
        (1.5, TypeError, "must be an int, not float"),
        (True, TypeError, "must be an int, not bool"),
        ("1", TypeError, "must be an int, not str"),
        (MAX_PRIORITY + 1, ValueError, "from -100 to 100, got 101"),
        (MIN_PRIORITY - 1, ValueError, "got -101"),
    ],
)
def test_a_bad_priority_is_refused_with_what_is_wrong(
    priority: object, kind: type[Exception], said: str
) -> None:
    with pytest.raises(kind, match=said):
        check_priority(priority)


def test_a_sound_limit_or_none_passes_through() -> None:
    rate = Limit("gateway", 10, per=timedelta(seconds=1))
    assert check_limit(None) is None
    assert check_limit(rate) is rate
    assert check_limit(Limit("ü-payments", 1)) == Limit("ü-payments", 1)


@pytest.mark.parametrize(
    ("limit", "kind", "said"),
    [
        ("gateway", TypeError, "must be a Limit or None, not str"),
        (Limit(7, 1), TypeError, "key must be a str, not int"),  # type: ignore[arg-type]
        (Limit("", 1), ValueError, "1 to 256 characters, got 0"),
        (Limit("a{b}", 1), ValueError, "brace"),
        (Limit("a\nb", 1), ValueError, "control character"),
        (Limit("k", 0), ValueError, "from 1 to 1000000, got 0"),
        (Limit("k", 2.0), TypeError, "at_most must be an int, not float"),  # type: ignore[arg-type]
        (Limit("k", 1, per=timedelta(0)), ValueError, "positive duration"),
        (Limit("k", 1, per=5), TypeError, "must be a timedelta"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_limit_is_refused_with_what_is_wrong(
    limit: object, kind: type[Exception], said: str
) -> None:
    with pytest.raises(kind, match=said):
        check_limit(limit)
