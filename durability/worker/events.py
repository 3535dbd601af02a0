"""What a worker tells an observer: one `Event` per moment in a delivery's life.

Two kinds, "loaded" and "step", go only to an observer that asks for them (`detailed`): they
cost an event per step, which an observer counting passes should not pay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from durability.stepwise import Blocked, Completed, Sleeping

__all__ = ["DETAIL", "Emit", "Emitter", "Event", "Kind", "Observer", "detailed", "emitter"]

log = logging.getLogger("durability.worker")

Kind = Literal[
    "delivered",
    "started",
    "outcome",
    "failed",
    "retrying",
    "dead",
    "cancelled",
    "contended",
    "fenced",
    "expired",
    "unavailable",
    "loaded",
    "step",
]

#: The kinds an observer is sent only if it asks (`detailed`).
DETAIL: frozenset[Kind] = frozenset({"loaded", "step"})


@dataclass(frozen=True, slots=True)
class Event:
    """One moment in a delivery's life, for an observer (the lab measures through these).

    `at` is wall-clock seconds since the epoch (comparable across processes); `outcome` is set
    on "outcome", `error` on "failed", "fenced" and "unavailable" (the store kept failing the
    pass's writes: the workflow is handed back, not failed). A failed attempt is "failed"
    (with its `attempt`), then "retrying" (with `due`, when it is tried again) or "dead" (the
    workflow has failed, and only `durable.retry` brings it back); a pass that finds its
    workflow already failed is "dead" alone.

    To an observer that asks (`detailed`): "loaded" once the pass has its checkpoint, before
    the body runs (`token`, the claim's fencing token, and `records`, the checkpoint as
    loaded: the pass's own mapping, which it goes on adding to, so read it when told), and
    "step" for each step that ran in the pass, not one replayed from its record (`key`;
    `began` and `at` its start and end, after its record landed; `error` if it raised).
    """

    kind: Kind
    workflow: str
    at: float
    outcome: Completed[object] | Sleeping | Blocked | None = None
    error: BaseException | None = None
    attempt: int | None = None
    due: datetime | None = None
    token: int | None = None
    key: str | None = None
    began: float | None = None
    records: Mapping[str, object] | None = field(default=None, repr=False)

    if not TYPE_CHECKING:  # hidden from type checkers, which would take any name as a field

        def __getattr__(self, name: str) -> None:
            """A field an `Emitter` left unset (it was None); anything else is no attribute."""
            if name in _UNSET:
                return None
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


#: The fields an emitted `Event` may leave unset (None), read through `Event.__getattr__`.
_UNSET = frozenset(
    {"outcome", "error", "attempt", "due", "token", "key", "began", "records"}
)


Observer = Callable[[Event], None]


class Emit(Protocol):
    """How a worker emits (`emitter`): an `Event`'s fields but its time."""

    def __call__(
        self,
        kind: Kind,
        workflow: str,
        outcome: Completed[object] | Sleeping | Blocked | None = None,
        error: BaseException | None = None,
        attempt: int | None = None,
        due: datetime | None = None,
        token: int | None = None,
        key: str | None = None,
        began: float | None = None,
        records: Mapping[str, object] | None = None,
    ) -> None: ...


def emitter(observer: Observer | None) -> Emit:
    """What a worker calls at each moment of a pass (three times a pass at least): with no
    observer, or one whose `enabled` attribute is False, a function that does nothing, since
    even an early return from an object's `__call__` costs several times a plain call (and
    the event is built before it); else an `Emitter`'s bound `emit`. Asked once, as the
    worker starts."""
    if observer is None or getattr(observer, "enabled", True) is False:
        return _silent  # an observer that says it is off (OpenTelemetry unconfigured) costs nothing
    return Emitter(observer).emit


def detailed(observer: Observer | None) -> bool:
    """Whether `observer` asks for the `DETAIL` kinds: its `detail` attribute is true (the
    OpenTelemetry observer's is; a plain function has none)."""
    return observer is not None and getattr(observer, "detail", False) is True


def _silent(
    kind: Kind,
    workflow: str,
    outcome: Completed[object] | Sleeping | Blocked | None = None,
    error: BaseException | None = None,
    attempt: int | None = None,
    due: datetime | None = None,
    token: int | None = None,
    key: str | None = None,
    began: float | None = None,
    records: Mapping[str, object] | None = None,
) -> None:
    return None


_blank = object.__new__


class Emitter:
    """Hands events to an observer, if there is one; an observer that raises is logged, never
    allowed to stop the pass that emitted."""

    __slots__ = ("observer",)

    def __init__(self, observer: Observer | None) -> None:
        self.observer = observer

    def emit(
        self,
        kind: Kind,
        workflow: str,
        outcome: Completed[object] | Sleeping | Blocked | None = None,
        error: BaseException | None = None,
        attempt: int | None = None,
        due: datetime | None = None,
        token: int | None = None,
        key: str | None = None,
        began: float | None = None,
        records: Mapping[str, object] | None = None,
    ) -> None:
        if self.observer is None:
            return
        # Made as a frozen dataclass makes itself, but a field left at None is not set at all
        # (`Event.__getattr__` reads it as None): three events a pass, most with three fields
        # of eleven, and each field set costs a call.
        event = _blank(Event)
        put = object.__setattr__
        put(event, "kind", kind)
        put(event, "workflow", workflow)
        put(event, "at", time.time())
        if outcome is not None:
            put(event, "outcome", outcome)
        if error is not None:
            put(event, "error", error)
        if attempt is not None:
            put(event, "attempt", attempt)
        if due is not None:
            put(event, "due", due)
        if token is not None:
            put(event, "token", token)
        if key is not None:
            put(event, "key", key)
        if began is not None:
            put(event, "began", began)
        if records is not None:
            put(event, "records", records)
        try:
            self.observer(event)
        except Exception:
            log.exception("observer failed on %s for %s", kind, workflow)
