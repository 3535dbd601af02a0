"""A workflow's ending: the one record that says it is over, and the moves made over it.

A workflow ends once, completed, failed or cancelled: a record under an engine key, first writer
wins, so a cancel racing the pass's last write has exactly one winner (the pass writes under its
claim, fenced; a cancel writes and raises the fence in one step, `Concluding.conclude`). Not to
undo: it lives in the checkpoint, not the standing, because only the checkpoint is on the
workflow's own slot on a cluster, and a pass reads it with its claim. A retry opens a new epoch
(`ending_key` counts retries). `durability.worker.endings` is how one *pass* ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from durability.checks import ENGINE, check_workflow, positive
from durability.children import children_of, delivery, parent_of
from durability.failures import RETRY, Failure
from durability.interfaces import Checkpointer, Concluding, Durable, Ledger, Watching

__all__ = [
    "CANCELLED",
    "ENDING",
    "LOOK",
    "Ended",
    "ResultTimeout",
    "WorkflowCancelled",
    "WorkflowFailed",
    "cancel",
    "completion",
    "ended",
    "ending_key",
    "result",
]

#: Every ending record's key starts with this (an engine key: no step or input can forge one).
ENDING = f"{ENGINE}ended:"
#: How long `result` waits between looks at the store when the store cannot ring it (no wakeup
#: channel, or its channel is down); with a working channel it looks only when rung.
LOOK = timedelta(seconds=5)
#: How long a cancel's own claim (to write the cancelled standing) lasts if the caller dies.
_HOLD = timedelta(seconds=10)

EndState = Literal["completed", "failed", "cancelled"]


def ending_key(records: Mapping[str, object]) -> str:
    """The key of the current epoch's ending: one epoch per explicit retry recorded."""
    epoch = 0
    for key in records:  # a loop, not sum() over a generator: asked twice in every pass
        if key.startswith(RETRY):
            epoch += 1
    return _FIRST if epoch == 0 else f"{ENDING}{epoch:06d}"


_FIRST = f"{ENDING}{0:06d}"


@dataclass(frozen=True, slots=True)
class Ended:
    """How a workflow ended: `state`, the body's `value` when completed (`kept` False if the
    codec could not hold it), the `failure` when failed."""

    state: EndState
    value: object = None
    failure: Failure | None = None
    kept: bool = True

    def to_record(self) -> dict[str, object]:
        record: dict[str, object] = {"state": self.state}
        if self.state == "completed":
            record["value" if self.kept else "unkept"] = self.value
        if self.failure is not None:
            record["failure"] = self.failure.to_record()
        return record

    @classmethod
    def from_record(cls, record: object) -> Ended:
        if not isinstance(record, Mapping) or record.get("state") not in _ENDS:
            raise TypeError(f"not an ending record: {record!r}")
        failure = record.get("failure")
        return cls(
            record["state"],
            record.get("value", record.get("unkept")),
            None if failure is None else Failure.from_record(failure),
            "unkept" not in record,
        )


_ENDS = ("completed", "failed", "cancelled")

#: The record a cancel writes.
CANCELLED = Ended("cancelled").to_record()


def completion(value: object, kept: bool = True) -> dict[str, object]:
    """The record a completed pass writes: its value, or (`kept` False) the type of a value
    the store's codec refused, so `result` can say what it was. (`Ended.to_record`'s, made
    directly: one for every workflow that completes.)"""
    if kept:
        return {"state": "completed", "value": value}
    return {"state": "completed", "unkept": type(value).__name__}


def ended(records: Mapping[str, object]) -> Ended | None:
    """The current epoch's ending among `records`, or `None` while the workflow may run."""
    record = records.get(ending_key(records))
    return None if record is None else Ended.from_record(record)


class WorkflowFailed(Exception):
    """`result` of a workflow that failed: `failure` is what it recorded."""

    def __init__(self, workflow: str, failure: Failure | None) -> None:
        said = "" if failure is None else f": {failure.type}: {failure.message}"
        super().__init__(f"workflow {workflow!r} failed{said}")
        self.workflow = workflow
        self.failure = failure


