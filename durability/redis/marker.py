"""`Marker`: how a Redis scheduler notices that the server lost its data.

A Redis restarted without persistence, a `FLUSHALL`, a failover to a replica that had not
caught up: each leaves an empty data set that nothing marks as such, so every workflow queued,
asleep or held is silently gone and a resubmitted order that was paid is taken for a new one.
So a random marker value is written if missing and read again only in looks the scheduler
makes anyway (see `Marker`): the check costs no round trip.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from durability.redis.namespace import key, text

__all__ = ["Marker", "OnWipe", "Watched", "Wiped", "lost_group"]

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Wiped:
    """A wipe a scheduler noticed: of which namespace, when (this host's clock), the how-many-th
    this scheduler has seen, and what noticed it (`prepare`, `wake_due`, `lost group`)."""

    namespace: str
    at: datetime
    wipes: int
    noticed_by: str


OnWipe = Callable[[Wiped], None]


class Marker:
    """One namespace's marker key and what this scheduler knows of it.

    `prepare` writes `{<ns>}:marker`, a random value, if it is missing, and the scheduler
    remembers what it found. The value is read again in looks the scheduler makes anyway (the
    timer's `wake_due`, once per sweep; the set's empty take, while its reader waits on the
    doorbell; the recovery from a lost consumer group). A marker gone or changed means the
    data set it lived in was wiped: one ERROR line, `wipes` and `last_wipe` move, and
    `on_wipe` hears of it. Whichever process puts the marker back first, every scheduler that
    knew the old value reports the wipe, once.

    Blind spots: a wipe while no process of the namespace ran (the first `prepare` after it
    finds no marker, as a first start does), and, on a cluster, a wipe of shards other than
    the one holding the queue's slot. Deleting the marker key by hand reads as a wipe.
    """

    __slots__ = ("_counts", "_known", "key", "last_wipe", "namespace", "on_wipe", "wipes")

    def __init__(
        self,
        namespace: str,
        on_wipe: OnWipe | None = None,
        *,
        tag: str | None = None,
        counts: Marker | None = None,
    ) -> None:
        self.namespace = namespace
        #: `{<tag>}:marker` (the tag is the namespace but for a shard of a sharded queue): on
        #: the queue's slot, so the queue's own scripts may read it.
        self.key = key(namespace if tag is None else tag, "marker")
        # A shard's marker counts its wipes on the sharded queue's (`counts`), so one queue
        # shows one count and one `on_wipe`, whichever shard was wiped.
        self._counts = counts
        #: How many wipes this scheduler noticed, and when it noticed the last (None: never).
        self.wipes = 0
        self.last_wipe: datetime | None = None
        #: Called with a `Wiped` on each one noticed (assignable; its errors are logged).
        self.on_wipe = on_wipe
        self._known: str | None = None

    def count_on(self, counts: Marker) -> None:
        """Count the wipes this marker notices on `counts` (a sharded queue's own marker)."""
        self._counts = counts

    @staticmethod
    def fresh() -> str:
        """A value for a script to write if it finds no marker."""
        return uuid.uuid4().hex

    def saw(self, found: object, noticed_by: str) -> bool:
        """Note the marker's value as a script found (or put back) it; True if that shows a
        wipe since the last look. The first look only learns it."""
        value = text(found)
        known, self._known = self._known, value
        if known is None or known == value:
            return False
        counts = self if self._counts is None else self._counts
        counts.wipes += 1
        counts.last_wipe = datetime.now(UTC)
        log.error(
            "Redis lost the data of namespace %r (its marker %s went, noticed by %s): every "
            "workflow queued, asleep or held there is gone, and a workflow submitted again now "
            "runs from its first step. Wipes seen by this scheduler: %d",
            self.namespace,
            self.key,
            noticed_by,
            counts.wipes,
        )
        if counts.on_wipe is not None:
            try:
                counts.on_wipe(Wiped(self.namespace, counts.last_wipe, counts.wipes, noticed_by))
            except Exception:
                log.exception("on_wipe failed for namespace %r", self.namespace)
        return True


class Watched:
    """The wipe watch and the recovery from a lost consumer group, shared by both Redis
    schedulers: the marker's counts shown as their own (`wipes`, `last_wipe`), and one way to
    prepare the queue, look at the marker (`verify`), and send a call again after Redis
    answered that the group is gone (`regrouped`). Each scheduler says only how its queue is
    prepared (`put_back`)."""

    __slots__ = ()

    marker: Marker

    @property
    def wipes(self) -> int:
        """How many wipes of the server's data this scheduler noticed (see marker.py)."""
        return self.marker.wipes

    @property
    def last_wipe(self) -> datetime | None:
        """When this scheduler noticed the last wipe (this host's clock), or None."""
        return self.marker.last_wipe

    async def put_back(self) -> tuple[object, bool]:
        """Create what the queue needs where missing (its script, one round trip) and the
        marker if it is gone; return the marker's value as found or written, and whether a
        consumer group had to be made."""
        raise NotImplementedError

    async def prepare(self) -> None:
        """Create what the queue needs where missing (the stream and its group: the group
        starts at the stream's beginning, so wakeups appended before any worker prepared are
        still delivered; a ZSET needs none) and the marker. Safe to call again at any time."""
        await self.look_at_marker("prepare")

    async def verify(self) -> bool:
        """Look at the marker now (one round trip, preparing what is missing): True if the
        server's data was wiped since this scheduler last looked. For a process that runs no
        timer (an API), at whatever low rate it likes."""
        return await self.look_at_marker("verify")

    async def regroup(self) -> None:
        """Prepare again after Redis answered that the group is gone (see `lost_group`)."""
        await self.look_at_marker("lost group")

    async def regrouped(self, send: Callable[..., Awaitable[T]], /, *args: Any, **kw: Any) -> T:
        """`await send(*args, **kw)`; if Redis answers that the group is gone, `regroup` and
        send once more. The normal path is the one call: nothing is asked before it. (The
        set has no group, so for it this is the call alone.)"""
        try:
            return await send(*args, **kw)
        except ResponseError as error:
            if not lost_group(error):
                raise
        await self.regroup()
        return await send(*args, **kw)

    async def look_at_marker(self, noticed_by: str) -> bool:
        """Prepare (`put_back`) and note the marker found: True if it shows a wipe."""
        found, created = await self.put_back()
        wiped = self.marker.saw(found, noticed_by)
        if created and not wiped and noticed_by == "lost group":
            log.warning(
                "the consumer group of namespace %r was gone; it is there again",
                self.marker.namespace,
            )
        return wiped


def lost_group(error: BaseException) -> bool:
    """Whether Redis answered that the stream or its consumer group is gone: `NOGROUP` to a
    command (or a script) that needs the group, or `UNBLOCKED ... no longer exists` to a read
    that was blocked when the key went."""
    if not isinstance(error, ResponseError):
        return False
    said = str(error)
    return "NOGROUP" in said or (said.startswith("UNBLOCKED") and "no longer exists" in said)
