"""`Schedule`: one stored schedule, as a value, and the record text a store keeps of it.

A store keeps a schedule as opaque text and compares it whole (`Timetable.swap`), so every
change, a firing's advance among them, is a compare-and-set on the record read: two workers
that read the same record cannot both advance it. The record holds the next firing, the last
one, and the firings a worker has taken to start (`pending`, with the moment its hold lapses),
so a worker that dies between taking a firing and starting it leaves it to the next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, cast, get_args

from durability.checks import check_workflow
from durability.codec import JsonCodec
from durability.schedules.cadence import Cadence

__all__ = ["BOUND", "MISSED", "ON_TIME", "Missed", "Schedule", "firing_id"]

Missed = Literal["skip", "latest", "all"]
#: What a schedule does with firings that came while no worker ran: `skip` them (a firing
#: more than `ON_TIME` late is dropped), run the `latest` of them once, or run `all` of them
#: (the latest `bound`, oldest first).
MISSED: tuple[str, ...] = get_args(Missed)
#: How late a firing may start and still count as on time under `missed="skip"`.
ON_TIME = timedelta(minutes=1)
#: How many missed firings `missed="all"` runs at most, unless the schedule says.
BOUND = 100

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _at(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def firing_id(name: str, at: datetime) -> str:
    """The workflow id of `name`'s firing at `at`: the same on every worker, so a second
    starter of one firing finds the first one's workflow rather than making another."""
    at = at.astimezone(UTC)
    return f"{name}@{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond // 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored: what it runs (`body`, named, with `input`), when (`cadence`), what
    it does with missed firings (`missed`, `bound`), and where it stands: `next` is its next
    firing (None while `paused`), `fired` its last, `pending` the firings a worker holds until
    `held` to start them."""

    name: str
    body: str
    input: object
    cadence: Cadence
    missed: Missed = "latest"
    bound: int = BOUND
    paused: bool = False
    next: datetime | None = None
    fired: datetime | None = None
    pending: tuple[datetime, ...] = field(default=())
    held: datetime | None = None

    def __post_init__(self) -> None:
        check_workflow(self.name)
        check_workflow(firing_id(self.name, _EPOCH))  # every firing's id must be one too
        if "@" in self.name:
            raise ValueError(f"schedule name {self.name!r} may not hold '@' (it ends at one)")
        if not isinstance(self.body, str) or not self.body:
            raise ValueError(f"body must be a body's name (a non-empty str), got {self.body!r}")
        if self.missed not in MISSED:
            raise ValueError(f"missed must be one of {', '.join(MISSED)}; got {self.missed!r}")
        if isinstance(self.bound, bool) or not isinstance(self.bound, int) or self.bound < 1:
            raise ValueError(f"bound must be an int of at least 1, got {self.bound!r}")
        JsonCodec().encode(self.input)  # refused here, not when it fires

    @property
    def due(self) -> datetime | None:
        """When a worker should next look at it: its pending firings' hold, else its next
        firing (None: paused, with nothing pending)."""
        if self.pending:
            return self.held
        return None if self.paused else self.next

    def plan(self, now: datetime) -> tuple[list[datetime], datetime]:
        """The firings to start now (by `missed`) and the next firing after `now`."""
        assert self.next is not None
        count = self.bound if self.missed == "all" else 1
        firings = self.cadence.latest(now, self.next, count)
        if self.missed == "skip":
            firings = [at for at in firings if now - at <= ON_TIME]
        return firings, self.cadence.after(now)

    def to_record(self) -> str:
        cadence = self.cadence
        return json.dumps({
            "name": self.name, "body": self.body, "input": self.input,
            "cron": cadence.cron,
            "every": None if cadence.every is None else cadence.every // timedelta(milliseconds=1),
            "zone": cadence.zone, "anchor": _ms(cadence.anchor),
            "missed": self.missed, "bound": self.bound, "paused": self.paused,
            "next": None if self.next is None else _ms(self.next),
            "fired": None if self.fired is None else _ms(self.fired),
            "pending": [_ms(at) for at in self.pending],
            "held": None if self.held is None else _ms(self.held),
        }, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_record(cls, text: str) -> Schedule:
        data = json.loads(text)
        every = data["every"]
        cadence = Cadence(
            data["cron"], None if every is None else timedelta(milliseconds=every),
            data["zone"], _at(data["anchor"]),
        )
        return cls(
            data["name"], data["body"], data["input"], cadence,
            missed=cast(Missed, data["missed"]), bound=data["bound"], paused=data["paused"],
            next=None if data["next"] is None else _at(data["next"]),
            fired=None if data["fired"] is None else _at(data["fired"]),
            pending=tuple(_at(ms) for ms in data["pending"]),
            held=None if data["held"] is None else _at(data["held"]),
        )

    def same_plan(self, other: Schedule) -> bool:
        """Whether `other` runs the same body and input on the same cadence and policy (its
        standing aside): adding it again changes nothing."""
        return (self.body, self.input, self.cadence.cron, self.cadence.every,
                self.cadence.zone, self.missed, self.bound) == (
            other.body, other.input, other.cadence.cron, other.cadence.every,
            other.cadence.zone, other.missed, other.bound)

    def but(self, **changes: object) -> Schedule:
        return replace(self, **changes)  # type: ignore[arg-type]
