"""Bodies by name: `start` records which body a workflow runs (and its input) in one supplied
record, and `by_name` is the body a worker runs for a mapping of them, dispatching on it.

Not to undo: the name is one first-writer-wins record (`STARTED`), so two starts of one id
agree or the second is refused by name, and a worker that runs several bodies needs nothing
but the checkpoint it already loaded to choose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from durability.checks import check_key, check_limit, check_priority, check_workflow
from durability.children import STARTED
from durability.interfaces import Durable
from durability.stepwise import Run
from durability.values import Limit
from durability.wakeups import arrive

__all__ = [
    "STARTED",
    "Body",
    "UnknownBody",
    "by_name",
    "check_body",
    "start",
    "started",
]

T = TypeVar("T")

Body = Callable[[Run], Awaitable[object]]


def check_body(name: str) -> str:
    """A body name is a step key's shape: 1 to 256 characters of valid Unicode, no NUL."""
    try:
        return check_key(name)
    except ValueError as error:
        raise ValueError(f"body name {name!r}: {error}") from None


class UnknownBody(LookupError):
    """A workflow was started as a body the worker that took it does not run."""

    def __init__(self, workflow: str, body: str, known: list[str]) -> None:
        super().__init__(
            f"workflow {workflow!r} was started as body {body!r}, which this worker does not"
            f" run (it runs: {', '.join(known) or 'none'})"
        )
        self.workflow = workflow
        self.body = body


def started(records: Mapping[str, object]) -> Mapping[str, object] | None:
    """The `STARTED` record among `records`, if the workflow was started by name."""
    record = records.get(STARTED)
    return record if isinstance(record, Mapping) else None


async def start(
    durable: Durable,
    body: str,
    value: object,
    workflow: str,
    *,
    priority: int = 0,
    limit: Limit | None = None,
    **more: object,
) -> bool:
    """Start `workflow` as the body named `body` with `value` as its input (`run.input`):
    True if this call started it, False if it was started before as the same body (a no-op
    but a wakeup); `ValueError` naming both if it was started as another. Its wakeup has
    `priority` and `limit` (`Scheduler.make_ready`), which later wakeups do not inherit: a
    limit every pass of a body should count against is given to every start of it."""
    check_workflow(workflow)
    check_body(body)
    check_priority(priority)
    check_limit(limit)
    record = {"body": body, "value": value, **more}
    recorded = await arrive(durable, workflow, STARTED, record, priority, limit)
    if recorded.first:
        return True
    held = recorded.value
    was = held.get("body") if isinstance(held, Mapping) else None
    if was != body:
        raise ValueError(f"workflow {workflow!r} was started as body {was!r}, not {body!r}")
    return False


def by_name(bodies: Mapping[str, Body]) -> Body:
    """The body that runs, for each workflow, the one of `bodies` it was started as."""
    if not isinstance(bodies, Mapping) or not bodies:
        raise TypeError("bodies must be a non-empty mapping of body names to bodies")
    for name, body in bodies.items():
        check_body(name)
        if not callable(body):
            raise TypeError(f"body {name!r} is not callable: {body!r}")
    table = dict(bodies)

    async def dispatch(run: Run) -> object:
        record = started(run.records)
        name = None if record is None else record.get("body")
        body = table.get(name) if isinstance(name, str) else None
        if body is None:
            raise UnknownBody(run.workflow, str(name), sorted(table))
        return await body(run)

    return dispatch
