"""`RedisDurable` and the worker over real Redis: the durable contract on both schedulers (and on
a cluster, where the moves fall back to two calls), one workflow driven end to end through
`work()` on each scheduler, and the round trips the joined moves cost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from durability import Limit, work
from durability.bodies import start
from durability.codec import as_int
from durability.interfaces import Durable
from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)
from durability.stepwise import Completed, Run
from durability.testing import Observed
from durability.testing.conformance import (
    BoundsContract,
    DurableContract,
    MakeDurables,
    PolicyContract,
    Twin,
    a_schedule_added_elsewhere_wakes_a_worker,
    taken_over_as_its_claim_lapses,
)
from durability.testing.conformance.working import PATIENCE, working
from durability.values import Delivery, Pass
from durability.worker import Event

#: Short enough that the workflows these tests leave on the shared server go away by themselves.
TTL = timedelta(minutes=10)

Kind = type[RedisStreamScheduler] | type[RedisSetScheduler]
SCHEDULERS: list[Kind] = [RedisStreamScheduler, RedisSetScheduler]


def _scheduler(kind: Kind, client: Any, namespace: str, lease: timedelta) -> Any:
    if kind is RedisSetScheduler:
        return RedisSetScheduler(
            redis=client, namespace=namespace, lease=lease, poll=timedelta(milliseconds=10)
        )
    return RedisStreamScheduler(redis=client, namespace=namespace, lease=lease)


async def _durable(kind: Kind, client: Any, namespace: str) -> RedisDurable:
    scheduler = _scheduler(kind, client, namespace, timedelta(seconds=5))
    await scheduler.prepare()
    return RedisDurable(RedisCheckpointer(redis=client, namespace=namespace, ttl=TTL), scheduler)


# --- the contract -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _twins(kind: Kind, namespace: str) -> AsyncIterator[Twin]:
    """Durables over the same namespace, each on a client of its own: other workers."""
    clients: list[Redis] = []

    async def twin() -> Durable:
        clients.append(Redis(host="127.0.0.1", port=6379, decode_responses=True))
        return await _durable(kind, clients[-1], namespace)

    try:
        yield twin
    finally:
        for client in clients:
            await client.aclose()


class TestRedisDurableOnTheStream(DurableContract):
    @pytest.fixture
    async def durable(self, redis: Redis, namespace: str) -> Durable:
        made = await _durable(RedisStreamScheduler, redis, namespace)
        assert made.joined
        return made

    @pytest.fixture
    async def twin(self, namespace: str) -> AsyncIterator[Twin]:
        async with _twins(RedisStreamScheduler, namespace) as twin:
            yield twin

    async def test_a_schedule_added_by_another_process_wakes_a_sleeping_worker(
        self, durable: Durable, twin: Twin
    ) -> None:
        await a_schedule_added_elsewhere_wakes_a_worker(durable, twin)


class TestRedisDurableOnTheSet(DurableContract):
    @pytest.fixture
    async def durable(self, redis: Redis, namespace: str) -> Durable:
        made = await _durable(RedisSetScheduler, redis, namespace)
        assert made.joined
        return made

    @pytest.fixture
    async def twin(self, namespace: str) -> AsyncIterator[Twin]:
        async with _twins(RedisSetScheduler, namespace) as twin:
            yield twin

    async def test_a_schedule_added_by_another_process_wakes_a_sleeping_worker(
        self, durable: Durable, twin: Twin
    ) -> None:
        await a_schedule_added_elsewhere_wakes_a_worker(durable, twin)


class TestRedisDurableOnACluster(DurableContract):
    """On a cluster the workflow and the queue lie in different slots: two calls, in order."""

    @pytest.fixture
    async def durable(self, redis_cluster: RedisCluster, fresh_id: str) -> Durable:
        made = await _durable(RedisStreamScheduler, redis_cluster, fresh_id)
        assert not made.joined
        return made


@pytest.fixture
async def nowhere() -> AsyncIterator[Redis]:
    """A client to a port nothing listens on: anything sent would be a ConnectionError (at
    once: no retries)."""
    client = Redis(
        host="127.0.0.1", port=1, decode_responses=True, retry=Retry(NoBackoff(), 0)
    )
    yield client
    await client.aclose()


class TestRedisBoundsOnTheStream(BoundsContract):
    @pytest.fixture
    def offline(self, nowhere: Redis) -> Durable:
        scheduler = RedisStreamScheduler(redis=nowhere, namespace="offline")
        return RedisDurable(RedisCheckpointer(redis=nowhere), scheduler)


class TestRedisBoundsOnTheSet(BoundsContract):
    @pytest.fixture
    def offline(self, nowhere: Redis) -> Durable:
        scheduler = RedisSetScheduler(redis=nowhere, namespace="offline")
        return RedisDurable(RedisCheckpointer(redis=nowhere), scheduler)


# --- priorities and limits --------------------------------------------------------------


@contextlib.asynccontextmanager
async def _policy_durables(kind: Kind, namespace: str) -> AsyncIterator[MakeDurables]:
    """`count` durables over a fresh namespace, each on a client of its own: other workers."""
    clients: list[Redis] = []
    made = 0

    async def make(lease: timedelta, count: int) -> list[Durable]:
        nonlocal made
        made += 1
        queue = f"{namespace}-{made}"
        durables: list[Durable] = []
        for _ in range(count):
            clients.append(Redis(host="127.0.0.1", port=6379, decode_responses=True))
            scheduler = _scheduler(kind, clients[-1], queue, lease)
            await scheduler.prepare()
            checkpointer = RedisCheckpointer(redis=clients[-1], namespace=queue, ttl=TTL)
            durables.append(RedisDurable(checkpointer, scheduler))
        return durables

    try:
        yield make
    finally:
        for client in clients:
            await client.aclose()


class TestRedisPoliciesOnTheStream(PolicyContract):
    @pytest.fixture
    async def make_durables(self, namespace: str) -> AsyncIterator[MakeDurables]:
        async with _policy_durables(RedisStreamScheduler, namespace) as make:
            yield make

    @pytest.fixture
    def offline(self, nowhere: Redis) -> Durable:
        scheduler = RedisStreamScheduler(redis=nowhere, namespace="offline")
        return RedisDurable(RedisCheckpointer(redis=nowhere), scheduler)


class TestRedisPoliciesOnTheSet(PolicyContract):
    @pytest.fixture
    async def make_durables(self, namespace: str) -> AsyncIterator[MakeDurables]:
        async with _policy_durables(RedisSetScheduler, namespace) as make:
            yield make

    @pytest.fixture
    def offline(self, nowhere: Redis) -> Durable:
        scheduler = RedisSetScheduler(redis=nowhere, namespace="offline")
        return RedisDurable(RedisCheckpointer(redis=nowhere), scheduler)


# --- one workflow through work() ---------------------------------------------------------


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


class Trip:
    """A workflow that takes a step, sleeps, waits for a supplied value and then for an inbox
    entry; counts how often the step's function really ran."""

    def __init__(self) -> None:
        self.step_ran = 0

    def charge(self) -> int:
        self.step_ran += 1
        return 42

    async def __call__(self, run: Run) -> dict[str, object]:
        charged = await run.step("charge", self.charge, _int)
        await run.sleep("cool-off", timedelta(milliseconds=300))
        approved = await run.awaiting("approval", str)
        mail = await run.receive("mail")
        return {"charged": charged, "approved": approved, "mail": [e.value for e in mail]}


