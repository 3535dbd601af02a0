"""What a store tells about itself, on every store: `durable.traffic` (what it sent) and the
scheduler's `footprint` (how big its queue is). The lab measures through both."""

from __future__ import annotations

from datetime import timedelta

from durability import Counted, Durable, Measured, Traffic, claimed


async def test_traffic_counts_each_request_by_name_and_each_round_trip(
    durable: Durable, tag: str
) -> None:
    assert isinstance(durable, Counted)
    assert isinstance(durable.traffic, Traffic)
    before = durable.traffic.snapshot()
    await durable.arrive(f"{tag}-a", "order", {"n": 1})
    one = durable.traffic.snapshot() - before
    assert one.round_trips >= 1
    assert one.total >= 1
    assert all(count > 0 for count in one.requests.values())
    # Three more of the same cost three times as much: counted per call, not once.
    for n in range(3):
        await durable.arrive(f"{tag}-b{n}", "order", {"n": n})
    three = durable.traffic.snapshot() - before - one
    assert three.round_trips == 3 * one.round_trips
    assert dict(three.requests) == {name: 3 * count for name, count in one.requests.items()}


async def test_a_snapshot_difference_is_what_was_sent_between(durable: Durable, tag: str) -> None:
    first = durable.traffic.snapshot()
    holder = await claimed(durable.checkpointer, f"{tag}-w")
    await durable.checkpointer.record(holder, "step", 1)
    await durable.checkpointer.release(holder)
    second = durable.traffic.snapshot()
    between = second - first
    assert between.round_trips >= 3  # claim, record, release: one round trip at least each
    assert (second - second).total == 0 and (second - second).round_trips == 0


async def test_footprint_counts_queued_and_sleeping_workflows(durable: Durable, tag: str) -> None:
    scheduler = durable.scheduler
    assert isinstance(scheduler, Measured)
    empty = await scheduler.footprint()
    for n in range(3):
        await durable.arrive(f"{tag}-q{n}", "order", n)
    queued = await scheduler.footprint()
    assert queued.entries == empty.entries + 3
    delivery = await scheduler.next_ready(timedelta(seconds=2))
    assert delivery is not None
    later = (await durable.checkpointer.history(delivery.workflow))[-1].at + timedelta(hours=1)
    assert await scheduler.wake_at(delivery, later)
    await scheduler.done(delivery)
    slept = await scheduler.footprint()
    # The sleeper is still in the queue (as a sleeper or a hidden row), whatever the store.
    assert slept.entries >= empty.entries + 3
    assert slept.bytes is None or slept.bytes > 0
