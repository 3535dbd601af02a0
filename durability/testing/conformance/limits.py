"""The limit half of the policy contract, and `PolicyContract`, both halves together.

A full concurrency limit keeps its wakeups queued while others pass them, and hands one out
as a slot frees: a holder's answer (`done`, `finish`, a `wake_at` then `done`) or its
workflow's cancel wakes a waiting reader, and a holder's lapsed lease frees its slot without
any answer. A rate limit hands out at most `at_most` in any window of `per`, the reader
sleeping until the window has room. The races are real: takers on durables of their own (other
workers) never hold more than the limit. Margins are generous (short leases, waits that end on
the event, never on a fixed sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from durability.bodies import start
from durability.codec import as_int
from durability.interfaces import Durable, Scheduler, TakingMany
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.parking import ParkingContract
from durability.testing.conformance.priorities import (
    PATIENT,
    QUIET,
    MakeDurables,
    PriorityContract,
    taken,
)
from durability.testing.conformance.standings import inspected
from durability.testing.conformance.working import PATIENCE, working
from durability.values import Delivery, Limit, Taken

__all__ = ["LimitContract", "PolicyContract"]

#: A lease short enough that a test waits it out, long enough for a loaded machine's take.
SHORT_LEASE = timedelta(milliseconds=600)


async def _none(scheduler: Scheduler) -> None:
    delivery = await scheduler.next_ready(QUIET)
    assert delivery is None, f"{delivery} was handed out over its limit"


async def _either(scheduler: Scheduler) -> Delivery:
    """The next delivery by either door: taken over (`reclaiming`) or read (`next_ready`)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENT.total_seconds()
    while loop.time() < give_up:
        delivery = (await scheduler.reclaiming(SHORT_LEASE)).delivery
        if delivery is None:
            delivery = await scheduler.next_ready(timedelta(milliseconds=200))
        if delivery is not None:
            return delivery
    raise AssertionError(f"nothing came back within {PATIENT}")


async def _answer(durable: Durable, one: Taken) -> None:
    if one.holder is not None:
        await durable.finish(one.holder, one.delivery)
    else:
        await durable.scheduler.done(one.delivery)


async def _take_some(
    durable: Durable, within: timedelta, many: bool, room: int = 3
) -> list[Taken]:
    """One read: `take_up_to` (for `room`) where asked and the durable has it, else `take`."""
    if many and isinstance(durable, TakingMany):
        return await durable.take_up_to(lambda: room, within, LONG, LONG)
    one = await durable.take(within, LONG, LONG)
    return [] if one is None else [one]


async def _holding_one_with_a_reader_waiting(
    durable: Durable,
) -> tuple[Taken, str, asyncio.Task[Delivery | None]]:
    """A limit of 1 held by a taken pass, a second wakeup of it queued, and a reader waiting on
    it (not handed out while the limit is full): the pass, the waiting workflow, the reader."""
    scheduler = durable.scheduler
    limit = Limit(fresh("limit"), 1)
    holder, waiting = fresh("holder"), fresh("waiting")
    await scheduler.make_ready(holder, limit=limit)
    held = await durable.take(PATIENT, LONG, LONG)
    assert held is not None and held.holder is not None
    assert held.delivery.workflow == holder
    await scheduler.make_ready(waiting, limit=limit)
    reader = asyncio.create_task(scheduler.next_ready(PATIENT))
    await asyncio.sleep(0.2)
    assert not reader.done(), "handed out while the limit was full"
    return held, waiting, reader


