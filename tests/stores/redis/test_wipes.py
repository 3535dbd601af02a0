"""A Redis that lost its data: the schedulers carry on, and say that it happened.

A restart without persistence, a `FLUSHALL` or a failover to an empty replica leaves the
stream without its consumer group; every command that needs the group must make it again and
go on, and the queue's marker must show that the data set was wiped (one ERROR line per
scheduler that noticed, `wipes` counted, `on_wipe` told) rather than a resubmitted workflow
passing for new. A whole worker runs here against a server of the test's own, flushed and
restarted (never the shared 6379); the finer cases delete the keys of the test's own
namespace on the shared server, which is a wipe as far as one queue can tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError

from durability import work
from durability.connect import open_durable
from durability.interfaces import Durable
from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
    Wiped,
)
from durability.redis.stream_scheduler import GROUP
from durability.split import SplitDurable
from durability.stepwise import Run

from .conftest import HOST, Servers

WAIT = timedelta(milliseconds=300)
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=10)
MARKER_LOG = "durability.redis.marker"
KINDS = ["stream", "set"]


def _wipe_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == MARKER_LOG and r.levelno >= logging.ERROR]


def _nogroup(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if "NOGROUP" in r.getMessage() or (r.exc_text and "NOGROUP" in r.exc_text)
    ]


# --- a worker through a wipe, on a server of our own ---------------------------------------


class Paid:
    """Waits for the order, then pays it once per pass that reaches the step."""

    def __init__(self) -> None:
        self.paid: list[str] = []

    async def __call__(self, run: Run) -> str:
        order = await run.awaiting("order", str)

        def pay() -> str:
            self.paid.append(order)
            return f"paid {order}"

        return await run.step("paid", pay, str)


async def _until_paid(durable: Durable, workflow: str) -> None:
    async with asyncio.timeout(20):
        while "paid" not in await durable.checkpointer.load(workflow):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def _submit(api: Durable, workflow: str, order: str) -> None:
    """`arrive`, retried as an API client would retry (under the same id) while a connection
    that died with the old server is replaced."""
    for attempt in range(50):
        try:
            await api.arrive(workflow, "order", order)
            return
        except ConnectionError:
            if attempt == 49:
                raise
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _worker(url: str, body: Paid) -> AsyncIterator[Durable]:
    """A worker process's durable and its `work` loop, running until the block ends."""
    async with open_durable(url, lease=timedelta(seconds=5)) as durable:
        task = asyncio.create_task(
            work(
                durable,
                body,
                tick=timedelta(milliseconds=100),
                within=timedelta(milliseconds=500),
                sweep=timedelta(milliseconds=200),
            )
        )
        try:
            yield durable
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _run_through(
    private_servers: Servers, caplog: pytest.LogCaptureFixture, kind: str, restart: bool
) -> None:
    port = private_servers.start()
    url = f"redis://{HOST}:{port}/0?scheduler={kind}&namespace=shop"
    body = Paid()
    heard: list[Wiped] = []
    caplog.set_level(logging.INFO)
    async with _worker(url, body) as worker, open_durable(url) as api:
        assert isinstance(worker, RedisDurable) and isinstance(api, RedisDurable)
        worker.marker.on_wipe = heard.append
        await api.arrive("before", "order", "piano")
        await _until_paid(api, "before")
        assert worker.marker.wipes == 0 and not _wipe_errors(caplog)

        if restart:
            # Persistence off: it comes back empty. (In a thread, so the clients' connections
            # see theirs close meanwhile, as they would in processes of their own.)
            await asyncio.to_thread(private_servers.restart, port)
        else:
            admin = Redis(host=HOST, port=port)
            await admin.flushall()
            await admin.aclose()

        # The API goes on submitting; the worker runs what arrives after the wipe.
        for n in range(3):
            await _submit(api, f"after-{n}", f"stool-{n}")
        for n in range(3):
            await _until_paid(api, f"after-{n}")
        # The paid order's record went with the data: submitted again, it would run again.
        # That is the loss the marker is there to make loud.
        assert await api.checkpointer.load("before") == {}
        async with asyncio.timeout(10):
            while not worker.marker.wipes:  # noqa: ASYNC110 - the timer notices by itself
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # a few more sweeps of the worker's timer add nothing

        errors = _wipe_errors(caplog)
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert "'shop'" in errors[0].getMessage()
        assert worker.marker.wipes == 1 and worker.marker.last_wipe is not None
        assert [(w.namespace, w.wipes) for w in heard] == [("shop", 1)]
        # Nobody went on being told NOGROUP: the first answer of it made the group again.
        assert not _nogroup(caplog)
        # The API process runs no timer; it learns of the wipe when it asks.
        scheduler = api.scheduler
        assert isinstance(scheduler, (RedisStreamScheduler, RedisSetScheduler))
        assert await scheduler.verify() is True
        assert await scheduler.verify() is False
        assert scheduler.wipes == 1
    assert sorted(body.paid) == ["piano", "stool-0", "stool-1", "stool-2"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_carries_on_after_flushall_and_reports_the_wipe_once(
    private_servers: Servers, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    await _run_through(private_servers, caplog, kind, restart=False)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_carries_on_after_a_restart_without_persistence(
    private_servers: Servers, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    await _run_through(private_servers, caplog, kind, restart=True)


# --- one queue's keys gone, on the shared server ------------------------------------------


async def _stream(redis: Any, namespace: str) -> RedisStreamScheduler:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace, lease=timedelta(seconds=5))
    await scheduler.prepare()
    return scheduler


def _later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=30)


async def test_a_first_prepare_is_no_wipe(redis: Redis, namespace: str) -> None:
    stream = await _stream(redis, namespace)
    ordered = RedisSetScheduler(redis=redis, namespace=namespace)
    for scheduler in (stream, ordered):
        await scheduler.prepare()
        await scheduler.prepare()
        await scheduler.wake_due()
        assert await scheduler.verify() is False
        assert scheduler.wipes == 0 and scheduler.last_wipe is None
        assert await redis.exists(scheduler.marker.key) == 1


async def test_every_stream_command_makes_the_group_again_and_carries_on(
    redis: Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = await _stream(redis, namespace)
    workflow = f"{namespace}-w"
    await scheduler.make_ready(workflow)
    held = await scheduler.next_ready(WAIT)
    assert held is not None

    # The group alone goes (the marker stays): no wipe, and each call recovers by itself.
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: scheduler.done(held),
        lambda: scheduler.wake_at(held, _later()),
        lambda: scheduler.extend(held, timedelta(seconds=1)),
        lambda: scheduler.reclaiming(timedelta(milliseconds=1)),
        lambda: scheduler.next_ready(timedelta(milliseconds=50)),
    ]
    for call in calls:
        await redis.xgroup_destroy(scheduler.ready, GROUP)
        await call()  # raises nothing
        groups = await redis.xinfo_groups(scheduler.ready)
        assert [g["name"] for g in groups] == [GROUP]
    assert scheduler.wipes == 0 and not _wipe_errors(caplog)

    # Everything goes: the next read makes the queue again and reports the wipe, once.
    await redis.delete(scheduler.ready, scheduler.sleeping, scheduler.marker.key)
    await scheduler.make_ready(workflow)  # an API submitting: the stream comes back groupless
    fresh = await scheduler.next_ready(WAIT)
    assert fresh is not None and fresh.workflow == workflow
    await scheduler.done(fresh)
    await scheduler.wake_due()
    assert scheduler.wipes == 1
    assert len(_wipe_errors(caplog)) == 1


async def test_another_worker_learns_of_the_wipe_from_the_replaced_marker(
    redis: Redis, namespace: str
) -> None:
    first, second = await _stream(redis, namespace), await _stream(redis, namespace)
    await redis.delete(first.ready, first.marker.key)
    await first.make_ready(f"{namespace}-w")
    assert await first.next_ready(WAIT) is not None  # first puts group and marker back
    assert first.wipes == 1
    # second never meets a NOGROUP (the group is there again); its timer sees the new marker.
    await second.wake_due()
    assert second.wipes == 1
    await second.wake_due()
    assert second.wipes == 1


async def test_the_set_scheduler_notices_a_wipe_on_its_timer(
    redis: Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    for doorbell in (True, False):
        space = f"{namespace}-{doorbell}"
        scheduler = RedisSetScheduler(redis=redis, namespace=space, doorbell=doorbell)
        await scheduler.prepare()
        await scheduler.make_ready(f"{space}-w")
        await redis.delete(*scheduler.keys, scheduler.marker.key)
        await scheduler.make_ready(f"{space}-after")
        taken = await scheduler.next_ready(WAIT)
        assert taken is not None and taken.workflow == f"{space}-after"
        assert scheduler.wipes == 0  # the hot path asks nothing
        assert await scheduler.wake_due() is None
        assert scheduler.wipes == 1
        await scheduler.wake_due()
        assert scheduler.wipes == 1
    assert len(_wipe_errors(caplog)) == 2  # one per queue


@pytest.mark.parametrize("within", [timedelta(milliseconds=1), WAIT], ids=["glance", "wait"])
async def test_a_joined_take_makes_the_group_again(
    redis: Redis, namespace: str, within: timedelta
) -> None:
    scheduler = await _stream(redis, namespace)
    durable = RedisDurable(RedisCheckpointer(redis=redis, namespace=namespace), scheduler)
    assert durable.joined
    workflow = f"{namespace}-w"
    await durable.arrive(workflow, "order", 1)
    await redis.delete(scheduler.ready, scheduler.marker.key)
    await durable.arrive(workflow, "order", 1)  # the stream is back, without its group
    taken = await durable.take(within, BUDGET, ALIVE)
    assert taken is not None and taken.delivery.workflow == workflow
    assert durable.marker.wipes == 1


async def test_a_joined_finish_after_the_group_went_still_releases(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _stream(redis, namespace)
    durable = RedisDurable(RedisCheckpointer(redis=redis, namespace=namespace), scheduler)
    workflow = f"{namespace}-w"
    await durable.arrive(workflow, "order", 1)
    taken = await durable.take(WAIT, BUDGET, ALIVE)
    assert taken is not None and taken.holder is not None
    await redis.delete(scheduler.ready, scheduler.marker.key)
    await durable.finish(taken.holder, taken.delivery)  # release, then a done told NOGROUP
    assert await durable.checkpointer.claim(workflow, BUDGET, ALIVE) is not None  # released
    assert durable.marker.wipes == 1


async def test_a_take_blocked_when_the_stream_goes_makes_it_again(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _stream(redis, namespace)
    durable = RedisDurable(RedisCheckpointer(redis=redis, namespace=namespace), scheduler)
    assert await durable.take(timedelta(milliseconds=50), BUDGET, ALIVE) is None  # now waiting
    taking = asyncio.create_task(durable.take(timedelta(seconds=5), BUDGET, ALIVE))
    await asyncio.sleep(0.2)  # the read is blocked on the server
    await redis.delete(scheduler.ready, scheduler.marker.key)  # which unblocks it: key gone
    await asyncio.sleep(0.2)
    await durable.arrive(f"{namespace}-w", "order", 1)
    taken = await taking
    assert taken is not None and taken.delivery.workflow == f"{namespace}-w"
    assert durable.marker.wipes == 1


async def test_a_cluster_queue_recovers_and_reports_the_wipe(
    redis_cluster: RedisCluster, fresh_id: str
) -> None:
    scheduler = await _stream(redis_cluster, fresh_id)
    durable = SplitDurable(RedisCheckpointer(redis=redis_cluster, namespace=fresh_id), scheduler)
    workflow = f"{fresh_id}-w"
    try:
        await redis_cluster.delete(scheduler.ready, scheduler.marker.key)
        await durable.arrive(workflow, "order", 1)
        taken = await durable.take(WAIT, BUDGET, ALIVE)
        assert taken is not None and taken.holder is not None
        await durable.finish(taken.holder, taken.delivery)
        assert scheduler.wipes == 1
        await scheduler.wake_due()
        assert scheduler.wipes == 1
    finally:
        await durable.delete(workflow)
        await redis_cluster.delete(scheduler.ready, scheduler.sleeping, scheduler.marker.key)
