"""The API's schedules: `/schedules`, over `durability.schedules.Schedules` of the API's store.

The API keeps schedules and never fires one: a worker over the same store does (each firing
once, however many run). Every route's store call goes through the API's `store` (bounded,
503 when the store is away); bad input is refused before the store with 422, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from durability.schedules import Schedule, Schedules
from integration.document import (
    SCHEDULE_NAME,
    ScheduleIn,
    ScheduleList,
    ScheduleOut,
    Unscheduled,
    body_of,
    responses,
)

__all__ = ["add_schedule_routes", "schedule_view"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Store = Callable[[Coroutine[Any, Any, T]], Awaitable[T]]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def schedule_view(schedule: Schedule) -> dict[str, object]:
    """A schedule as the API shows it (`ScheduleOut`)."""
    every = schedule.cadence.every
    return {
        "name": schedule.name,
        "body": schedule.body,
        "input": schedule.input,
        "cron": schedule.cadence.cron,
        "every_s": None if every is None else every.total_seconds(),
        "zone": schedule.cadence.zone,
        "missed": schedule.missed,
        "bound": schedule.bound,
        "paused": schedule.paused,
        "next": _iso(schedule.next),
        "fired": _iso(schedule.fired),
    }


def add_schedule_routes(
    app: FastAPI,
    schedules: Schedules,
    store: Store[Any],
    parse: Callable[[Request, type[ScheduleIn]], Awaitable[ScheduleIn]],
    refused: Callable[[int, object], Exception],
) -> None:
    """Serve `/schedules` on `app`.

    | request | does | answers |
    |---|---|---|
    | `POST /schedules` | `schedules.add(...)` | 201 added or changed, 200 kept as it stood |
    | `GET /schedules` | `schedules.list()` | every schedule |
    | `GET /schedules/{name}` | `schedules.get(name)` | the schedule, or 404 |
    | `POST /schedules/{name}/pause`, `/resume` | `pause`, `resume` | the schedule, or 404 |
    | `DELETE /schedules/{name}` | `schedules.remove(name)` | 200, or 404 |
    """

    async def found(call: Coroutine[Any, Any, Schedule]) -> Response:
        try:
            schedule = await store(call)
        except KeyError as error:
            raise refused(404, str(error.args[0])) from None
        return JSONResponse(schedule_view(schedule))

    @app.post(
        "/schedules",
        status_code=201,
        responses=responses(
            {
                201: {"model": ScheduleOut, "description": "the schedule, added or changed"},
                200: {"model": ScheduleOut, "description": "the same schedule, kept as it stood"},
            },
            (400, 413, 422),
        ),
        openapi_extra=body_of(ScheduleIn),
    )
    async def add(request: Request) -> Response:
        """Keep a schedule: a workflow of `body` with `input` on each firing."""
        given = await parse(request, ScheduleIn)
        every = None if given.every_s is None else timedelta(seconds=given.every_s)
        before = await store(schedules.get(given.name))
        adding = schedules.add(
            given.name, given.body, given.input, cron=given.cron, every=every, zone=given.zone,
            missed=given.missed, bound=given.bound,
        )
        try:
            schedule = await store(adding)
        except ValueError as error:  # an input the store's codec cannot keep, say
            raise refused(422, [{"field": "body", "problem": str(error)}]) from None
        return JSONResponse(schedule_view(schedule), status_code=200 if before == schedule else 201)

    @app.get("/schedules", responses=responses(
        {200: {"model": ScheduleList, "description": "every schedule, by name"}}, ()))
    async def listed() -> Response:
        """Every schedule, by name."""
        kept = await store(schedules.list())
        return JSONResponse({"schedules": [schedule_view(s) for s in kept]})

    @app.get("/schedules/{name}", responses=responses(
        {200: {"model": ScheduleOut, "description": "the schedule"}}, (404,)))
    async def one(name: str) -> Response:
        """One schedule as stored: its next firing and its last."""
        schedule = await store(schedules.get(name)) if _named(name) else None
        if schedule is None:
            raise refused(404, f"no schedule is called {name!r}")
        return JSONResponse(schedule_view(schedule))

    @app.post("/schedules/{name}/pause", responses=responses(
        {200: {"model": ScheduleOut, "description": "the schedule, paused"}}, (404,)))
    async def pause(name: str) -> Response:
        """Stop firing it until it is resumed."""
        if not _named(name):
            raise refused(404, f"no schedule is called {name!r}")
        return await found(schedules.pause(name))

    @app.post("/schedules/{name}/resume", responses=responses(
        {200: {"model": ScheduleOut, "description": "the schedule, firing again"}}, (404,)))
    async def resume(name: str) -> Response:
        """Fire it again from its next firing after now."""
        if not _named(name):
            raise refused(404, f"no schedule is called {name!r}")
        return await found(schedules.resume(name))

    @app.delete("/schedules/{name}", responses=responses(
        {200: {"model": Unscheduled, "description": "the schedule, forgotten"}}, (404,)))
    async def remove(name: str) -> Response:
        """Forget a schedule (the workflows it started stay)."""
        if not _named(name) or not await store(schedules.remove(name)):
            raise refused(404, f"no schedule is called {name!r}")
        return JSONResponse({"name": name, "removed": True})


def _named(name: str) -> bool:
    """Whether `name` could be a schedule's (anything else is simply not found)."""
    return re.fullmatch(SCHEDULE_NAME.strip("^$"), name) is not None
