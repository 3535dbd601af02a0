"""`policies` asked of the rivals that have the feature (`ARMS`): saq's, arq's, streaq's and
procrastinate's cron (`schedule`), pgqueuer's, streaq's and procrastinate's priorities
(`priority`), pgqueuer's per-entrypoint concurrency limit and procrastinate's lock, a limit of
one (`limit`). What a rival lacks is said, arm by arm, as skipped (`LACKS`), not left out.

The same questions as ours, through each rival's agent (`experiments.harness.rivals`), its
settings asked for by options (`cron=on`, `priorities=on`, `priority=N`, `limit=N`), so its
rows read beside ours in every table. A cron fires at most once a second on all four, so
theirs runs every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from experiments.harness.backends import Backend, Place
from experiments.harness.lab import Agent, Lab, Skipped
from experiments.measures.policy_rows import (
    BACKLOG_HOLD_MS,
    LIMIT_HOLD_MS,
    POOL,
    URGENT,
    firing_rows,
    limit_rows,
    sizes,
)

#: How long anything the measure waits for may take before the configuration is a failure.
PATIENCE_S = 300.0

#: How long the limit arm waits for a rival's jobs before it counts what ran: procrastinate
#: fetches a job whose lock was held only at its next poll (5 s by default), so a queue under
#: one lock runs a job a poll, and a full wait would take minutes and say no more.
LIMIT_PATIENCE_S = 20.0

#: A rival's cron at its finest: every second.
EVERY_MS = 1000.0

#: The rivals and the arms each has the feature for.
ARMS: dict[str, tuple[str, ...]] = {
    "pgqueuer": ("priority", "limit"), "saq": ("schedule",), "arq": ("schedule",),
    "streaq": ("schedule", "priority"), "procrastinate": ("schedule", "priority", "limit")}
#: The limits a rival can set, where not every one (procrastinate's `lock` is one at a time).
LIMITS: dict[str, tuple[int, ...]] = {"procrastinate": (1, 0)}
#: Why a rival has no answer to an arm, from its documentation, said in the run's skipped.
LACKS: dict[str, dict[str, str]] = {
    "pgqueuer": {
        "rate": "pgqueuer 1.6.0 has no rate limit: its entrypoint takes a concurrency_limit "
                "only (0.26 had a requests_per_second; 1.6.0 dropped it)"},
    "streaq": {
        "limit": "streaq has no concurrency limit shared across workers: a worker's "
                 "`concurrency` bounds its own process only",
        "rate": "streaq has no rate limit"},
    "procrastinate": {
        "rate": "procrastinate has no rate limit: its `lock` bounds the jobs running at once, "
                "not the starts in a period"},
}
#: Why a rival cannot set a limit it lacks (`LIMITS`).
NO_LIMIT = {"procrastinate": "procrastinate's `lock` runs the jobs sharing it one at a time: "
                             "it has no concurrency limit above 1"}


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    arm, rival = str(params["arm"]), str(backend.rival)
    if arm in LACKS.get(rival, {}):
        raise Skipped(LACKS[rival][arm])
    if arm == "limit" and int(params["at_most"]) not in LIMITS.get(rival, (params["at_most"],)):
        raise Skipped(NO_LIMIT[rival])
    async with lab.place(backend) as (place, _):
        if arm == "schedule":
            return await _schedule(lab, backend, place, params)
        if arm == "priority":
            return await _priority(lab, backend, place, params)
        if arm == "limit":
            return await _limit(lab, backend, place, params)
    raise ValueError(f"{backend.name} has no {arm} arm")


@contextlib.asynccontextmanager
async def _agents(lab: Lab, backend: Backend, place: Place, roles: list[tuple[str, str]]
                  ) -> AsyncIterator[list[Agent]]:
    """An agent for each (role, options), started together, stopped when the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        settled = await asyncio.gather(
            *(stack.enter_async_context(lab.agent(backend, place, role=role, options=options))
              for role, options in roles), return_exceptions=True)
        for outcome in settled:
            if isinstance(outcome, BaseException):
                raise outcome
        yield [a for a in settled if isinstance(a, Agent)]


async def _until(workers: list[Agent], count: int, patience: float = PATIENCE_S) -> None:
    """Wait until the workers' outcomes add up to `count` (asking each every 0.1 s;
    `TimeoutError` after `patience` seconds)."""
    async with asyncio.timeout(patience):
        while True:
            marks = await asyncio.gather(*(w.request("mark") for w in workers))
            if sum(m["outcomes"] for m in marks) >= count:
                return
            await asyncio.sleep(0.1)


