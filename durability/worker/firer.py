"""The firer: the worker's loop that starts due schedules (`durability.schedules`).

Idle, it costs one indexed read (`Timetable.earliest`) a `sweep` at most, however many
schedules there are: it sleeps until the earliest firing, and a schedule added or changed in
this process wakes it at once, and one added by another process too where the store can say
so (`Announced`: SQLite's doorbell, Postgres's `NOTIFY`, Redis's pub/sub, to which the firer
holds a subscription while it runs: `Subscribing`).
"""

from __future__ import annotations

import contextlib
import logging

from durability.cancelling import stop_if_cancelled
from durability.schedules.firing import fire_due, listening
from durability.schedules.timetable import Announced, Subscribing, Timetable
from durability.waits import set_within
from durability.worker.crew import Crew

__all__ = ["firer"]

log = logging.getLogger("durability.worker")


async def firer(crew: Crew, timetable: Timetable) -> None:
    announced = timetable if isinstance(timetable, Announced) else None
    held = timetable.subscribed() if isinstance(timetable, Subscribing) else None
    async with held or contextlib.nullcontext():
        await _fire(crew, timetable, announced)


async def _fire(crew: Crew, timetable: Timetable, announced: Announced | None) -> None:
    with listening(timetable) as bell:
        while True:
            bell.clear()
            wait = crew.sweep.total_seconds()
            heard = bell
            if announced is not None:  # taken before the look, so no change falls between
                try:
                    heard = await announced.changes()
                except Exception:
                    log.warning("listening for schedule changes failed", exc_info=True)
            try:
                # The look first: an idle worker asks one indexed read and fires nothing.
                earliest = await timetable.earliest()
                if earliest is not None and earliest <= crew.clock():
                    started = await fire_due(crew.durable, timetable, crew.clock())
                    if started:
                        log.info("started %d scheduled workflow(s): %s", len(started), started)
                    earliest = await timetable.earliest()
            except Exception:
                log.exception("firing schedules failed; trying again next tick")
                wait = crew.tick.total_seconds()
            else:
                if earliest is not None:
                    wait = min(wait, (earliest - crew.clock()).total_seconds())
            stop_if_cancelled()
            if wait > 0 and not bell.is_set():
                await set_within(heard, wait)
