"""The memory scheduler's ready wakeups in the order they are taken, and the limits they wait on.

`Ready` is a heap by (priority, order made): strict priority costs a log a wakeup, not a scan;
priority 0 waits in a plain line beside it (in order as made), so a queue without priorities
pays no log. A wakeup whose limit is full is parked under its key, out of line, so those behind
it are still taken and a full limit costs no take a look; `unpark` puts them back.

`Limits` counts, per key, the deliveries held with a live lease (a concurrency limit) and when
each delivery was taken (a rate limit), and says when a full one may next have room.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from durability.values import Limit

__all__ = ["Held", "Limits", "Ready", "Wakeup"]


@dataclass(slots=True)
class Wakeup:
    """A ready wakeup: its priority and limit as merged so far, and its place among equals."""

    priority: int
    limit: Limit | None
    order: int


@dataclass(slots=True)
class Held:
    """A delivery a worker holds. `quiet_from` is when its silence began: the take, or the last
    extension moved forward by what it asked for beyond a lease (so `extend(d, lease)` is a sign
    of life now, and `reclaiming(idle)` takes it once `idle` has passed since)."""

    workflow: str
    quiet_from: datetime
    priority: int = 0
    limit: Limit | None = None


def merged(held: Limit | None, given: Limit | None) -> Limit | None:
    """The merge rule's limit: the pending wakeup keeps its own, or takes the new one."""
    return held if held is not None else given


# A heap entry: (-priority, order, workflow). It is current while the wakeup it names has that
# priority and order; a merge that raises the priority pushes a fresh entry and strands the old.
_Entry = tuple[int, int, str]


class Ready:
    """The ready wakeups, one per workflow, taken highest priority first, then oldest."""

    __slots__ = ("_heap", "_line", "_order", "_parked", "_wakeups")

    def __init__(self) -> None:
        self._wakeups: dict[str, Wakeup] = {}
        self._heap: list[_Entry] = []
        # Entries made at priority 0, in the order made: sorted as the heap would pop them.
        self._line: deque[_Entry] = deque()
        self._parked: dict[str, list[_Entry]] = {}
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._wakeups)

    def __contains__(self, workflow: str) -> bool:
        return workflow in self._wakeups

    def add(self, workflow: str, priority: int, limit: Limit | None) -> None:
        """Make `workflow` ready, or merge into its pending wakeup: the higher priority of the
        two, its own limit (this one's if it had none), and its place among equals."""
        held = self._wakeups.get(workflow)
        if held is None:
            order = next(self._order)
            self._wakeups[workflow] = Wakeup(priority, limit, order)
            if priority == 0:
                self._line.append((0, order, workflow))
            else:
                heapq.heappush(self._heap, (-priority, order, workflow))
            return
        held.limit = merged(held.limit, limit)
        if priority > held.priority:
            held.priority = priority
            heapq.heappush(self._heap, (-priority, held.order, workflow))

    def remove(self, workflow: str) -> bool:
        """Forget `workflow`'s wakeup (its heap entries lapse where they lie)."""
        return self._wakeups.pop(workflow, None) is not None

    def pick(
        self, fits: Callable[[Limit, datetime], bool], now: datetime
    ) -> tuple[str, Wakeup] | None:
        """Take the first wakeup whose limit `fits` at `now`, parking every one before it that
        does not fit under its limit's key; None if none fits."""
        heap, line, wakeups = self._heap, self._line, self._wakeups
        while heap or line:
            # The smaller of the two heads: the line holds priority 0 in order, the heap the rest
            # (and whatever was parked and put back).
            if heap and (not line or heap[0] < line[0]):
                entry = heapq.heappop(heap)
            else:
                entry = line.popleft()
            # An entry is stale if its workflow's wakeup was taken, removed or moved since.
            wakeup = wakeups.get(entry[2])
            if wakeup is None or wakeup.order != entry[1] or -wakeup.priority != entry[0]:
                continue
            if wakeup.limit is not None and not fits(wakeup.limit, now):
                self._parked.setdefault(wakeup.limit.key, []).append(entry)
                continue
            del wakeups[entry[2]]
            return entry[2], wakeup
        return None

    @property
    def parked(self) -> list[str]:
        """The keys with wakeups parked under them."""
        return list(self._parked)

    def unpark(self, key: str) -> bool:
        """Put the wakeups parked under `key` back in line; whether there were any."""
        entries = self._parked.pop(key, None)
        if not entries:
            return False
        for entry in entries:
            heapq.heappush(self._heap, entry)
        return True


class Limits:
    """What each limit key holds: its live holders, and its takes in the current window."""

    __slots__ = ("_holders", "_lease", "_spans", "_taken")

    def __init__(self, lease: timedelta) -> None:
        self._lease = lease
        self._holders: dict[str, dict[str, Held]] = {}
        self._taken: dict[str, deque[datetime]] = {}
        self._spans: dict[str, timedelta] = {}  # the longest window any wakeup gave a key

    def _live(self, key: str, now: datetime, mine: str | None) -> list[Held]:
        holders = self._holders.get(key, {})
        lease = self._lease
        return [h for r, h in holders.items() if r != mine and now < h.quiet_from + lease]

    def _window(self, limit: Limit, now: datetime) -> list[datetime]:
        assert limit.per is not None
        taken = self._taken.get(limit.key, deque())
        span = self._spans.get(limit.key, limit.per)
        while taken and taken[0] <= now - span:  # older than any window asks of this key
            taken.popleft()
        return [at for at in taken if at > now - limit.per]

    def room(self, limit: Limit, now: datetime, mine: str | None = None) -> bool:
        """Whether one more delivery under `limit` may be taken now (`mine`: a receipt whose
        own slot is not to be counted, a delivery taken over)."""
        if limit.per is None:
            return len(self._live(limit.key, now, mine)) < limit.at_most
        return len(self._window(limit, now)) < limit.at_most

    def opens(self, limit: Limit, now: datetime) -> datetime:
        """When a full `limit` may next have room with no answer from a holder: the earliest
        lapse of a live holder, or the moment enough takes leave the window."""
        if limit.per is None:
            lapses = [h.quiet_from + self._lease for h in self._live(limit.key, now, None)]
            return min(lapses, default=now)
        window = self._window(limit, now)
        over = len(window) - limit.at_most
        return now if over < 0 else window[over] + limit.per

    def hold(self, receipt: str, held: Held, now: datetime) -> None:
        """Count a delivery just taken (or taken over) against its limit."""
        limit = held.limit
        if limit is None:
            return
        if limit.per is None:
            self._holders.setdefault(limit.key, {})[receipt] = held
            return
        self._taken.setdefault(limit.key, deque()).append(now)
        span = self._spans.get(limit.key)
        if span is None or limit.per > span:
            self._spans[limit.key] = limit.per

    def release(self, receipt: str, held: Held) -> bool:
        """Stop counting a held delivery (answered, cancelled, taken over); whether it held a
        slot a parked wakeup may now take. A rate's takes stay in their window."""
        limit = held.limit
        if limit is None or limit.per is not None:
            return False
        holders = self._holders.get(limit.key)
        if holders is None or holders.pop(receipt, None) is None:
            return False
        if not holders:
            del self._holders[limit.key]
        return True
