"""`Cadence`: when a schedule fires, a cron expression or a fixed interval, in a time zone.

Cron is read by cronsim (the `cron` extra), imported only when a cron cadence is made, so an
interval needs nothing beyond Python. Its rules for daylight saving are cron's own (Debian's):
a firing in the hour a spring change skips runs at the first minute after the gap, and a
fixed-time firing in the hour an autumn change repeats runs once, in its first occurrence.
An interval counts real time from its anchor, so a DST change never moves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from durability.checks import positive

__all__ = ["Cadence", "check_zone"]


def check_zone(zone: str) -> ZoneInfo:
    """The IANA zone named `zone`, or a `ValueError` naming it."""
    if not isinstance(zone, str):
        raise TypeError(f"zone must be an IANA zone name (str), not {type(zone).__name__}")
    try:
        return ZoneInfo(zone)
    # A folder of the zone database ('America') or an over-long name fails as the file it
    # looked for: still an unknown zone to the caller.
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        shown = zone if len(zone) <= 80 else f"{zone[:80]}..."
        raise ValueError(f"unknown time zone {shown!r}") from error


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError as error:  # pragma: no cover - the dev extra installs it
        raise ImportError(
            "a cron schedule needs cronsim: pip install 'durability[cron]'"
        ) from error
    return cronsim


@dataclass(frozen=True, slots=True)
class Cadence:
    """A cron expression or an interval from `anchor`, in `zone`: each checked as it is made
    (`cron` or `every`, never both), so a cadence that exists can always say its next firing."""

    cron: str | None
    every: timedelta | None
    zone: str
    anchor: datetime

    def __post_init__(self) -> None:
        if self.anchor.tzinfo is None:
            raise ValueError("a cadence's anchor must be timezone-aware")
        # In UTC: an interval counts real time, and aware arithmetic in a zone counts wall time.
        object.__setattr__(self, "anchor", self.anchor.astimezone(UTC))
        if (self.cron is None) == (self.every is None):
            raise ValueError("a schedule needs exactly one of cron= and every=")
        check_zone(self.zone)
        if self.every is not None:
            positive("every", self.every)
            if self.every < timedelta(milliseconds=1):
                raise ValueError(f"every must be at least a millisecond, got {self.every}")
        if self.cron is not None:
            if not isinstance(self.cron, str):
                raise TypeError(f"cron must be a str, not {type(self.cron).__name__}")
            zone = check_zone(self.zone)
            try:
                _cronsim().CronSim(self.cron, self.anchor.astimezone(zone))
            # Whatever the parser raises (its own error, or an int() of a digit it did not
            # expect) is a malformed expression to the caller.
            except Exception as error:
                shown = self.cron if len(self.cron) <= 80 else f"{self.cron[:80]}..."
                raise ValueError(f"malformed cron expression {shown!r}: {error}") from error

    def after(self, moment: datetime) -> datetime:
        """The first firing strictly after `moment`, in UTC."""
        if self.every is not None:
            steps = (moment - self.anchor) // self.every + 1
            return self.anchor + max(steps, 1) * self.every
        at: datetime = next(self._walk(moment, reverse=False))
        return at

    def latest(self, now: datetime, since: datetime, count: int) -> list[datetime]:
        """Up to `count` firings at or after `since` and at or before `now`, the latest ones,
        oldest first, in UTC: the work is bounded by `count`, not by how long was missed."""
        found: list[datetime] = []
        if self.every is not None:
            top = (now - self.anchor) // self.every
            for step in range(top, top - count, -1):
                at = self.anchor + step * self.every
                if at < since or at < self.anchor:
                    break
                found.append(at)
        else:
            # A microsecond on: cronsim's reverse walk starts below the second it is given.
            for at in self._walk(now + timedelta(microseconds=1), reverse=True):
                if at < since or len(found) == count:
                    break
                found.append(at)
        return found[::-1]

    def _walk(self, moment: datetime, reverse: bool) -> Any:
        zone = check_zone(self.zone)
        walk = _cronsim().CronSim(self.cron, moment.astimezone(zone), reverse=reverse)
        return (at.astimezone(UTC) for at in walk)
