"""`wakeups`: is a wakeup that lands while a pass is running ever lost?

The race every queue design must win: a workflow's pass is running when someone sends it new
input (`arrive`), so the pass cannot see it; the wakeup that input brings must survive the pass
answering for its own delivery, or the input waits forever. A client pokes each workflow at a
random moment inside its first pass, early or in its last milliseconds (`measure`); the wakeup
is *lost* when no later pass ever recorded seeing the poke. A rival, which has no inbox, is
raced by enqueueing the job again under its own key for it (`KEYS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Any

from experiments.catalogue import KEYS
from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "wakeups"
TITLE = "wakeups raced against running passes"
#: How many backends a quick run measures at once (its figures are counts of races and losses); a
#: full run takes one at a time.
SIDE_BY_SIDE = 3
HOLD_MS = 20.0
#: How long a rival's pokes may take to run before the ones that did not count as lost.
PATIENCE_S = 12.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    # `wake=False` pokes without a wakeup: every one must then count as lost (the tests'
    # control that a lost wakeup would be seen).
    return [{"races": 40 if quick else 300, "wake": True}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A worker runs `bodies.poked` (its first pass holds for `HOLD_MS` in a step, then waits
    for the poke), and a client pokes each workflow at a random moment inside that first pass:
    just after it started, or a few milliseconds before it ends, when the pass is about to
    answer for its delivery. A wakeup is lost when no later pass ever recorded `saw`."""
    if backend.rival is not None:
        return await _rival(lab, backend, params)
    races, wake = int(params["races"]), bool(params.get("wake", True))
    chance = random.Random(11)
    prefix = f"wk{uuid.uuid4().hex[:6]}"
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place) as worker,
        contextlib.AsyncExitStack() as stack,
    ):
        client = worker
        if not backend.in_process:
            client = await stack.enter_async_context(
                lab.agent(backend, place, role="client", housekeeping=False))
        await worker.request("work", body="poked", pool=16)
        for i in range(races):
            workflow = f"{prefix}-{i}"
            await client.request("arrive", workflow=workflow, key="order",
                                 value={"hold_ms": HOLD_MS})
            await worker.event("holding", workflow, timeout=30)
            # Early in the pass, or in its last milliseconds, when done is near.
            delay = chance.choice([0.0, 0.002, (HOLD_MS - 3) / 1000, (HOLD_MS - 1) / 1000])
            await asyncio.sleep(delay)
            await client.request("arrive", workflow=workflow, key="poke:1", value=i, wake=wake)
        await asyncio.sleep(2.0)  # a poll or two, and the pass the poke brings
        lost = 0
        for i in range(races):
            keys = (await client.request("records", workflow=f"{prefix}-{i}"))["keys"]
            if "saw" not in keys:
                lost += 1
        await worker.request("stop")
    return [
        {"metric": "races", "value": races, "unit": "count"},
        {"metric": "lost", "value": lost, "unit": "count"},
    ]


async def _rival(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The same race on a rival: a job holding for `HOLD_MS`, enqueued again mid-run.

    A rival has no inbox: the way to wake a workflow's job is to enqueue it again, and the way
    to keep one job per workflow is the rival's own key for it (`KEYS`: saq's job key, arq's
    job id, pgqueuer's dedupe key, procrastinate's queueing lock). So its race is a second
    enqueue under that key while the first job runs; it is lost when the job is not run again
    after it (`refused` counts the enqueues the rival turned down). streaq has no key per
    job: each enqueue is a job of its own, run beside the first."""
    assert backend.rival is not None
    races, once = int(params["races"]), KEYS[backend.rival][0]
    chance = random.Random(11)
    prefix = f"wk{uuid.uuid4().hex[:6]}"
    refused = 0
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place) as worker,
        lab.agent(backend, place, role="client", housekeeping=False) as client,
    ):
        await worker.request("work", body="holder", hold_ms=HOLD_MS, live=True, pool=16)
        for i in range(races):
            workflow = f"{prefix}-{i}"
            await client.request("enqueue", workflow=workflow, once=once)
            await worker.event("holding", workflow, timeout=30)
            delay = chance.choice([0.0, 0.002, (HOLD_MS - 3) / 1000, (HOLD_MS - 1) / 1000])
            await asyncio.sleep(delay)
            poked = await client.request("enqueue", workflow=workflow, once=once)
            refused += not poked["accepted"]
        keys = [f"{prefix}-{i}" for i in range(races)]
        # Until every poke it took has run, or long past a fallback poll (procrastinate's is
        # 5 s): a job that starts late is late, not lost.
        deadline = asyncio.get_running_loop().time() + PATIENCE_S
        while True:
            runs = (await worker.request("mark"))["runs"]
            again = sum(1 for key in keys if runs.get(key, 0) >= 2)
            if again >= races - refused or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        await worker.request("stop")
    lost = races - again
    return [
        {"metric": "races", "value": races, "unit": "count"},
        {"metric": "lost", "value": lost, "unit": "count"},
        {"metric": "refused", "value": refused, "unit": "count"},
    ]