class WorkflowCancelled(Exception):
    """`result` of a workflow that was cancelled."""

    def __init__(self, workflow: str) -> None:
        super().__init__(f"workflow {workflow!r} was cancelled")
        self.workflow = workflow


class ResultTimeout(TimeoutError):
    """`result` waited `within` and the workflow had not ended."""

    def __init__(self, workflow: str, within: timedelta) -> None:
        super().__init__(f"workflow {workflow!r} had not ended within {within}")
        self.workflow = workflow
        self.within = within


def outcome(workflow: str, ending: Ended) -> object:
    """The value of a completed ending; the failure or the cancel raised."""
    match ending.state:
        case "completed":
            if not ending.kept:
                raise TypeError(
                    f"workflow {workflow!r} completed with a {ending.value} its store's codec"
                    " could not keep, so there is no value to return"
                )
            return ending.value
        case "failed":
            raise WorkflowFailed(workflow, ending.failure)
        case "cancelled":
            raise WorkflowCancelled(workflow)


def concluding(checkpointer: Checkpointer) -> Concluding:
    if not isinstance(checkpointer, Concluding):
        raise TypeError(
            f"{type(checkpointer).__name__} cannot write an ending from outside a pass (it is"
            " not Concluding), so it cannot cancel a workflow"
        )
    return checkpointer


async def cancel(durable: Durable, workflow: str) -> bool:
    """Cancel `workflow`: True if this call ended it, False (changing nothing) if it had ended
    already (completed, failed, or cancelled before).

    In order: the ending written and the fence raised in one step (a running pass is refused at
    its next write or renewal, and stops at its next step), the queue's wakeups removed, then the
    standing written under a claim of its own (if a pass got in first, that pass finds the ending
    and writes it), then its children cancelled, and if it is a child, its parent told. Each
    later move is safe to lose: any pass that comes finds the ending and runs nothing."""
    check_workflow(workflow)
    checkpointer = durable.checkpointer
    records = await checkpointer.load(workflow)
    if ended(records) is not None:
        return False
    key = ending_key(records)
    if not (await concluding(checkpointer).conclude(workflow, key, CANCELLED)).first:
        return False
    await durable.scheduler.cancel(workflow)
    holder = await checkpointer.claim(workflow, _HOLD, _HOLD)
    if holder is not None:
        try:
            if isinstance(checkpointer, Ledger):
                await checkpointer.settle(holder, "cancelled", {})
        finally:
            await checkpointer.release(holder)
    for child in children_of(records):  # its children go with it (those that ended say False)
        await cancel(durable, child)
    parent = parent_of(records)
    if parent is not None:  # a child cancelled on its own: its parent hears it as its ending
        await durable.arrive(parent[0], parent[1], delivery(workflow, CANCELLED))
    return True


async def result(checkpointer: Checkpointer, workflow: str, within: timedelta) -> object:
    """The value `workflow` completed with, waiting up to `within` for it to end; raises
    `WorkflowFailed`, `WorkflowCancelled`, or `ResultTimeout`.

    Woken by the ending itself where the store can ring (`Watching`); it looks again every
    `LOOK` only while it cannot (no channel, or the channel failed)."""
    check_workflow(workflow)
    positive("within", within)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within.total_seconds()
    if not isinstance(checkpointer, Watching):
        return await _polled(checkpointer, workflow, within, deadline)
    async with checkpointer.watch(workflow) as bell:  # listening before the first look
        while True:
            ending = ended(await checkpointer.load(workflow))
            if ending is not None:
                return outcome(workflow, ending)
            left = deadline - loop.time()
            if left <= 0:
                raise ResultTimeout(workflow, within)
            try:
                await bell.wait(timedelta(seconds=left))
            except Exception:  # the channel is down: look now and then instead
                return await _polled(checkpointer, workflow, within, deadline)


async def _polled(
    checkpointer: Checkpointer, workflow: str, within: timedelta, deadline: float
) -> object:
    loop = asyncio.get_running_loop()
    while True:
        ending = ended(await checkpointer.load(workflow))
        if ending is not None:
            return outcome(workflow, ending)
        left = deadline - loop.time()
        if left <= 0:
            raise ResultTimeout(workflow, within)
        await asyncio.sleep(min(left, LOOK.total_seconds()))
