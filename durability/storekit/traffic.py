"""`Traffic`: what a store sent to its server, counted at the place it is sent.

Every store `open_durable` opens counts into its durable's `traffic`: each *request* by name
and each *round trip*, one send that waits for its answers (`Traffic.request` and
`Traffic.round_trip` say what counts as each). A pass's cost is then a difference of two
snapshots, which is how the lab reads idle cost and round trips per pass, and how an
application would export them as metrics.

Counting is a dict increment on the path that already builds the request, so it is always on;
there is nothing to switch and nothing to sample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, runtime_checkable

__all__ = ["Counted", "Sent", "Traffic", "counted"]

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Sent:
    """A snapshot of what was sent: requests by name, and round trips."""

    requests: Mapping[str, int] = field(default_factory=dict)
    round_trips: int = 0

    @property
    def total(self) -> int:
        """Every request, whatever its name."""
        return sum(self.requests.values())

    def __sub__(self, earlier: Sent) -> Sent:
        """What was sent between `earlier` and this snapshot."""
        names = set(self.requests) | set(earlier.requests)
        delta = {n: self.requests.get(n, 0) - earlier.requests.get(n, 0) for n in names}
        return Sent(
            {n: v for n, v in sorted(delta.items()) if v}, self.round_trips - earlier.round_trips
        )


class Traffic:
    """A running count of requests and round trips, written from the store's event loop.

    A store that sends from threads of its own (SQLite's connection threads) counts each
    thread into a counter of its own (`counter`), which `snapshot` adds in: one writer per
    counter, so no count is lost to two threads incrementing at once.
    """

    __slots__ = ("_requests", "_round_trips", "_threads")

    def __init__(self) -> None:
        self._requests: Counter[str] = Counter()
        self._round_trips = 0
        self._threads: list[Counter[str]] = []

    def counter(self) -> Counter[str]:
        """A counter of requests for one thread to write alone; counted in every snapshot."""
        counter: Counter[str] = Counter()
        self._threads.append(counter)
        return counter

    def request(self, name: str) -> None:
        """Count one request named `name`: a Redis command, a Lua script by its file name, a SQL
        statement by its name in the store's `.sql` files, or its leading keyword on SQLite."""
        self._requests[name] += 1

    def requests(self, names: Iterable[str]) -> None:
        """Count one request for each name."""
        self._requests.update(names)

    def round_trip(self) -> None:
        """Count one send that waits for its answers: a lone command, a pipeline, a batch of
        statements, one hop to SQLite's thread."""
        self._round_trips += 1

    def lone_request(self, name: str) -> None:
        """Count one request named `name` that is a round trip of its own: `request` and
        `round_trip` in one call (a memory store counts every call so: `counted`)."""
        self._requests[name] += 1
        self._round_trips += 1

    def snapshot(self) -> Sent:
        total = Counter(self._requests)
        for counter in self._threads:
            while True:
                try:  # its thread may add a name while we copy: copy again
                    total.update(dict(counter))
                    break
                except RuntimeError:
                    continue
        return Sent(dict(total), self._round_trips)

    def __repr__(self) -> str:
        return f"Traffic({sum(self._requests.values())} requests, {self._round_trips} round trips)"


@runtime_checkable
class Counted(Protocol):
    """A durable (or a store) that counts what it sends into `traffic`."""

    @property
    def traffic(self) -> Traffic: ...


def counted(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """A method of a store with no server (the memory stores), counted into its `traffic` as
    one request and one round trip a call: with no server, a call is a round trip."""
    name = method.__qualname__

    def counting(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        traffic: Traffic = self.traffic
        traffic.lone_request(name)
        return method(self, *args, **kwargs)

    counting.__name__, counting.__qualname__ = method.__name__, name
    counting.__doc__ = method.__doc__
    return counting