async def _schedule(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """`processes` workers each running the rival's every-second cron for `firings` seconds:
    per firing its delay to the job's start, how many times it ran, and the firings missed."""
    processes = int(params["processes"])
    firings = min(20, max(4, int(params.get("firings") or sizes(lab.quick)["firings"]) // 4))
    async with _agents(lab, backend, place, [("worker", "cron=on")] * processes) as workers:
        await asyncio.gather(*(w.request("work", pool=8) for w in workers))
        await asyncio.sleep(firings * EVERY_MS / 1000 + 0.5)
        stopped = [await w.request("stop") for w in workers]
    ledger: list[dict[str, Any]] = []
    for said in stopped:
        ledger += [{"kind": "ran", "workflow": key, "firing": at} for key, at in said["fired"]]
        ledger += [{"kind": "started", "workflow": key, "at": at}
                   for key, at in said["started"].items()]
    return firing_rows(ledger, "cron-", EVERY_MS)


async def _priority(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """Our priority arm on the rival: a backlog at its default priority, one worker of pool
    4 draining it (each job holding `BACKLOG_HOLD_MS`), urgent jobs on an open loop at 20 a
    second at priority `URGENT` (or the default, `none`)."""
    ordering = str(params["ordering"])
    size = sizes(lab.quick)
    backlog = int(params.get("backlog") or size["backlog"])
    urgent = size["urgent"]
    prefix = f"pr{uuid.uuid4().hex[:6]}"
    # Every agent knows priorities are in use (streaq reads a stream a level: its worker and
    # clients must agree on the levels); only the urgent one's submitter raises its own.
    levels = "priorities=on"
    raised = f"{levels}&priority={URGENT}" if ordering == "priority" else levels
    roles = [("worker", levels), ("client", levels), ("client", raised)]
    async with _agents(lab, backend, place, roles) as (worker, loader, submitter):
        await loader.request("preload", prefix=f"{prefix}b", count=backlog, concurrency=32,
                             timeout=PATIENCE_S)
        await worker.request("work", body="holder", hold_ms=BACKLOG_HOLD_MS, pool=4)
        await asyncio.sleep(0.2)
        sent = await submitter.request("submit", prefix=f"{prefix}u", rate=20.0, count=urgent,
                                       seed=34, timeout=PATIENCE_S)
        await _until([worker], backlog + urgent)
        started: dict[str, int] = (await worker.request("stop"))["started"]
    rows: list[dict[str, Any]] = []
    never = 0
    for i, submitted in enumerate(sent["submitted"]):
        begun = started.get(f"{prefix}u-{i}")
        if begun is None:
            never += 1
            continue
        rows.append({"submission": i, "metric": "urgent_start",
                     "value": (begun - submitted) / 1e6, "unit": "ms"})
    last = max((started[f"{prefix}u-{i}"] for i in range(urgent)
                if f"{prefix}u-{i}" in started), default=0)
    behind = sum(1 for w, at in started.items() if w.startswith(f"{prefix}b-") and at > last)
    return [*rows, {"metric": "never_started", "value": never, "unit": "count"},
            {"metric": "urgent", "value": urgent, "unit": "count"},
            {"metric": "backlog", "value": backlog, "unit": "count"},
            {"metric": "backlog_after_last_urgent", "value": behind, "unit": "count"}]


async def _limit(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                 ) -> list[dict[str, Any]]:
    """Our limit arm on the rival: `workflows` jobs of one entrypoint limited to `at_most`
    (0: none), each holding `LIMIT_HOLD_MS`, worked off by `processes` workers of pool
    `POOL` for up to `LIMIT_PATIENCE_S`; the most held at once counted from the jobs' own
    spans, and those not started by then."""
    at_most, processes = int(params["at_most"]), int(params["processes"])
    # At most a quick run's count: pgqueuer's limited dequeue runs a few a second at a limit
    # of 1, so a full run's would take minutes a configuration and say no more.
    count = int(params.get("workflows") or sizes(True)["workflows"])
    # The client too: procrastinate's lock is set on each job as it is deferred.
    limit = f"limit={at_most}" if at_most else ""
    roles = [("worker", limit)] * processes + [("client", limit)]
    async with _agents(lab, backend, place, roles) as agents:
        workers, client = agents[:processes], agents[-1]
        await client.request("preload", prefix=f"lim{uuid.uuid4().hex[:6]}", count=count,
                             concurrency=32, timeout=PATIENCE_S)
        await asyncio.gather(*(w.request("work", body="holder", hold_ms=LIMIT_HOLD_MS,
                                         pool=POOL) for w in workers))
        with contextlib.suppress(TimeoutError):  # counted as never started
            await _until(workers, count, LIMIT_PATIENCE_S)
        stopped = [await w.request("stop") for w in workers]
    held = [{"enter": began, "exit": ended} for said in stopped
            for _, began, ended in said["spans"]]
    return [*limit_rows(held, at_most, LIMIT_HOLD_MS),
            {"metric": "never_started", "value": count - len(held), "unit": "count"}]
