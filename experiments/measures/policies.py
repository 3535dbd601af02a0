"""`policies`: what schedules, priorities, concurrency and rate limits cost each design.

Five arms (`ARMS`), each a question with an answer that must hold: a schedule's firings, each
started once however many worker processes race (`schedule`); urgent work behind a backlog,
with a priority and without (`priority`); a limit's overshoot, which must be 0, and its
throughput against no limit (`limit`); a rate limit's overshoot and its rate against the one
allowed (`rate`); and the common path, none of them (`common`). An arm whose store lacks the
feature is skipped (`Skipped`), never measured as something else. The agents run `probe`
(below), so a worker's bodies and the measure's ledger share a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Any

from durability import Completed, Durable, Event, Run, as_dict, as_int, work
from experiments.harness.backends import Backend, Place
from experiments.harness.lab import Agent, Lab, Skipped
from experiments.harness.protocol import open_loop, schedule
from experiments.measures import policies_rivals
from experiments.measures.policy_rows import (
    BACKLOG_HOLD_MS,
    LIMIT_HOLD_MS,
    LOW,
    POOL,
    RATE_PATIENCE,
    RATE_PER_MS,
    URGENT,
    firing_rows,
    limit_rows,
    rate_rows,
    sizes,
)

NAME = "policies"
TITLE = ("schedules fired once, urgent work behind a backlog, a concurrency and a rate limit's "
         "overshoot and cost")
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"firings": "firings per schedule configuration",
            "backlog": "low-priority workflows queued ahead of the urgent ones",
            "urgent": "urgent workflows submitted behind the backlog",
            "workflows": "limited workflows per limit configuration",
            "common": "workflows preloaded for the common path's throughput",
            "windows": "a rate limit's windows of work queued (at_most each)"}
ARMS = ("schedule", "priority", "limit", "rate", "common")
#: What picks configurations rather than changing them (`commands.overrides`): `--set arm=rate`
#: runs the rate arm alone, and with `--merge` replaces only its rows.
SELECTORS = ("arm",)
#: The schedule's interval (ours): short, so a run sees many firings.
EVERY_MS = 100.0
#: The limits (0: none, the baseline each limit's throughput is set against).
LIMITS = (1, 4, 16, 0)
#: The rate limits: at most this many starts a `RATE_PER_MS` (a few seconds a configuration).
RATES = (10, 100)
#: How long anything the measure waits for may take before the configuration is a failure.
PATIENCE_S = 300.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    # A quick run's grid is the corners: one process and four, the smallest limit and the
    # largest beside none, at two processes (where a limit is shared across processes).
    processes = (1,) if backend.in_process else (1, 4) if quick else (1, 2, 3, 4)
    limited = (1,) if backend.in_process else (2,) if quick else (1, 2, 4)
    bounds: tuple[int, ...] = (1, 16, 0) if quick else LIMITS
    arms: tuple[str, ...] = ARMS
    lacking: list[dict[str, Any]] = []
    if backend.rival is not None:
        arms = policies_rivals.ARMS.get(backend.rival, ())
        # What a rival lacks is a configuration of its own (an arm, or a limit it cannot
        # set), which its measure says is skipped, and why: never silently left out.
        lacking = [{"arm": arm} for arm in policies_rivals.LACKS.get(backend.rival, {})]
        allowed = policies_rivals.LIMITS.get(backend.rival, bounds)
        if "limit" in arms:
            lacking += [{"arm": "limit", "at_most": m} for m in bounds if m not in allowed]
        bounds = tuple(m for m in bounds if m in allowed)
    found: list[dict[str, Any]] = []
    if "schedule" in arms:
        found += [{"arm": "schedule", "processes": n} for n in processes]
    if "priority" in arms:
        found += [{"arm": "priority", "ordering": o} for o in ("priority", "none")]
    if "limit" in arms:
        found += [{"arm": "limit", "at_most": m, "processes": n} for m in bounds
                  for n in limited]
    if "rate" in arms:
        rated = (1,) if backend.in_process else (2,) if quick else (1, 2)
        found += [{"arm": "rate", "at_most": m, "processes": n}
                  for m in (RATES[:1] if quick else RATES) for n in rated]
    if "common" in arms:
        found += [{"arm": "common", "processes": 1}]
    return found + lacking


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    arm = str(params["arm"])
    if backend.rival is not None:
        return await policies_rivals.measure(lab, backend, params)
    if arm == "common":
        return await _common(lab, backend, params)
    async with lab.place(backend) as (place, _):
        if arm == "schedule":
            return await _schedule(lab, backend, place, params)
        if arm == "priority":
            return await _priority(lab, backend, place, params)
        if arm == "rate":
            return await _rate(lab, backend, place, params)
        return await _limit(lab, backend, place, params)


def _size(params: dict[str, Any], lab: Lab, name: str) -> int:
    return int(params.get(name) or sizes(lab.quick)[name])


@contextlib.asynccontextmanager
async def _crew(lab: Lab, backend: Backend, place: Place, processes: int
                ) -> AsyncIterator[tuple[list[Agent], Agent]]:
    """`processes` worker agents and a client agent (memory's one agent is both), started
    together and stopped when the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        starting = [lab.agent(backend, place) for _ in range(processes)]
        if not backend.in_process:
            starting.append(lab.agent(backend, place, role="client", housekeeping=False))
        settled = await asyncio.gather(*(stack.enter_async_context(a) for a in starting),
                                       return_exceptions=True)
        for outcome in settled:
            if isinstance(outcome, BaseException):
                raise outcome
        agents = [a for a in settled if isinstance(a, Agent)]
        yield agents[:processes], agents[-1]


async def _ask(agent: Agent, do: str, **args: Any) -> Any:
    reply = await agent.request("probe", module=__name__, timeout=PATIENCE_S,
                                args={"do": do, **args})
    return reply["rows"]


async def _needs(agent: Agent, feature: str, backend: Backend) -> None:
    (found,) = await _ask(agent, "supports")
    if not found[feature]:
        raise Skipped(f"{backend.name}: its store takes no {feature} yet")


async def _until(workers: list[Agent], prefix: str, count: int,
                 patience: float = PATIENCE_S) -> None:
    """Wait until the workers' completed workflows under `prefix` add up to `count`
    (`TimeoutError` after `patience` seconds)."""
    async with asyncio.timeout(patience):
        while True:
            counts = await asyncio.gather(*(_ask(w, "count", prefix=prefix) for w in workers))
            if sum(c[0] for c in counts) >= count:
                return
            await asyncio.sleep(0.1)


async def _collect(workers: list[Agent]) -> list[dict[str, Any]]:
    """Every worker stopped, and what each ledger holds, all together."""
    found: list[dict[str, Any]] = []
    for rows in await asyncio.gather(*(_ask(w, "collect") for w in workers)):
        found += rows
    return found


# -- the arms, from the lab's side -------------------------------------------------------------


async def _schedule(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """An interval schedule added, then `processes` workers racing to fire it for `firings`
    firings, then paused. Per firing: the delay from its time to its workflow's first pass
    start (any process), and how many times its body's step ran (more than once: a
    duplicate). Firings the schedule should have made between the first and the last seen
    and that never ran are `missing`."""
    processes, firings = int(params["processes"]), _size(params, lab, "firings")
    name = f"pulse{uuid.uuid4().hex[:6]}"
    async with _crew(lab, backend, place, processes) as (workers, client):
        await _ask(client, "add", name=name, every_ms=EVERY_MS)
        await asyncio.gather(*(_ask(w, "work", bodies="schedule") for w in workers))
        await asyncio.sleep(firings * EVERY_MS / 1000 + 0.05)
        await _ask(client, "pause", name=name)
        await asyncio.sleep(1.0)  # the last firings' passes end
        ledger = await _collect(workers)
    return firing_rows(ledger, name, EVERY_MS)


async def _priority(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """A backlog queued at the default priority, a worker draining it (each pass holding
    `BACKLOG_HOLD_MS`), then urgent workflows submitted on an open loop at 20 a second, with
    priority `URGENT` (`ordering=priority`) or the default (`none`). Per urgent one: submit
    to its first pass start; and how much of the backlog was left when the last started."""
    ordering = str(params["ordering"])
    backlog, urgent = _size(params, lab, "backlog"), _size(params, lab, "urgent")
    prefix = f"pr{uuid.uuid4().hex[:6]}"
    async with _crew(lab, backend, place, 1) as (workers, client):
        if ordering == "priority":
            await _needs(client, "priority", backend)
        await _ask(client, "load", prefix=f"{prefix}b", count=backlog,
                   value={"hold_ms": BACKLOG_HOLD_MS})
        await _ask(workers[0], "work", bodies="plain", pool=4)
        await asyncio.sleep(0.2)
        sent = await _ask(client, "submit", prefix=f"{prefix}u", count=urgent, rate=20.0,
                          priority=URGENT if ordering == "priority" else LOW)
        await _until(workers, prefix, backlog + urgent)
        ledger = await _collect(workers)
    starts = {e["workflow"]: int(e["at"]) for e in ledger if e["kind"] == "started"}
    rows: list[dict[str, Any]] = []
    never = 0
    for i, submitted in enumerate(sent):
        begun = starts.get(f"{prefix}u-{i}")
        if begun is None:
            never += 1
            continue
        rows.append({"submission": i, "metric": "urgent_start",
                     "value": (begun - int(submitted["at"])) / 1e6, "unit": "ms"})
    last = max((starts[f"{prefix}u-{i}"] for i in range(urgent)
                if f"{prefix}u-{i}" in starts), default=0)
    behind = sum(1 for w, at in starts.items() if w.startswith(f"{prefix}b-") and at > last)
    rows += [{"metric": "never_started", "value": never, "unit": "count"},
             {"metric": "urgent", "value": urgent, "unit": "count"},
             {"metric": "backlog", "value": backlog, "unit": "count"},
             {"metric": "backlog_after_last_urgent", "value": behind, "unit": "count"}]
    return rows


async def _limit(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                 ) -> list[dict[str, Any]]:
    """`workflows` queued naming one limit of `at_most` (0: none), each pass holding its slot
    for `LIMIT_HOLD_MS`, worked off by `processes` worker processes of pool `POOL`. The bodies
    note when each hold began and ended (one clock for every process: `time.monotonic_ns`,
    system-wide on Linux), so the most holders at once is counted from inside the bodies."""
    at_most, processes = int(params["at_most"]), int(params["processes"])
    count = _size(params, lab, "workflows")
    prefix = f"lim{uuid.uuid4().hex[:6]}"
    async with _crew(lab, backend, place, processes) as (workers, client):
        if at_most:
            await _needs(client, "limit", backend)
        await _ask(client, "load", prefix=prefix, count=count, value={"hold_ms": LIMIT_HOLD_MS},
                   limit=f"lab-{prefix}" if at_most else None, at_most=at_most)
        await asyncio.gather(*(_ask(w, "work", bodies="plain", pool=POOL) for w in workers))
        await _until(workers, prefix, count)
        ledger = await _collect(workers)
    return limit_rows([e for e in ledger if e["kind"] == "held"], at_most, LIMIT_HOLD_MS)


async def _rate(lab: Lab, backend: Backend, place: Place, params: dict[str, Any]
                ) -> list[dict[str, Any]]:
    """`windows` x `at_most` workflows queued naming one rate limit of `at_most` a
    `RATE_PER_MS`, worked off by `processes` worker processes of pool `POOL` (far more than
    the rate allows, so only the limit holds them back), for at most `RATE_PATIENCE` times
    the windows it should take. The bodies note when each began (one clock for every
    process), so the starts in a window are counted from inside the bodies."""
    at_most, processes = int(params["at_most"]), int(params["processes"])
    windows = _size(params, lab, "windows")
    count = at_most * windows
    prefix = f"rate{uuid.uuid4().hex[:6]}"
    cut: int | None = None
    async with _crew(lab, backend, place, processes) as (workers, client):
        await _needs(client, "limit", backend)
        await _ask(client, "load", prefix=prefix, count=count, value={"hold_ms": 0},
                   limit=f"lab-{prefix}", at_most=at_most, per_ms=RATE_PER_MS)
        await asyncio.gather(*(_ask(w, "work", bodies="plain", pool=POOL) for w in workers))
        try:
            await _until(workers, prefix, count,
                         patience=RATE_PATIENCE * windows * RATE_PER_MS / 1000)
        except TimeoutError:
            cut = time.monotonic_ns()  # the bodies' clock: what started by now is counted
        ledger = await _collect(workers)
    starts = [int(e["enter"]) for e in ledger if e["kind"] == "held"]
    return rate_rows(starts, at_most, RATE_PER_MS, count, cut)


async def _common(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The common path, none of the three: one-step throughput from one process on a full
    queue (`throughput.saturate`) and submit → first pass at 20 a second (`latency`), the
    same measures as those experiments', so a run's rows set against theirs are an A/B."""
    from experiments.measures import latency, throughput

    count = _size(params, lab, "common")
    async with lab.place(backend) as (place, _):
        window = await throughput.saturate(lab, backend, place, 1, count)
    rows = [{**r, "measure": "throughput"} for r in window.rows()
            if r["metric"] in ("passes_per_s", "passes", "worker_cpu_per_pass")]
    # 300 submissions in a full run (the latency experiment's headline takes 600): its A/B
    # is the one-sitting one, so this is a check of the path, not its measurement.
    timed = await latency.measure(lab, backend, {"rate": 20.0, "poll_ms": None,
                                                 "variant": "default",
                                                 "seconds": None if lab.quick else 15.0})
    rows += [{**r, "measure": "latency"} for r in timed
             if r["metric"] in ("submit_to_first_pass", "never_started")]
    return rows


# -- inside the agent --------------------------------------------------------------------------


@dataclass
class _Ledger:
    """What this process's worker saw: each workflow's first pass start (wall ns), each hold's
    span (monotonic ns), each firing's run (its time, wall ns), the completed workflows."""

    started: dict[str, int] = field(default_factory=dict)
    held: list[tuple[str, int, int]] = field(default_factory=list)
    ran: list[tuple[str, int]] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    worker: asyncio.Task[None] | None = None

    def observe(self, event: Event) -> None:
        if event.kind == "started":
            self.started.setdefault(event.workflow, int(event.at * 1e9))
        elif event.kind == "outcome" and isinstance(event.outcome, Completed):
            self.completed.append(event.workflow)


_ledger = _Ledger()


async def _plain(run: Run) -> object:
    """A workflow of the priority and limit arms: one step holding `hold_ms`."""
    order = await run.awaiting("order", as_dict)
    hold = float(str(order.get("hold_ms", 0))) / 1000
    workflow = run.workflow

    async def holding() -> int:
        enter = time.monotonic_ns()
        await asyncio.sleep(hold)
        _ledger.held.append((workflow, enter, time.monotonic_ns()))
        return 1

    return await run.step("hold", holding, as_int)


async def _fired(run: Run) -> object:
    """A schedule's workflow: one step noting its firing's time each time it runs."""
    from durability.schedules import fired

    firing = await fired(run)
    at = int(firing.at.astimezone(UTC).timestamp() * 1e9)

    def ran() -> int:
        _ledger.ran.append((run.workflow, at))
        return 1

    return await run.step("ran", ran, as_int)


def _takes(call: Callable[..., object], keyword: str) -> bool:
    """Whether `call` takes `keyword`: named in its signature, or passed on by a wrapper that
    takes any keyword (`**kwargs`: the memory stores' counting one), which the call it wraps
    then answers for."""
    try:
        found = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False
    return keyword in found or any(p.kind is p.VAR_KEYWORD for p in found.values())


def supports(durable: Durable) -> dict[str, bool]:
    """Whether `durable` takes each policy: the keyword on its `arrive` and on its
    scheduler's `make_ready` (a store's durable may pass on what its scheduler cannot take)."""
    return {feature: _takes(durable.arrive, feature)
            and _takes(durable.scheduler.make_ready, feature)
            for feature in ("priority", "limit")}


def _policy(args: dict[str, Any]) -> dict[str, Any]:
    """The keywords an arrival passes: only those not at their default (the seam's rule)."""
    from durability import Limit

    given: dict[str, Any] = {}
    if int(args.get("priority") or 0):
        given["priority"] = int(args["priority"])
    if args.get("limit"):
        per = float(args.get("per_ms") or 0)
        given["limit"] = Limit(str(args["limit"]), int(args["at_most"]),
                               per=timedelta(milliseconds=per) if per else None)
    return given


async def probe(durable: Durable, args: dict[str, Any]) -> list[Any]:
    """One request of the arms above, by `do`: `supports`, `add` / `pause` a schedule,
    `load` queued workflows, `submit` urgent ones on an open loop, `work`, `count` the
    completed under a prefix, and `collect` (stop the worker; the ledger, emptied)."""
    global _ledger
    do = str(args["do"])
    if do == "supports":
        return [supports(durable)]
    if do in ("add", "pause"):
        from durability.schedules import Schedules

        schedules = Schedules(durable)
        if do == "add":
            await schedules.add(str(args["name"]), "fired", {}, missed="all",
                                every=timedelta(milliseconds=float(args["every_ms"])))
        else:
            await schedules.pause(str(args["name"]))
        return []
    if do == "load":
        gate, policy = asyncio.Semaphore(64), _policy(args)

        async def one(i: int) -> None:
            async with gate:
                await durable.arrive(f"{args['prefix']}-{i}", "order",
                                     args.get("value", {}), **policy)

        await asyncio.gather(*(one(i) for i in range(int(args["count"]))))
        return []
    if do == "submit":
        count, policy = int(args["count"]), _policy(args)
        offsets = schedule(float(args["rate"]), count, 34)
        submitted, answered = [0] * count, [0] * count

        async def urgent(i: int) -> None:
            await durable.arrive(f"{args['prefix']}-{i}", "order", {"hold_ms": 0}, **policy)

        await open_loop(urgent, offsets, submitted, answered)
        return [{"at": at} for at in submitted]
    if do == "work":
        _ledger = _Ledger()
        bodies: Any = {"fired": _fired} if args["bodies"] == "schedule" else _plain
        _ledger.worker = asyncio.create_task(work(durable, bodies, observer=_ledger.observe,
                                                  pool=int(args.get("pool") or POOL)))
        return []
    if do == "count":
        prefix = str(args["prefix"])
        return [sum(1 for w in _ledger.completed if w.startswith(prefix))]
    if do == "collect":
        if _ledger.worker is not None:
            _ledger.worker.cancel()
            await asyncio.gather(_ledger.worker, return_exceptions=True)
        found, _ledger = _ledger, _Ledger()
        return ([{"kind": "started", "workflow": w, "at": at} for w, at in found.started.items()]
                + [{"kind": "held", "workflow": w, "enter": a, "exit": b}
                   for w, a, b in found.held]
                + [{"kind": "ran", "workflow": w, "firing": at} for w, at in found.ran])
    raise ValueError(f"no probe {do!r}")
