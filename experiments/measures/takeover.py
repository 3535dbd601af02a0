"""`takeover`: a worker process is SIGKILLed holding a workflow; how long until another
worker process starts a pass on it?

Two worker processes share the queue; a workflow whose step holds the pass is submitted
(`bodies.holder`), and whichever worker starts it is killed, mid-step or just after a write
(`PHASES`). The time from the kill to the other worker's "started" event is the takeover; the
design's bound is about lease + tick (`tick_for`). Every trial meets survivors waiting for
work, as a real takeover does: the victim is replaced by a fresh worker, the workflow deleted,
and the workers left idle a moment before the next submission. A rival is killed the same way,
at its own settings (`RECOVERIES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from experiments.catalogue import PHASES, RECOVERIES, tick_for
from experiments.harness.backends import Backend, Place
from experiments.harness.lab import Agent, AgentFailed, Lab

NAME = "takeover"
TITLE = "takeover of a killed worker's workflow"
#: How many backends a quick run measures at once (its figures are lease-bound waits of a second or
#: less, which other work beside it moves by milliseconds); a full run takes one at a time.
SIDE_BY_SIDE = 3

LEASES_S = (0.5, 1.0, 2.0, 5.0)
#: How long the workers wait, idle, before each trial's submission.
SETTLE_S = 0.7
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"trials": "kills per configuration",
            "patience_s": "how long to wait for a rival's takeover before calling it never"}
#: The lease a rival's settings are made from: 1 s, the smallest saq's whole seconds allow.
RIVAL_LEASE_S = 1.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.rival is not None:
        return [{"lease_s": RIVAL_LEASE_S, "phase": "mid-job", "recovery": recovery}
                for recovery in RECOVERIES[backend.rival]]
    leases = (0.5,) if quick else LEASES_S
    return [{"lease_s": lease, "phase": phase} for lease in leases for phase in PHASES]


def trials(quick: bool) -> int:
    return 1 if quick else 5


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    if backend.rival is not None:
        return await _rival(lab, backend, params)
    lease, phase = float(params["lease_s"]), str(params["phase"])
    tick = tick_for(lease)
    rows: list[dict[str, Any]] = []
    async with lab.place(backend, keep=True) as (place, _), contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            lab.agent(backend, place, role="client", housekeeping=False,
                      lease_ms=lease * 1000))
        workers = [await _worker(lab, backend, place, lease, tick, stack) for _ in range(2)]
        await asyncio.sleep(SETTLE_S)
        for trial in range(int(params.get("trials") or trials(lab.quick))):
            workflow = f"to{uuid.uuid4().hex[:8]}"
            await client.request("submit", prefix=workflow, rate=1000.0, count=1, seed=trial,
                                 value={"phase": phase, "hold_s": lease * 4 + 10})
            victim = await _first_holding(workers, f"{workflow}-0", patience=30 + lease * 3)
            if phase == "mid-step":
                await asyncio.sleep(1.5 * tick)
            killed = victim.kill()
            survivor = next(w for w in workers if w is not victim)
            started = await survivor.event("started", f"{workflow}-0", timeout=lease * 6 + 20)
            rows.append({"trial": trial, "tick_s": tick, "metric": "takeover",
                         "value": (started["at"] - killed) / 1e9, "unit": "s"})
            # Each trial starts from a quiet queue, as a real takeover does: the survivor's
            # pass of this workflow is refused at its next write, its queue entry is gone,
            # and the workers have settled into waiting before the next submission.
            await client.request("delete", workflow=f"{workflow}-0")
            workers = [survivor, await _worker(lab, backend, place, lease, tick, stack)]
            await asyncio.sleep(SETTLE_S)
        rows.append({"tick_s": tick, "metric": "lease_plus_tick", "value": lease + tick,
                     "unit": "s"})
    return rows


async def _rival(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A rival's takeover: the same kill, the same two workers, at its own settings for the
    question (one of its `RECOVERIES`, made from `RIVAL_LEASE_S`), killed a tick and a half
    into a job (`mid-job`). A rival that does not run the job again within `patience_s` gives
    a `not_taken_over` row instead, and its summary says why. Its job cannot be deleted under
    the survivor as our workflow is, so a job holds only a little past the kill (`hold`), and
    the survivor finishes it before the next trial."""
    lease, recovery = float(params["lease_s"]), str(params["recovery"])
    tick, hold = tick_for(lease), 2 * lease
    patience = float(params.get("patience_s") or lease * 6 + 20)
    options = f"takeover={recovery}"
    rows: list[dict[str, Any]] = []
    async with lab.place(backend, keep=True) as (place, _), contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            lab.agent(backend, place, role="client", housekeeping=False,
                      lease_ms=lease * 1000, options=options))
        workers = [await _worker(lab, backend, place, lease, tick, stack, options, hold)
                   for _ in range(2)]
        await asyncio.sleep(SETTLE_S)
        for trial in range(int(params.get("trials") or trials(lab.quick))):
            job = f"to{uuid.uuid4().hex[:8]}"
            await client.request("submit", prefix=job, rate=1000.0, count=1, seed=trial)
            victim = await _first_holding(workers, f"{job}-0", patience=30 + lease * 3)
            await asyncio.sleep(1.5 * tick)
            killed = victim.kill()
            survivor = next(w for w in workers if w is not victim)
            try:
                started = await survivor.event("started", f"{job}-0", timeout=patience)
            except (AgentFailed, TimeoutError):  # the wait ran out: not taken over
                rows.append({"trial": trial, "tick_s": tick, "metric": "not_taken_over",
                             "value": patience, "unit": "s"})
            else:
                rows.append({"trial": trial, "tick_s": tick, "metric": "takeover",
                             "value": (started["at"] - killed) / 1e9, "unit": "s"})
                await asyncio.sleep(hold)  # the survivor's run of it ends
            workers = [survivor,
                       await _worker(lab, backend, place, lease, tick, stack, options, hold)]
            await asyncio.sleep(SETTLE_S)
    return rows


async def _worker(lab: Lab, backend: Backend, place: Place, lease: float, tick: float,
                  stack: contextlib.AsyncExitStack, options: str = "",
                  hold: float | None = None) -> Agent:
    agent: Agent = await stack.enter_async_context(
        lab.agent(backend, place, lease_ms=lease * 1000, options=options))
    await agent.request("work", body="holder", live=True, tick_ms=tick * 1000,
                        hold_ms=None if hold is None else hold * 1000)
    return agent


async def _first_holding(workers: list[Agent], workflow: str, patience: float) -> Agent:
    """The worker that starts holding `workflow` first."""
    waits = {asyncio.create_task(w.event("holding", workflow, patience)): w for w in workers}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(BaseException):
            await task
    winner = next(iter(done))
    winner.result()  # raises if it timed out
    return waits[winner]
