"""`RedisDurable.take` on the stream when the queue is empty: the blocking read and the claim
travel as one pipeline, so a woken worker holds its claim when the read returns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from redis.asyncio import Redis

from durability.interfaces import Taken
from durability.redis import RedisCheckpointer, RedisDurable
from durability.redis.stream_scheduler import GROUP, RedisStreamScheduler

LONG = timedelta(seconds=30)
WITHIN = timedelta(seconds=5)


async def _durable(client: Redis, namespace: str) -> RedisDurable:
    scheduler = RedisStreamScheduler(redis=client, namespace=namespace, lease=LONG)
    await scheduler.prepare()
    return RedisDurable(RedisCheckpointer(redis=client), scheduler)


async def _take_while_waiting(durable: RedisDurable, arrive: Callable[[], object]) -> Taken:
    """Start a take on an empty queue, let it block, then make work arrive."""
    taking = asyncio.create_task(durable.take(WITHIN, LONG, LONG))
    await asyncio.sleep(0.2)  # the read is parked in Redis by now
    assert not taking.done()
    await arrive()  # type: ignore[misc]
    taken = await asyncio.wait_for(taking, 3)
    assert taken is not None
    return taken


async def test_a_woken_take_holds_the_claim_and_the_workers_consumer_owns_the_entry(
    redis: Redis, namespace: str
) -> None:
    durable = await _durable(redis, namespace)
    submitter = await _durable(redis, namespace)
    workflow = f"{namespace}-wf"
    taken = await _take_while_waiting(durable, lambda: submitter.arrive(workflow, "k", 1))
    assert taken.delivery.workflow == workflow
    assert taken.delivery.receipt.endswith("/1")  # handed over, not delivered again
    assert taken.holder is not None and taken.holder.records == {"k": 1}
    scheduler = durable.scheduler
    assert isinstance(scheduler, RedisStreamScheduler)
    pending = await redis.xpending_range(scheduler.ready, GROUP, "-", "+", 10)
    assert [p["consumer"] for p in pending] == [scheduler.consumer]  # not the waiting one
    # The receipt and claim it came with finish the pass like any other.
    await durable.finish(taken.holder, taken.delivery)
    assert await redis.xpending_range(scheduler.ready, GROUP, "-", "+", 10) == []
    assert await durable.checkpointer.claim(workflow, LONG, LONG) is not None


async def test_a_woken_take_of_a_held_workflow_brings_no_claim(
    redis: Redis, namespace: str
) -> None:
    durable = await _durable(redis, namespace)
    workflow = f"{namespace}-held"
    other = await durable.checkpointer.claim(workflow, LONG, LONG)  # a live pass elsewhere
    assert other is not None
    taken = await _take_while_waiting(
        durable, lambda: durable.scheduler.make_ready(workflow)
    )
    assert taken.delivery.workflow == workflow and taken.holder is None


async def test_an_empty_wait_returns_none_and_leaves_nothing_pending(
    redis: Redis, namespace: str
) -> None:
    durable = await _durable(redis, namespace)
    assert await durable.take(timedelta(milliseconds=300), LONG, LONG) is None
    assert await durable.take(timedelta(milliseconds=300), LONG, LONG) is None  # waits again
    scheduler = durable.scheduler
    assert isinstance(scheduler, RedisStreamScheduler)
    assert await redis.xpending_range(scheduler.ready, GROUP, "-", "+", 10) == []
    # Work already queued is still taken at once after an empty wait.
    await durable.arrive(f"{namespace}-later", "k", 1)
    taken = await durable.take(WITHIN, LONG, LONG)
    assert taken is not None and taken.holder is not None


async def test_a_server_without_the_script_still_hands_over_and_claims(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    client = private_client(spawn_redis())
    try:
        durable = await _durable(client, "ns")
        submitter = await _durable(client, "ns")
        # An empty read first, so the next take goes straight to the waiting pipeline...
        assert await durable.take(timedelta(milliseconds=100), LONG, LONG) is None
        await client.script_flush()  # ...whose claim script the server then no longer has
        taken = await _take_while_waiting(durable, lambda: submitter.arrive("wf", "k", 1))
        assert taken.delivery.workflow == "wf" and taken.holder is not None
        scheduler = durable.scheduler
        assert isinstance(scheduler, RedisStreamScheduler)
        pending = await client.xpending_range(scheduler.ready, GROUP, "-", "+", 10)
        assert [p["consumer"] for p in pending] == [scheduler.consumer]
    finally:
        await client.aclose()


async def test_a_glance_looks_without_blocking_even_after_an_empty_wait(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    client = private_client(spawn_redis())
    try:
        durable = await _durable(client, "ns")

        async def waits_sent() -> int:
            # Only the waiting pipeline's script asks XPENDING (which consumer holds what).
            stats = await client.info("commandstats")
            return int(stats.get("cmdstat_xpending", {}).get("calls", 0))

        # Redis ends a blocked read on its timer (100 ms at the default hz), so a take that
        # may wait a millisecond must not block at all, even right after an empty wait.
        assert await durable.take(timedelta(milliseconds=100), LONG, LONG) is None
        before = await waits_sent()
        assert before >= 1
        assert await durable.take(timedelta(milliseconds=1), LONG, LONG) is None
        assert await waits_sent() == before
        await durable.arrive("glanced", "k", 1)
        taken = await durable.take(timedelta(milliseconds=1), LONG, LONG)
        assert taken is not None and taken.delivery.workflow == "glanced"
    finally:
        await client.aclose()
