"""What an operator reads: `overview` (how many workflows stand in each state, the queue's
backlog, one page of workflows) and `detail` (one workflow: status, every record with its
time, its failures and attempts). Both are values with a `to_json`, so the page and the
command show the same thing, as a table or as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from durability.checks import check_page, check_state, check_workflow
from durability.failures import FAILURE, RETRY, Failure, since_retry
from durability.interfaces import Durable, Tallied, Waiting
from durability.status import Page, Status, listing, status
from durability.values import Backlog, Written

__all__ = ["PAGE", "Detail", "Missing", "Overview", "detail", "overview"]

#: How many workflows a page lists unless asked for another number.
PAGE = 50


class Missing(LookupError):
    """No workflow has that id in this store: no record, no standing."""

    def __init__(self, workflow: str) -> None:
        super().__init__(f"no workflow {workflow!r} in this store")
        self.workflow = workflow


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


@dataclass(frozen=True, slots=True)
class Overview:
    """Counts by stored state (of ids under `prefix`), the queue's backlog (None where the store
    cannot say), and one page of workflows (in `state`, under `prefix`, past `after`)."""

    counts: Mapping[str, int]
    backlog: Backlog | None
    page: Page
    state: str | None = None
    prefix: str | None = None
    after: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "counts": dict(self.counts),
            "queue": None
            if self.backlog is None
            else {"ready": self.backlog.ready, "oldest_seconds": _seconds(self.backlog.oldest)},
            "state": self.state,
            "prefix": self.prefix,
            "after": self.after,
            "workflows": [status.to_json() for status in self.page.statuses],
            "next": self.page.after,
        }


async def overview(
    durable: Durable,
    *,
    state: str | None = None,
    prefix: str | None = None,
    after: str | None = None,
    limit: int = PAGE,
) -> Overview:
    """One look at the store for the overview: a tally, a backlog and a page (three reads)."""
    check_state(state)
    check_page(prefix or None, limit, after)
    checkpointer = durable.checkpointer
    counts = await checkpointer.tally(prefix or None) if isinstance(checkpointer, Tallied) else {}
    scheduler = durable.scheduler
    backlog = await scheduler.backlog() if isinstance(scheduler, Waiting) else None
    page = await listing(checkpointer, state=state, prefix=prefix or None, limit=limit, after=after)
    return Overview(counts, backlog, page, state, prefix or None, after)


@dataclass(frozen=True, slots=True)
class Detail:
    """One workflow: its `status` (which says whether a live pass holds its claim), every record
    in order with the store's time of it (`history`), every failed attempt recorded (`failures`,
    oldest first), how many explicit retries, and the attempts since the last one."""

    status: Status
    history: list[Written]
    failures: list[Failure] = field(default_factory=list)
    retries: int = 0
    attempts: int = 0

    @property
    def held(self) -> bool:
        """Whether a live pass holds the workflow's claim now."""
        return self.status.state == "running"

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status.to_json(),
            "held": self.held,
            "retries": self.retries,
            "attempts_since_retry": self.attempts,
            "failures": [failure.to_record() for failure in self.failures],
            "records": [
                {"key": written.key, "at": written.at.isoformat(), "value": written.value}
                for written in self.history
            ],
        }


async def detail(durable: Durable, workflow: str) -> Detail:
    """`workflow` in detail (two reads: its status, its history); `Missing` if the store holds
    nothing of it."""
    check_workflow(workflow)
    found = await status(durable.checkpointer, workflow)
    history = await durable.checkpointer.history(workflow)
    if found.state == "unknown" and not history:
        raise Missing(workflow)
    records = {written.key: written.value for written in history}
    failures = [
        Failure.from_record(written.value)
        for written in history
        if written.key.startswith(FAILURE)
    ]
    retries = sum(1 for written in history if written.key.startswith(RETRY))
    return Detail(found, history, failures, retries, len(since_retry(records)))

