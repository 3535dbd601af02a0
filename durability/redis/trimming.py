"""`trimming`: the task that keeps a stream scheduler's stream short, run beside the worker.

`XACK` takes an entry off the pending list but leaves it in the stream, so without this task
the stream grows by one entry per wakeup forever (and `cancel`, which scans it, slows with it).
`RedisStreamScheduler.trim` does one safe trim; this loop repeats it.

A trim that fails (a dropped connection, a server that refuses the command, a key of the wrong
type) is logged and tried again next round. It never raises out of the loop, because the
worker it runs beside must not stop over housekeeping.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from durability.interfaces import positive
from durability.redis.stream import RedisStreamScheduler

__all__ = ["trimming"]

logger = logging.getLogger(__name__)


async def trimming(
    scheduler: RedisStreamScheduler, every: timedelta = timedelta(seconds=10)
) -> None:
    """Trim `scheduler`'s stream every `every` until cancelled."""
    positive("every", every)
    while True:
        try:
            removed = await scheduler.trim()
        except Exception:
            logger.warning(
                "trimming %s failed; trying again in %s", scheduler.ready, every, exc_info=True
            )
        else:
            if removed:
                logger.debug("trimmed %d entries from %s", removed, scheduler.ready)
        await asyncio.sleep(every.total_seconds())
