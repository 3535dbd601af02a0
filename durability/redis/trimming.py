"""The housekeeping tasks a Redis store runs beside a worker: `trimming` keeps a stream
scheduler's stream short, `sweeping` drops the standings of workflows whose checkpoints expired.

A trim or a sweep that fails (a dropped connection, a server that refuses the command, a key
of the wrong type) is logged and tried again next round. It never raises out of the loop,
because the worker it runs beside must not stop over housekeeping.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from durability.cancelling import pause
from durability.checks import positive
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.stream_scheduler import RedisStreamScheduler

__all__ = ["sweeping", "trimming"]

logger = logging.getLogger(__name__)


async def trimming(
    scheduler: RedisStreamScheduler, every: timedelta = timedelta(seconds=10)
) -> None:
    """Trim `scheduler`'s stream every `every` until cancelled.

    `XACK` takes an entry off the pending list but leaves it in the stream, so untrimmed the
    stream grows by one entry per wakeup forever (and `cancel`, which scans it, slows with it).
    `RedisStreamScheduler.trim` does one safe trim; a worker runs it itself after its passes
    end (`work`'s trimmer), and this loop repeats it on a fixed beat for a process that wants
    that."""
    positive("every", every)
    while True:
        try:
            removed = await scheduler.trim()
        except Exception:
            logger.warning(
                "trimming %s failed; trying again in %s", scheduler.namespace, every, exc_info=True
            )
        else:
            if removed:
                logger.debug("trimmed %d entries from %s", removed, scheduler.namespace)
        await pause(every.total_seconds())


#: How long a walk over the standings pauses between steps, so it never hogs the server.
STEP = timedelta(milliseconds=200)


async def sweeping(
    checkpointer: RedisCheckpointer,
    every: timedelta = timedelta(minutes=1),
    step: timedelta = STEP,
) -> None:
    """Walk `checkpointer`'s standings, dropping expired ones, every `every` until cancelled.

    A checkpoint expires (its `ttl`) while its standing, on the namespace's slot, would stay
    for good: a service finishing a million workflows a day would keep a million more
    standings each day. Each walk goes over the namespace's standings a step at a time
    (`RedisCheckpointer.sweep`, an `HSCAN` of one hash, `step` apart) and, once round, waits
    `every` before the next walk."""
    positive("every", every)
    positive("step", step)
    dropped = 0
    while True:
        try:
            gone, round_ = await checkpointer.sweep()
        except Exception:
            logger.warning(
                "sweeping the standings of %s failed; trying again in %s",
                checkpointer.namespace,
                every,
                exc_info=True,
            )
            await pause(every.total_seconds())
            continue
        dropped += gone
        if not round_:
            await pause(step.total_seconds())
            continue
        if dropped:
            logger.info(
                "dropped %d standings of expired workflows from %s", dropped, checkpointer.namespace
            )
        dropped = 0
        await pause(every.total_seconds())