@pytest.mark.parametrize("kind", SCHEDULERS, ids=["stream", "set"])
async def test_both_schedulers_drive_a_workflow_through_work(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    durable = await _durable(kind, redis, namespace)
    workflow = f"{namespace}-trip"
    body = Trip()
    events: list[Event] = []
    changed = asyncio.Event()

    def observe(event: Event) -> None:
        if event.workflow == workflow:
            events.append(event)
            changed.set()

    async def outcomes(count: int) -> list[object]:
        async with asyncio.timeout(10):
            while True:
                found: list[object] = [e.outcome for e in events if e.kind == "outcome"]
                if len(found) >= count:
                    return found
                changed.clear()
                await changed.wait()

    worker = asyncio.create_task(
        work(durable, body, tick=timedelta(milliseconds=100), observer=observe)
    )
    try:
        await durable.arrive(workflow, "order", "piano")
        # The first pass steps and sleeps; the timer wakes it; the second pass waits for the
        # approval.
        await outcomes(2)
        await durable.arrive(workflow, "approval", "ada")
        await outcomes(3)  # now it waits for mail
        await durable.deliver(workflow, {"text": "hello"})
        found = await outcomes(4)
        # The outcome is reported before the pass finishes; finish releases and answers in one
        # script, so once the claim is free the delivery has been answered too.
        async with asyncio.timeout(10):
            while (  # noqa: ASYNC110 - nothing announces a release; look until it is free
                holder := await durable.checkpointer.claim(
                    workflow, timedelta(seconds=5), timedelta(seconds=5)
                )
            ) is None:
                await asyncio.sleep(0.01)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    assert [type(o).__name__ for o in found] == ["Sleeping", "Blocked", "Blocked", "Completed"]
    last = found[-1]
    assert isinstance(last, Completed)
    assert last.value == {"charged": 42, "approved": "ada", "mail": [{"text": "hello"}]}
    assert body.step_ran == 1
    assert not [e for e in events if e.kind in ("failed", "fenced", "expired")]
    assert holder.records is not None and holder.records["approval"] == "ada"
    # Nothing is left queued: every wakeup was answered for.
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None


@pytest.mark.parametrize("kind", SCHEDULERS, ids=["stream", "set"])
async def test_a_delivery_taken_over_asks_for_the_claim_as_it_lapses(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    # The stream's reclaimer hands the lapsed delivery over; the set's reader takes a member
    # whose score is still a receipt, and says it lapsed.
    scheduler = _scheduler(kind, redis, namespace, timedelta(milliseconds=600))
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=redis, namespace=namespace, ttl=TTL)
    await taken_over_as_its_claim_lapses(RedisDurable(checkpointer, scheduler))


async def test_a_claim_brings_the_checkpoint_it_found(redis: Redis, namespace: str) -> None:
    durable = await _durable(RedisStreamScheduler, redis, namespace)
    workflow = f"{namespace}-claimed"
    empty = await durable.checkpointer.claim(workflow, timedelta(seconds=5), timedelta(seconds=5))
    assert empty is not None and empty.records == {}
    await durable.checkpointer.record(empty, "a", [1, "x"])
    await durable.checkpointer.release(empty)
    await durable.deliver(workflow, "mail")
    holder = await durable.checkpointer.claim(workflow, timedelta(seconds=5), timedelta(seconds=5))
    assert holder is not None
    assert holder.records == await durable.checkpointer.load(workflow)
    assert list(holder.records or {}) == ["a", "inbox:00000000000000000001"]


# --- round trips --------------------------------------------------------------------------


class CountingConnection(Connection):
    """A connection that counts its writes to the socket: one per round trip (a pipeline, or a
    `SharedConnection`'s batch, is written at once, so it counts once too)."""

    sent: ClassVar[list[int]] = [0]

    async def connect(self) -> None:
        await super().connect()  # type: ignore[no-untyped-call]
        writer = self._writer
        if writer is None or getattr(writer, "counted", False):
            return  # connect() may run again on an open connection
        write = writer.writelines

        def counted(data: Any) -> None:
            type(self).sent[0] += 1
            write(data)

        writer.writelines = counted  # type: ignore[method-assign]
        writer.counted = True  # type: ignore[attr-defined]


Counting = tuple[Redis, Callable[[], int]]


@pytest.fixture
async def counting(redis: Redis) -> AsyncIterator[Counting]:
    """A client to the shared server (which `redis` checked answers), and how many round
    trips it has made so far."""

    class Mine(CountingConnection):
        sent: ClassVar[list[int]] = [0]

    kwargs = redis.connection_pool.connection_kwargs
    pool = ConnectionPool(
        host=kwargs["host"], port=kwargs["port"], decode_responses=True, connection_class=Mine
    )
    client = Redis(connection_pool=pool)
    try:
        yield client, lambda: Mine.sent[0]
    finally:
        await client.aclose()
        await pool.aclose()


@pytest.mark.parametrize("kind", SCHEDULERS, ids=["stream", "set"])
async def test_arrive_deliver_and_finish_are_one_round_trip_each(
    counting: Counting, namespace: str, kind: Kind
) -> None:
    client, counted = counting
    durable = await _durable(kind, client, namespace)
    scheduler = durable.scheduler
    # Warm up: the first run of each script is NOSCRIPT, SCRIPT LOAD, EVALSHA.
    warm = f"{namespace}-warm"
    await durable.arrive(warm, "k", 1)
    await durable.deliver(warm, 2)
    taken = await scheduler.next_ready(timedelta(seconds=2))
    assert taken is not None
    holder = await durable.checkpointer.claim(warm, timedelta(seconds=5), timedelta(seconds=5))
    assert holder is not None
    await durable.finish(holder, taken)

    workflow = f"{namespace}-counted"
    before = counted()
    await durable.arrive(workflow, "order", {"sku": "piano"})
    assert counted() - before == 1
    before = counted()
    await durable.deliver(workflow, "mail")
    assert counted() - before == 1

    delivery = None
    while delivery is None or delivery.workflow != workflow:
        if delivery is not None:
            await scheduler.done(delivery)
        delivery = await scheduler.next_ready(timedelta(seconds=2))
        assert delivery is not None
    holder = await durable.checkpointer.claim(workflow, timedelta(seconds=5), timedelta(seconds=5))
    assert holder is not None
    before = counted()
    await durable.finish(holder, delivery)
    assert counted() - before == 1
    # ...and each did both halves. Released: a new claim need not wait for the old one.
    again = await durable.checkpointer.claim(workflow, timedelta(seconds=5), timedelta(seconds=5))
    assert again is not None and again.token > holder.token
    assert again.records == {"order": {"sku": "piano"}, "inbox:00000000000000000001": "mail"}
    # Answered: the stream keeps only the second wakeup (`deliver`'s own entry); the set holds
    # a workflow as one member, which `done` removed.
    left = await scheduler.next_ready(timedelta(milliseconds=50))
    if kind is RedisStreamScheduler:
        assert left is not None and left.workflow == workflow
        assert left.receipt != delivery.receipt
    else:
        assert left is None


@pytest.mark.parametrize("kind", SCHEDULERS, ids=["stream", "set"])
async def test_take_reads_and_claims_a_ready_workflow_in_one_round_trip(
    counting: Counting, namespace: str, kind: Kind
) -> None:
    client, counted = counting
    durable = await _durable(kind, client, namespace)
    budget = alive = timedelta(seconds=5)
    # Warm up the script cache: the first run of a script is NOSCRIPT, SCRIPT LOAD, EVALSHA.
    await durable.arrive(f"{namespace}-warm", "k", 1)
    warm = await durable.take(timedelta(seconds=2), budget, alive)
    assert warm is not None and warm.holder is not None
    await durable.finish(warm.holder, warm.delivery)

    workflow = f"{namespace}-taken"
    await durable.arrive(workflow, "order", {"sku": "piano"})
    before = counted()
    taken = await durable.take(timedelta(seconds=2), budget, alive)
    assert counted() - before == 1
    assert taken is not None and taken.delivery.workflow == workflow
    assert taken.holder is not None
    assert taken.holder.records == await durable.checkpointer.load(workflow)
    # The claim is real: a second claim is refused while it lives, and finish answers both.
    assert await durable.checkpointer.claim(workflow, budget, alive) is None
    await durable.finish(taken.holder, taken.delivery)
    assert await durable.take(timedelta(milliseconds=50), budget, alive) is None


@pytest.mark.parametrize("kind", SCHEDULERS, ids=["stream", "set"])
async def test_take_of_a_workflow_a_live_pass_holds_hands_over_the_delivery_alone(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    durable = await _durable(kind, redis, namespace)
    budget = alive = timedelta(seconds=5)
    workflow = f"{namespace}-held"
    holder = await durable.checkpointer.claim(workflow, budget, alive)
    assert holder is not None
    await durable.arrive(workflow, "order", 1)
    taken = await durable.take(timedelta(seconds=2), budget, alive)
    assert taken is not None and taken.delivery.workflow == workflow
    assert taken.holder is None
    # The live pass still holds its claim: it can write.
    await durable.checkpointer.record(holder, "still-mine", True)


# --- a renewal in flight as the pass ends -------------------------------------------------


class _SlowRenewal(RedisSetScheduler):
    """Its extend starts (`asked`) but reaches the store only once the body has returned."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.asked = asyncio.Event()
        self.returned = asyncio.Event()
        self.landed = asyncio.Event()

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        self.asked.set()
        await self.returned.wait()
        try:
            return await super().extend(delivery, within)
        finally:
            self.landed.set()


class _FinishAfterRenewal(RedisDurable):
    """Finishes a pass only once a renewal that had started has reached the store, answering
    for the delivery it is given: the order a worker that did not wait for it would get."""

    async def finish_ended(self, holder: Pass, delivery: Delivery, *args: Any) -> bool:
        scheduler = self.scheduler
        assert isinstance(scheduler, _SlowRenewal)
        if scheduler.asked.is_set():
            await scheduler.landed.wait()
        return await super().finish_ended(holder, delivery, *args)


async def test_a_renewal_in_flight_as_a_limited_pass_ends_still_frees_its_slot(
    redis: Redis, namespace: str
) -> None:
    # The set's renewal changes the receipt: a pass answered with the receipt it was taken
    # with, after the keeper's renewal landed, would leave its workflow held for a lease, and
    # its limit's slot with it, so the next workflow under the limit would never run.
    scheduler = _SlowRenewal(redis=redis, namespace=namespace, lease=timedelta(minutes=10))
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=redis, namespace=namespace, ttl=TTL)
    durable = _FinishAfterRenewal(checkpointer, scheduler)
    limit = Limit(f"{namespace}-gateway", 1)

    async def pay(run: Run) -> int:
        async def call() -> int:
            await scheduler.asked.wait()  # the keeper's renewal is on its way
            return 1

        try:
            return await run.step("call", call, as_int)
        finally:
            scheduler.returned.set()

    first, second = f"{namespace}-first", f"{namespace}-second"
    assert await start(durable, "pay", None, first, limit=limit)
    observed = Observed(PATIENCE)
    async with working(durable, {"pay": pay}, observed, 1):
        await observed.until(lambda: observed.completed(first))
        await asyncio.wait_for(scheduler.landed.wait(), PATIENCE)
        assert await start(durable, "pay", None, second, limit=limit)
        await observed.until(lambda: observed.completed(second))
    members = await redis.zrange(f"{{{namespace}}}:schedule", 0, -1)
    assert [member for member in members if member != "{policies}"] == []  # none left held
