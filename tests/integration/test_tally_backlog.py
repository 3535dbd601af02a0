"""What an operator asks of a store, on every store: how many workflows stand in each state
(`Tallied.tally`), and how many wait ready and since when (`Waiting.backlog`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durability import Durable, claimed
from durability.interfaces import Ledger, Tallied, Waiting


async def stand(durable: Durable, workflow: str, state: str) -> None:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Ledger)
    await checkpointer.supply(workflow, "input", 1)
    holder = await claimed(checkpointer, workflow)
    assert await checkpointer.settle(holder, state, {})
    await checkpointer.release(holder)


async def test_tally_counts_standings_by_state_under_a_prefix(durable: Durable, tag: str) -> None:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Tallied)
    assert await checkpointer.tally(tag) == {}
    for n in range(3):
        await stand(durable, f"{tag}-f{n}", "failed")
    await stand(durable, f"{tag}-done", "completed")
    await stand(durable, f"other{tag}", "failed")  # outside the prefix
    assert await checkpointer.tally(tag) == {"failed": 3, "completed": 1}
    assert await checkpointer.tally(f"{tag}-f") == {"failed": 3}
    everything = await checkpointer.tally()
    assert everything["failed"] >= 4 and everything["completed"] >= 1
    await stand(durable, f"{tag}-f0", "queued")  # moved, not added
    assert await checkpointer.tally(tag) == {"failed": 2, "completed": 1, "queued": 1}


async def test_tally_refuses_a_prefix_that_is_no_id(durable: Durable) -> None:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Tallied)
    with pytest.raises(TypeError):
        await checkpointer.tally(3)  # type: ignore[arg-type]


async def test_backlog_counts_what_is_ready_and_not_taken(durable: Durable, tag: str) -> None:
    scheduler = durable.scheduler
    assert isinstance(scheduler, Waiting)
    empty = await scheduler.backlog()
    assert empty.ready == 0 and empty.oldest is None
    for n in range(3):
        await durable.arrive(f"{tag}-q{n}", "order", n)
    waiting = await scheduler.backlog()
    assert waiting.ready == 3
    memory = type(scheduler).__name__ == "MemoryScheduler"
    if memory:
        assert waiting.oldest is None  # the memory queue keeps no times
    else:
        assert waiting.oldest is not None and timedelta(0) <= waiting.oldest < timedelta(minutes=1)
    delivery = await scheduler.next_ready(timedelta(seconds=2))
    assert delivery is not None
    assert (await scheduler.backlog()).ready == 2
