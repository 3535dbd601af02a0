"""`scaling`: how each cost grows as the work grows, and where it stays flat.

Two dimensions, measured inside one agent process against the store (no worker running):
*checkpoint size* (a workflow holding ever more records or inbox entries, `RECORDS`: the cost
of the read every pass pays for it) and *queue depth* (ever more workflows queued or sleeping,
`DEPTHS`: the cost of taking one and answering for it, of a timer's `wake_due` with nothing
due, and of `cancel`).

Each size is timed over many repetitions; its summary gives the median per size and the slope
of log(cost) against log(size): about 0 is flat, about 1 is linear in the size.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from durability import Durable
from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "scaling"
TITLE = "cost against checkpoint size and queue depth"

#: How many records (or inbox entries) a workflow's checkpoint holds, size by size (a full
#: run's; a quick run's are `QUICK_RECORDS`).
RECORDS = (10, 100, 1_000, 10_000)
#: How many workflows are queued (or sleeping), depth by depth (a quick run: `QUICK_DEPTHS`).
DEPTHS = (1_000, 10_000, 100_000)
QUICK_RECORDS = (10, 100, 1_000)
QUICK_DEPTHS = (100, 1_000)
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"repeats": "timed repetitions per size"}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    records = QUICK_RECORDS if quick else RECORDS
    depths = QUICK_DEPTHS if quick else DEPTHS
    found = [{"dimension": d, "size": n} for d in ("records", "inbox") for n in records]
    found += [{"dimension": d, "size": n} for d in ("ready", "sleeping", "cancel")
              for n in depths]
    return found


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    # A checkpoint's size is its own, so the checkpoint dimensions share one store; a queue's
    # depth is the whole queue's, so each depth gets a queue of its own (a stream keeps every
    # entry a deeper run left behind, and cancel reads them all).
    keep = params["dimension"] in ("records", "inbox")
    async with (
        lab.place(backend, keep=keep) as (place, _),
        lab.agent(backend, place, housekeeping=False, keep=keep) as agent,
    ):
        reply = await agent.request(
            "probe", module=__name__, timeout=1800,
            args={**params, "repeats": params.get("repeats") or (20 if lab.quick else 150)},
        )
    rows: list[dict[str, Any]] = reply["rows"]
    return rows


# -- inside the agent --------------------------------------------------------------------------


async def _gather(count: int, make: Any, concurrency: int = 64) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await make(i)

    await asyncio.gather(*(one(i) for i in range(count)))


async def probe(durable: Durable, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Build the workload `args` names in the store, then time its operation."""
    dimension, size, repeats = str(args["dimension"]), int(args["size"]), int(args["repeats"])
    tag = uuid.uuid4().hex[:6]
    if dimension in ("records", "inbox"):
        return await _checkpoint(durable, dimension, size, repeats, tag)
    return await _queue(durable, dimension, size, repeats, tag)


async def _checkpoint(durable: Durable, dimension: str, size: int, repeats: int, tag: str
                      ) -> list[dict[str, Any]]:
    """The read every pass pays for a checkpoint of `size`: `claim` (which brings the
    checkpoint on the stores that can) plus `load` where it did not, plus `release`."""
    checkpointer = durable.checkpointer
    workflow = f"sc{tag}"
    budget, alive = timedelta(minutes=5), timedelta(seconds=30)
    if dimension == "records":
        holder = await checkpointer.claim(workflow, budget, alive)
        assert holder is not None
        await _gather(size, lambda i: checkpointer.record(holder, f"step:{i}", {"n": i}))
        await checkpointer.release(holder)
    else:
        await _gather(size, lambda i: checkpointer.append(workflow, {"message": i}))
    rows = []
    for repeat in range(repeats):
        began = time.perf_counter()
        holder = await checkpointer.claim(workflow, budget, alive)
        assert holder is not None
        records = holder.records
        if records is None:
            records = await checkpointer.load(workflow)
        await checkpointer.release(holder)
        elapsed = (time.perf_counter() - began) * 1000
        if len(records) != size:
            raise AssertionError(f"the checkpoint holds {len(records)} records, not {size}")
        rows.append({"operation": "claim_load_release", "repetition": repeat,
                     "metric": "cost", "value": elapsed, "unit": "ms"})
    await durable.delete(workflow)
    return rows


async def _queue(durable: Durable, dimension: str, size: int, repeats: int, tag: str
                 ) -> list[dict[str, Any]]:
    """At a queue `size` deep: taking one and answering for it (`take` + `finish`, then
    `make_ready` again so the depth holds), a timer's `wake_due` with nothing due, or `cancel`
    (which the stream must find by reading its entries: the documents' "cancelling costs a
    scan")."""
    scheduler = durable.scheduler
    prefix = f"sq{tag}"
    await _gather(size, lambda i: scheduler.make_ready(f"{prefix}-{i}"))
    far = datetime.now(UTC) + timedelta(days=1)
    if dimension == "sleeping":
        async def sleep_one(i: int) -> None:
            delivery = await scheduler.next_ready(timedelta(seconds=5))
            if delivery is not None:
                await scheduler.wake_at(delivery, far + timedelta(seconds=i % 1000))
                await scheduler.done(delivery)

        await _gather(size, sleep_one)
    rows = []
    budget, alive = timedelta(minutes=5), timedelta(seconds=30)
    for repeat in range(repeats):
        began = time.perf_counter()
        if dimension == "ready":
            taken = await durable.take(timedelta(seconds=5), budget, alive)
            assert taken is not None and taken.holder is not None
            await durable.finish(taken.holder, taken.delivery)
            elapsed = (time.perf_counter() - began) * 1000
            await scheduler.make_ready(taken.delivery.workflow)  # the depth holds
            operation = "take_finish"
        elif dimension == "cancel":
            workflow = f"{prefix}-{(repeat * 7919) % size}"
            gone = await scheduler.cancel(workflow)
            elapsed = (time.perf_counter() - began) * 1000
            if gone < 1:
                raise AssertionError(f"cancel found nothing queued for {workflow}")
            await scheduler.make_ready(workflow)  # the depth holds
            operation = "cancel"
        else:
            await scheduler.wake_due(datetime.now(UTC))
            elapsed = (time.perf_counter() - began) * 1000
            operation = "wake_due"
        rows.append({"operation": operation, "repetition": repeat, "metric": "cost",
                     "value": elapsed, "unit": "ms"})
    return rows
