"""`RedisSetScheduler`: the whole queue as one ZSET scored by when each workflow is visible.

One key per queue, `{ns}:schedule` (the namespace is the cluster hash tag). A score is Unix
milliseconds of the server's clock:

| state | score |
|---|---|
| ready | when it became ready (at or before now) |
| asleep | its deadline (in the future, whole ms) |
| held by a pass | taken-at + lease, plus a fraction: the receipt |

What that buys: being due and being ready are the same score, so there is no timer to move
sleepers, no pending list, nothing to reclaim (a lapsed lease just makes the score visible
again) and nothing to trim: a workflow is one member however many wakeups it gets. What it
costs: there is no blocking read, so `next_ready` polls every `poll`, and that interval is a
floor under how fast a submission starts.

The one subtlety is the lost wakeup. A workflow is one member, so a wakeup landing mid-pass can
only be written on top of the member the pass holds. The score a pass took is its receipt and
`done` removes the member only while the score still equals it; every other writer writes a
different score. Receipts have a fraction (the taking script's microsecond, so two takes of one
member never hand out the same receipt, even within a millisecond) and every other score is
whole, so `make_ready` can tell a held member from a waiting one and always steps off a receipt.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from durability.interfaces import Delivery, check_workflow, positive, to_ms
from durability.polling import beats
from durability.redis.lua import ScriptCall, script
from durability.redis.namespace import check_namespace, from_ms, key, ms, text

__all__ = ["RedisSetScheduler"]


class RedisSetScheduler:
    """A `Scheduler` over one Redis ZSET. Polls; see the module docstring for the trade."""

    def __init__(
        self,
        *,
        redis: Any,
        namespace: str = "durability",
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
    ) -> None:
        self.lease = positive("lease", lease)
        self.poll = positive("poll", poll)
        self.namespace = check_namespace(namespace)
        self.schedule = key(namespace, "schedule")
        self._redis = redis
        self._make_ready = script(redis, "set_make_ready")
        self._take = script(redis, "set_take")
        self._done = script(redis, "set_done")
        self._wake_at = script(redis, "set_wake_at")
        self._extend = script(redis, "set_extend")
        self._wake_due = script(redis, "set_wake_due")

    async def prepare(self) -> None:
        """Nothing to create: a ZSET exists once it has a member."""
        return None

    async def make_ready(self, workflow: str) -> None:
        await self._make_ready(keys=[self.schedule], args=[check_workflow(workflow)])

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take the longest-visible workflow, looking every `poll` (on a fixed beat: see
        `durability.polling`) for at most `within`, and once more when `within` is up."""
        positive("within", within)
        lease = to_ms(self.lease)
        async for _ in beats(self.poll, within):
            taken = await self._take(keys=[self.schedule], args=[lease])
            if taken:
                return Delivery(text(taken[0]), text(taken[1]))
        return None

    async def done(self, delivery: Delivery) -> None:
        """Remove the workflow unless something rescheduled it after the pass took it."""
        await self._done(
            keys=[self.schedule], args=[check_workflow(delivery.workflow), delivery.receipt]
        )

    # What `RedisDurable` runs in one script after a checkpoint write (see durable.py).

    @property
    def redis(self) -> Any:
        """The client this queue's commands run on."""
        return self._redis

    def _wakeup_call(self, workflow: str) -> ScriptCall:
        return ScriptCall("set_make_ready", (self.schedule,), (check_workflow(workflow),))

    def _done_call(self, delivery: Delivery) -> ScriptCall:
        workflow = check_workflow(delivery.workflow)
        return ScriptCall("set_done", (self.schedule,), (workflow, delivery.receipt))

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        """Score the workflow `when`; keeps an earlier wakeup that landed mid-pass. Declines if
        the member is gone (cancelled)."""
        woken = await self._wake_at(
            keys=[self.schedule],
            args=[check_workflow(delivery.workflow), delivery.receipt, ms(when)],
        )
        return bool(woken)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """The earliest deadline still sleeping after `now` (the server's clock if None).

        Nothing moves: a sleeper becomes ready when the clock reaches its score. One round
        trip, so the worker's timer can sleep until the answer instead of ticking blind. A
        `now` ahead of the server's clock pulls the sleepers due by then forward to be ready.
        """
        moment = "" if now is None else str(ms(now))
        earliest = await self._wake_due(keys=[self.schedule], args=[moment])
        return None if earliest is None else from_ms(earliest)

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Always None: a held member whose lease lapsed is visible again to `next_ready`."""
        positive("idle", idle)
        return None

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        """Hide the workflow `within` more from now (never less than it already was); the
        receipt changes with the score. None if the receipt is no longer the score."""
        positive("within", within)
        receipt = await self._extend(
            keys=[self.schedule],
            args=[check_workflow(delivery.workflow), delivery.receipt, to_ms(within)],
        )
        return None if receipt is None else Delivery(delivery.workflow, text(receipt))

    async def cancel(self, workflow: str) -> int:
        return int(await self._redis.zrem(self.schedule, check_workflow(workflow)))
