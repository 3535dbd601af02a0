"""`utcnow`, the library's one reading of the wall clock, and `Clock`, the type of what stands in.

Whatever reads the time takes a `Clock` argument that defaults to `utcnow`, so a test of a
three-day sleep passes a clock of its own and runs in milliseconds. Always timezone-aware UTC:
a naive datetime would compare with a stored deadline as if it were local time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "utcnow"]

#: What reads the time: `utcnow`, or a test's clock.
Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """Now, in UTC (aware)."""
    return datetime.now(UTC)
