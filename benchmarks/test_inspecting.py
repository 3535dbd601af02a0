"""What `status` and `list` cost on a store holding many workflows, on every store.

| benchmark | what one round is |
|---|---|
| `status` | one workflow's status among `MANY` that have a standing |
| `list_a_page` | a page of 100 failed workflows from the middle of `MANY`, past a cursor |

Each store is filled once, for both (see `filled`). Each benchmark's `extra_info` has the round
trips and requests one call sent. These never assert a timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.conftest import Opened
from durability import claimed
from durability.interfaces import Ledger
from durability.status import Inspectable

BUDGET, ALIVE = timedelta(minutes=5), timedelta(seconds=30)
#: How many workflows the store holds while `status` and `list` are timed.
MANY = 100_000
PAGE = 100


@pytest.fixture(scope="module")
def filled(kept_store: Opened) -> Iterator[Opened]:
    """`kept_store` holding `MANY` workflows, one in two failed, the rest completed, filled
    through the public calls a worker makes (claim, `settle`, release), so filling takes a
    while: tens of seconds on Postgres and SQLite."""
    store = kept_store
    durable = store.durable
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Ledger) and isinstance(durable, Inspectable)
    failure = {"failure": {"step": "charge", "type": "LookupError", "message": "no such sku",
                           "traceback": "", "attempt": 1, "at": "2026-01-01T00:00:00+00:00",
                           "retry_at": None}}

    async def one(n: int) -> None:
        holder = await claimed(checkpointer, f"{store.tag}-w{n:06d}", BUDGET, ALIVE)
        state = "failed" if n % 2 else "completed"
        assert await checkpointer.settle(holder, state, failure if n % 2 else {})
        await checkpointer.release(holder)

    async def fill() -> None:
        gate = asyncio.Semaphore(64)

        async def gated(n: int) -> None:
            async with gate:
                await one(n)

        await asyncio.gather(*(gated(n) for n in range(MANY)))

    store.run(fill)
    yield store


def _sent(store: Opened, call: object) -> dict[str, object]:
    """The requests and round trips one call sends (the store's counting hook)."""
    traffic = store.durable.traffic
    before = traffic.snapshot()
    store.run(call)  # type: ignore[arg-type]
    sent = traffic.snapshot() - before
    return {"round_trips": sent.round_trips, "requests": dict(sent.requests)}


def test_status(benchmark: BenchmarkFixture, filled: Opened) -> None:
    durable = filled.durable
    assert isinstance(durable, Inspectable)
    workflow = f"{filled.tag}-w{MANY // 2 + 1:06d}"

    async def once() -> None:
        assert (await durable.status(workflow)).state == "failed"

    benchmark.extra_info.update(_sent(filled, once))
    benchmark.pedantic(filled.run, args=(once,), rounds=200, warmup_rounds=20)


def test_list_a_page(benchmark: BenchmarkFixture, filled: Opened) -> None:
    durable = filled.durable
    assert isinstance(durable, Inspectable)
    after = f"{filled.tag}-w{MANY // 2:06d}"

    async def once() -> None:
        page = await durable.list(state="failed", prefix=f"{filled.tag}-", limit=PAGE,
                                  after=after)
        assert len(page.statuses) == PAGE and page.statuses[0].workflow > after

    benchmark.extra_info.update(_sent(filled, once))
    benchmark.pedantic(filled.run, args=(once,), rounds=100, warmup_rounds=10)