class LimitContract:
    """Concurrency and rate limits, kept where the take happens. Needs `make_durables`."""

    async def test_a_full_limit_holds_its_wakeups_and_lets_others_by(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        limit = Limit(fresh("limit"), 1)
        first, second, free = fresh("first"), fresh("second"), fresh("free")
        await scheduler.make_ready(first, priority=5, limit=limit)
        await scheduler.make_ready(second, priority=5, limit=limit)
        await scheduler.make_ready(free)
        # `first`, then `free` behind the full limit (in either order on a sharded queue).
        got = {d.workflow: d for d in [await taken(scheduler), await taken(scheduler)]}
        assert set(got) == {first, free}, f"took {sorted(got)}"
        held = got[first]
        await scheduler.done(got[free])
        await _none(scheduler)  # `second` stays queued, not handed out
        await scheduler.done(held)
        back = await taken(scheduler, second)  # not lost: taken as the slot frees
        assert back.limit == limit
        await scheduler.done(back)

    @pytest.mark.parametrize("answer", ["done", "finish", "wake_at"])
    async def test_a_holders_answer_wakes_a_reader_waiting_on_the_limit(
        self, make_durables: MakeDurables, answer: str
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        held, waiting, reader = await _holding_one_with_a_reader_waiting(durable)
        assert held.holder is not None  # (the helper checked it; said again for the type)
        if answer == "finish":
            await durable.finish(held.holder, held.delivery)
        else:
            later = datetime.now(UTC) + timedelta(hours=1)
            if answer == "wake_at":  # how a worker answers a pass that sleeps
                assert await scheduler.wake_at(held.delivery, later)
            await durable.checkpointer.release(held.holder)
            await scheduler.done(held.delivery)
        delivery = await reader  # woken by the answer, as an arrival wakes it
        assert delivery is not None and delivery.workflow == waiting
        await scheduler.done(delivery)

    async def test_a_cancelled_holders_slot_frees_at_once(
        self, make_durables: MakeDurables
    ) -> None:
        """`durable.cancel` of a workflow mid-pass gives its slot back in the cancel, and a
        reader waiting on the limit is woken for it: long before the holder's lease lapses."""
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        held, waiting, reader = await _holding_one_with_a_reader_waiting(durable)
        assert await inspected(durable).cancel(held.delivery.workflow)
        delivery = await reader  # PATIENT: far inside the holder's lease (LONG)
        assert delivery is not None and delivery.workflow == waiting
        await scheduler.done(held.delivery)  # the cancelled pass answers late: changes nothing
        await _none(scheduler)  # the slot is the new holder's alone
        await scheduler.done(delivery)

    async def test_a_priority_arriving_while_a_reader_waits_is_the_one_it_gets(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        limit = Limit(fresh("limit"), 1)
        holder, low, high = fresh("holder"), fresh("low"), fresh("high")
        await scheduler.make_ready(holder, limit=limit)
        held = await taken(scheduler, holder)
        await scheduler.make_ready(low, limit=limit)
        reader = asyncio.create_task(scheduler.next_ready(PATIENT))
        await asyncio.sleep(0.2)
        await scheduler.make_ready(high, priority=1, limit=limit)  # while the reader waits
        await asyncio.sleep(0.2)
        assert not reader.done(), "handed out while the limit was full"
        await scheduler.done(held)
        got = await reader
        assert got is not None and (got.workflow, got.priority) == (high, 1)
        await scheduler.done(got)
        await scheduler.done(await taken(scheduler, low))

    async def test_a_lapsed_holder_frees_its_slot_and_a_takeover_counts_once(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(SHORT_LEASE, 1)
        scheduler = durable.scheduler
        limit = Limit(fresh("limit"), 1)
        crashed, waiting = fresh("crashed"), fresh("waiting")
        await scheduler.make_ready(crashed, limit=limit)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await taken(scheduler, crashed)  # and never answered: its worker died
        await scheduler.make_ready(waiting, limit=limit)
        # Either may come once the lease lapses: the crashed one, taken over, or the waiting
        # one, in the slot the lapse freed (one read does it on a store with no takeover).
        first = await _either(scheduler)
        assert first.workflow in (crashed, waiting)
        lapsed_after = loop.time() - began
        assert lapsed_after >= SHORT_LEASE.total_seconds() * 0.9, "taken before the lapse"
        kept = await scheduler.extend(first, LONG)  # so nothing lapses while we look
        assert kept is not None
        # The slot is the new holder's alone: neither a takeover nor a read gets another.
        assert (await scheduler.reclaiming(SHORT_LEASE)).delivery is None
        await _none(scheduler)
        await scheduler.done(kept)
        rest = await _either(scheduler)  # the other one, now the slot is free
        assert {first.workflow, rest.workflow} == {crashed, waiting}
        await scheduler.done(rest)

    async def test_two_claimers_at_a_limit_of_one_never_both_take(
        self, make_durables: MakeDurables
    ) -> None:
        one, two = await make_durables(LONG, 2)
        limit = Limit(fresh("limit"), 1)
        for round_ in range(8):
            for label in ("a", "b"):
                await one.scheduler.make_ready(fresh(f"{label}{round_}"), limit=limit)
            reads = await asyncio.gather(
                _take_some(one, QUIET, many=round_ % 2 == 0), _take_some(two, QUIET, many=True)
            )
            got = [t for read in reads for t in read]
            assert len(got) == 1, f"round {round_}: {len(got)} taken at a limit of one"
            await _answer(one, got[0])
            (rest,) = await _take_some(one, PATIENT, many=False)
            await _answer(one, rest)

    @pytest.mark.parametrize("at_most", [1, 2])
    async def test_concurrent_takers_never_hold_more_than_the_limit(
        self, make_durables: MakeDurables, at_most: int
    ) -> None:
        durables = await make_durables(LONG, 4)
        limit = Limit(fresh("limit"), at_most)
        workflows = [fresh() for _ in range(12)]
        for workflow in workflows:
            await durables[0].scheduler.make_ready(workflow, limit=limit)
        answered: list[str] = []
        held = most = 0

        async def taker(durable: Durable, many: bool) -> None:
            nonlocal held, most
            while len(answered) < len(workflows):
                got = await _take_some(durable, QUIET, many)
                held += len(got)  # counted once the store handed them out ...
                most = max(most, held)
                await asyncio.sleep(0.01)
                held -= len(got)  # ... and no longer before the store hears the answer
                for one in got:
                    await _answer(durable, one)
                    answered.append(one.delivery.workflow)

        takers = [taker(durable, many=n % 2 == 1) for n, durable in enumerate(durables)]
        await asyncio.wait_for(asyncio.gather(*takers), 60)
        assert most <= at_most, f"{most} held at once under a limit of {at_most}"
        assert sorted(answered) == sorted(workflows)  # each taken once, none lost

    async def test_take_up_to_never_takes_more_than_the_room(
        self, make_durables: MakeDurables
    ) -> None:
        """Many taken in one move (`TakingMany`) still count against the limit; a store that
        takes one at a time is held to the same by its `take`s until none is left."""
        (durable,) = await make_durables(LONG, 1)
        limit = Limit(fresh("limit"), 2)
        limited = [fresh("limited") for _ in range(5)]
        free = [fresh("free") for _ in range(3)]
        for workflow in limited:
            await durable.scheduler.make_ready(workflow, limit=limit)
        for workflow in free:
            await durable.scheduler.make_ready(workflow)
        got: list[Taken] = []
        while batch := await _take_some(durable, QUIET, many=True, room=10):
            got += batch
        names = [t.delivery.workflow for t in got]
        assert sorted(n for n in names if n in free) == sorted(free)
        held = len([n for n in names if n in limited])
        assert held == 2, f"{held} taken under a limit of 2"
        one = next(t for t in got if t.delivery.workflow in limited)
        await _answer(durable, one)
        more = await _take_some(durable, PATIENT, many=True, room=10)
        assert [t.delivery.workflow in limited for t in more] == [True], f"then took {more}"

    @pytest.mark.parametrize("how", ["one_by_one", "many_at_once", "racing"])
    async def test_a_full_limit_hands_out_its_last_slot(
        self, make_durables: MakeDurables, how: str
    ) -> None:
        """More ready than a limit of 16 allows and none answered: takes until none comes hold
        all 16, never 15 (a slot never handed out) nor 17; taken one at a time on one durable,
        many in one move (`TakingMany`, where the store has it), or by takers racing on two
        durables (other workers). One answer frees one slot, and only one more is taken."""
        durables = await make_durables(LONG, 2)
        at_most = 16
        limit = Limit(fresh("limit"), at_most)
        for _ in range(at_most + 8):
            await durables[0].scheduler.make_ready(fresh("limited"), limit=limit)
        got: list[tuple[Durable, Taken]] = []
        if how == "racing":
            reads = await asyncio.gather(*(
                _take_some(durables[n % 2], QUIET, many=n % 4 == 1, room=4)
                for n in range(2 * at_most)))
            got += [(durables[n % 2], t) for n, read in enumerate(reads) for t in read]
        # Until a read comes back empty: a racer that lost its turn leaves no slot behind.
        while batch := await _take_some(durables[0], QUIET, how == "many_at_once", 2 * at_most):
            got += [(durables[0], t) for t in batch]
        assert len(got) == at_most, f"{len(got)} taken under a limit of {at_most}"
        await _answer(*got.pop())
        more = await _take_some(durables[1], PATIENT, many=False)
        assert len(more) == 1, "the freed slot was not handed out"
        assert await _take_some(durables[0], QUIET, many=True, room=4) == [], "one too many"
        for durable, one in [*got, (durables[1], more[0])]:
            await _answer(durable, one)

    async def test_a_rate_limit_hands_out_at_most_so_many_in_a_window(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        per = timedelta(seconds=1)
        limit = Limit(fresh("rate"), 2, per=per)
        workflows = [fresh() for _ in range(3)]
        loop = asyncio.get_running_loop()
        began = loop.time()
        for workflow in workflows:
            await scheduler.make_ready(workflow, limit=limit)
        first: list[Delivery] = [await taken(scheduler), await taken(scheduler)]
        for delivery in first:
            await scheduler.done(delivery)  # answered: a rate counts takes, not holders
        free = fresh("free")
        await scheduler.make_ready(free)
        await scheduler.done(await taken(scheduler, free))  # others still pass
        await _none(scheduler)
        third = await taken(scheduler)  # one read: it sleeps until the window has room
        assert loop.time() - began >= per.total_seconds() * 0.9, "taken inside the window"
        assert sorted(d.workflow for d in [*first, third]) == sorted(workflows)
        await scheduler.done(third)

    async def test_a_rate_limit_keeps_handing_out_window_after_window(
        self, make_durables: MakeDurables
    ) -> None:
        # Three windows' worth queued at once: a window frees by time alone (no answer brings
        # the parked ones back), so a store that forgets them after the second stalls here.
        (durable,) = await make_durables(LONG, 1)
        per, at_most, count = timedelta(milliseconds=500), 10, 30
        limit = Limit(fresh("rate"), at_most, per=per)
        for _ in range(count):
            await durable.scheduler.make_ready(fresh(), limit=limit)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 15.0  # about a second on a healthy store
        spans: list[tuple[float, float]] = []  # (asked, answered) of each take, loop time
        held: list[Taken] = []  # answered at the end: nothing but time may free the window
        while len(spans) < count and loop.time() < give_up:
            asked = loop.time()
            took = await _take_some(durable, timedelta(seconds=1), many=len(spans) % 2 == 0)
            spans += [(asked, loop.time())] * len(took)
            held += took
        for one in held:
            await _answer(durable, one)
        assert len(spans) == count, f"{len(spans)} of {count} taken: the window stalled"
        # Take i + at_most was counted at least `per` after take i (the store's clock, to the
        # ms): its answer came no sooner than that after take i was asked for.
        for first, later in zip(spans, spans[at_most:], strict=False):
            assert later[1] - first[0] >= per.total_seconds() * 0.95, "over the rate"

    async def test_a_rate_limit_counts_a_take_when_it_is_handed_out(
        self, make_durables: MakeDurables
    ) -> None:
        # A window's room is not spent while a wakeup waits to be read: the fourth take,
        # read half a window after the third, counts from when it was handed out, so the
        # sixth waits a whole window after it. (A store that counted the third and fourth
        # when the window freed hands out the sixth half a window after the fourth.)
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        per = timedelta(milliseconds=500)
        limit = Limit(fresh("rate"), 2, per=per)
        for _ in range(6):
            await scheduler.make_ready(fresh(), limit=limit)
        for delivery in [await taken(scheduler), await taken(scheduler)]:
            await scheduler.done(delivery)
        await scheduler.done(await taken(scheduler))  # the third, when the window frees
        await asyncio.sleep(per.total_seconds() / 2)  # the fourth waits to be read meanwhile
        loop = asyncio.get_running_loop()
        asked = loop.time()
        for delivery in [await taken(scheduler), await taken(scheduler)]:
            await scheduler.done(delivery)
        sixth = await taken(scheduler)
        assert loop.time() - asked >= per.total_seconds() * 0.95, "over the rate"
        await scheduler.done(sixth)


class LimitUnderWorkContract:
    """A limit under the real `work` loop of two workers. Needs `make_durables`."""

    async def test_two_workers_never_run_more_passes_than_the_limit(
        self, make_durables: MakeDurables
    ) -> None:
        durables = await make_durables(LONG, 2)
        limit = Limit(fresh("gateway"), 2)
        running = most = 0

        async def pay(run: Run) -> int:
            async def call() -> int:
                nonlocal running, most
                running += 1
                most = max(most, running)
                await asyncio.sleep(0.03)
                running -= 1
                return 1

            return await run.step("call", call, as_int)

        names = [fresh("order") for _ in range(8)]
        for name in names:
            assert await start(durables[0], "pay", None, name, limit=limit)
        observed = Observed(PATIENCE)
        async with contextlib.AsyncExitStack() as workers:
            for durable in durables:  # four slots each: room for all eight but for the limit
                await workers.enter_async_context(working(durable, {"pay": pay}, observed, 4))
            await observed.until(lambda: all(observed.completed(name) for name in names))
        assert most <= 2, f"{most} passes ran at once under a limit of 2"


class PolicyContract(PriorityContract, LimitContract, ParkingContract, LimitUnderWorkContract):
    """What every store must do with a wakeup's priority and limit. Subclass and override
    `make_durables` and `offline` (`durability.testing.conformance.priorities`)."""
