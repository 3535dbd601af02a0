"""The worker over the store: what `work` owes a workflow, whichever `Durable` it runs on.

These run the real `work` loop on the real clock with short ticks, so they are the slowest
part of the contract (a second or so each). They are what makes "a workflow cannot tell which
store it got" a claim the suite checks rather than one the documentation makes.

Where a scenario needs a write to go wrong at a precise moment, the store's checkpointer is
wrapped (`LateReply`): the write reaches the real store, and only its reply is held back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from durability.codec import as_int, as_text
from durability.failures import Retry
from durability.interfaces import Checkpointer, Durable
from durability.split import SplitDurable
from durability.stepwise import Blocked, Completed, Run, Sleeping
from durability.testing import Observed
from durability.testing.conformance.claims import fresh
from durability.values import Pass, Recorded
from durability.worker import work

TICK = timedelta(milliseconds=50)
WITHIN = timedelta(milliseconds=200)
#: Long enough for any of these scenarios on a loaded machine; the tests never wait it out.
PATIENCE = 15.0


@contextlib.asynccontextmanager
async def working(
    durable: Durable,
    body: Callable[[Run], Awaitable[object]] | Mapping[str, Callable[[Run], Awaitable[object]]],
    observed: Observed,
    pool: int,
    **settings: Any,
) -> AsyncIterator[asyncio.Task[None]]:
    """`work` over `durable` for the block (short ticks unless `settings` say otherwise),
    cancelled on the way out."""
    options: dict[str, Any] = {"tick": TICK, "within": WITHIN} | settings
    task = asyncio.create_task(work(durable, body, pool=pool, observer=observed, **options))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class LateReply:
    """The store's checkpointer, except that the first record of `key` lands and then never
    answers (`landed` is set once it is in the store): what a pass sees when it is cancelled
    after its write reached the server and before the reply came back."""

    def __init__(self, inner: Checkpointer, key: str) -> None:
        self._inner = inner
        self._key = key
        self.landed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        recorded = await self._inner.record(holder, key, value)
        if key == self._key and not self.landed.is_set():
            self.landed.set()
            await asyncio.Event().wait()  # the reply that never comes; only a cancel ends it
        return recorded


class CountedClaims:
    """The store's checkpointer, counting the claims asked for each workflow (`claims`)."""

    def __init__(self, inner: Checkpointer) -> None:
        self._inner = inner
        self.claims: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        self.claims[workflow] += 1
        return await self._inner.claim(workflow, budget, alive)


async def taken_over_as_its_claim_lapses(durable: Durable) -> Observed:
    """A worker that took a workflow and died, its claim kept alive a moment past its delivery
    (as a write just before dying keeps it). The scenario for a store's own suite, over a
    `durable` whose lease is short (half a second or so; the contract's fixtures keep long
    ones): a worker takes the lapsed delivery over and, the store having said it lapsed,
    asks again for the claim until it lapses, rather than handing the delivery back to look
    at again after `contended` (long here, so that path would not finish in time). Returns
    what the worker was seen doing, after checking the pass ran once, and without a hand-back.
    """
    lease = durable.scheduler.lease
    workflow = fresh("takeover")
    observed = Observed(PATIENCE)
    await durable.arrive(workflow, "go", True)
    dead = await durable.take(timedelta(seconds=5), timedelta(minutes=1), lease)
    assert dead is not None and dead.holder is not None and dead.delivery.workflow == workflow
    # The claim now lapses a fifth of a lease after the delivery: inside the tick and the
    # nudge a takeover asks again for (a tick is a quarter of the lease here).
    await durable.checkpointer.extend(dead.holder, timedelta(minutes=1), lease * 6 / 5)

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 2, as_int)

    async with working(durable, body, observed, pool=1, tick=lease / 4,
                       contended=timedelta(minutes=1)):
        await observed.until(lambda: observed.completed(workflow))
    assert observed.kinds(workflow).count("started") == 1
    assert not observed.of(workflow, "contended"), "handed back instead of taken as it lapsed"
    await durable.delete(workflow)
    return observed


class Foreign(BaseException):
    """A third party's own BaseException: neither a failure type nor the library's."""


def _no_such_sku() -> int:
    raise LookupError("no such sku")


class WorkContract:
    """`work` end to end over the subclass's `durable` fixture."""

    async def test_work_carries_a_workflow_through_a_step_a_sleep_an_approval_and_its_inbox(
        self, durable: Durable
    ) -> None:
        workflow = fresh()
        observed = Observed(PATIENCE)
        performed: Counter[str] = Counter()

        def charge() -> int:
            performed["charge"] += 1
            return 42

        async def body(run: Run) -> dict[str, object]:
            charged = await run.step("charge", charge, as_int)
            await run.sleep("cool-off", timedelta(milliseconds=150))
            approver = await run.awaiting("approved-by", as_text)
            mail = await run.receive("mail")
            return {"charged": charged, "approver": approver, "mail": [e.value for e in mail]}

        async with working(durable, body, observed, pool=4):
            await durable.arrive(workflow, "order", 7)
            waiting = Blocked(waiting=frozenset({"approved-by"}))
            await observed.until(lambda: waiting in observed.outcomes(workflow))
            await durable.arrive(workflow, "approved-by", "ada")
            listening = Blocked(listening=frozenset({"mail"}))
            await observed.until(lambda: listening in observed.outcomes(workflow))
            await durable.deliver(workflow, "hello")
            await observed.until(lambda: observed.completed(workflow))

        outcomes = observed.outcomes(workflow)
        assert isinstance(outcomes[0], Sleeping) and outcomes[0].key == "cool-off"
        assert outcomes[-1] == Completed({"charged": 42, "approver": "ada", "mail": ["hello"]})
        assert performed == Counter(charge=1)
        records = await durable.checkpointer.load(workflow)
        assert records["charge"] == 42 and records["approved-by"] == "ada"

    async def test_two_workers_share_a_queue_and_run_every_step_once(
        self, durable: Durable
    ) -> None:
        workflows = [fresh() for _ in range(12)]
        observed = Observed(PATIENCE)
        performed: Counter[str] = Counter()

        async def body(run: Run) -> int:
            def effect() -> int:
                performed[run.workflow] += 1
                return len(performed)

            first = await run.step("first", effect, as_int)
            await asyncio.sleep(0.005)  # long enough for the other worker to look
            return first

        async with working(durable, body, observed, pool=3), working(
            durable, body, observed, pool=3
        ):
            for workflow in workflows:
                await durable.arrive(workflow, "go", True)
            await observed.until(lambda: all(observed.completed(w) for w in workflows))

        assert performed == Counter({workflow: 1 for workflow in workflows})

    async def test_a_wakeup_that_meets_a_live_pass_asks_for_its_claim_once(
        self, durable: Durable
    ) -> None:
        # A wakeup landing mid-pass is fresh, not a takeover: the pass holding the claim is
        # alive and keeps it for as long as it runs, so asking again soon would only cost
        # requests. It asks once, and the delivery comes back after `contended`.
        workflow = fresh("busy")
        observed = Observed(PATIENCE)
        counted = CountedClaims(durable.checkpointer)
        going = asyncio.Event()
        passes: list[int] = []

        async def body(run: Run) -> int:
            passes.append(len(passes) + 1)
            if len(passes) == 1:
                await going.wait()  # the first pass runs on, holding its claim
            return len(passes)

        later = timedelta(milliseconds=600)  # no second look inside the test's count
        async with working(SplitDurable(counted, durable.scheduler), body, observed, pool=2,
                           contended=later):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: bool(observed.of(workflow, "started")))
            await durable.scheduler.make_ready(workflow)  # the wakeup that lands mid-pass
            await observed.until(lambda: bool(observed.of(workflow, "contended")))
            # The first pass's claim, and the wakeup's one: no asking again.
            assert counted.claims[workflow] == 2
            assert len(observed.of(workflow, "contended")) == 1
            going.set()
            # The wakeup's pass comes after `contended`, finds the workflow ended, runs nothing.
            await observed.until(lambda: observed.kinds(workflow).count("started") == 2)
            await asyncio.sleep(0.1)
        assert observed.outcomes(workflow) == [Completed(1)]
        assert passes == [1]
        await durable.delete(workflow)

    # --- what no body can do, and what a cut-short pass still owes ----------------------------

    @pytest.mark.parametrize("poison", ["failure-beside-a-suspension", "keyboard", "foreign"])
    async def test_no_body_can_stop_the_worker(self, durable: Durable, poison: str) -> None:
        bad, good = fresh("poison"), fresh("after")
        observed = Observed(PATIENCE)

        async def body(run: Run) -> object:
            if run.workflow != bad:
                return await run.step("fine", lambda: "fine", as_text)
            if poison == "keyboard":
                raise KeyboardInterrupt  # asyncio would re-raise it out of the event loop
            if poison == "foreign":
                raise Foreign("not ours")
            async with asyncio.TaskGroup() as group:
                group.create_task(run.step("charged", _no_such_sku, as_int))
                group.create_task(run.awaiting("approved-by", as_text))
            return None

        async with working(durable, body, observed, pool=2) as worker:
            await durable.arrive(bad, "go", True)
            await observed.until(lambda: bool(observed.of(bad, "dead")))
            await durable.arrive(good, "go", True)
            await observed.until(lambda: observed.completed(good))
            assert not worker.done()
        # One attempt (the default retries nothing), so the workflow has failed: "dead".
        assert observed.kinds(bad) == ["delivered", "started", "failed", "dead"]
        # Settled: the claim was released, so nobody waits out a lease to inherit the poison.
        holder = await durable.checkpointer.claim(bad, WITHIN, WITHIN)
        assert holder is not None
        await durable.checkpointer.release(holder)
        await durable.delete(bad)

    @pytest.mark.parametrize("sibling", ["suspends", "fails"])
    async def test_a_sleep_whose_reply_a_sibling_cut_short_still_wakes_the_workflow(
        self, durable: Durable, sibling: str
    ) -> None:
        workflow = fresh("cut")
        observed = Observed(PATIENCE)
        late = LateReply(durable.checkpointer, "nap")
        failures: list[int] = []

        async def stop_it(run: Run) -> None:
            await late.landed.wait()  # the deadline is in the store; its reply is not back
            if sibling == "suspends":
                await run.awaiting("approved-by", as_text)
            elif not failures:
                failures.append(1)
                raise LookupError("the sibling failed")

        async def body(run: Run) -> str:
            async with asyncio.TaskGroup() as group:
                group.create_task(run.sleep("nap", timedelta(milliseconds=200)))
                group.create_task(stop_it(run))
            return "woke"

        # No sweep within the test, and a retry far off: only the deadline the first pass noted
        # can bring it back in time.
        cut = SplitDurable(late, durable.scheduler)
        later = Retry(initial=timedelta(minutes=5), jitter=0)
        async with working(cut, body, observed, pool=2, sweep=timedelta(minutes=5), retry=later):
            await durable.arrive(workflow, "go", True)
            if sibling == "suspends":
                await observed.until(lambda: len(observed.outcomes(workflow)) == 2)
            else:
                await observed.until(lambda: observed.completed(workflow))
        outcomes = observed.outcomes(workflow)
        records = await durable.checkpointer.load(workflow)
        due = datetime.fromisoformat(str(records["nap"]))
        if sibling == "suspends":
            assert outcomes == [Sleeping("nap", due), Blocked(waiting=frozenset({"approved-by"}))]
        else:
            assert observed.kinds(workflow).count("failed") == 1
            assert outcomes == [Completed("woke")]
        # The second pass came from the deadline, nothing else.
        assert observed.of(workflow, "started")[1].at >= due.timestamp()
        await durable.delete(workflow)

    async def test_the_worker_s_clock_is_the_clock_of_its_passes(self, durable: Durable) -> None:
        workflow = fresh("clock")
        observed = Observed(PATIENCE)
        ahead = timedelta(days=3)

        def clock() -> datetime:
            return datetime.now().astimezone() + ahead

        async def body(run: Run) -> None:
            await run.sleep("settling", timedelta(days=1))

        async with working(durable, body, observed, pool=1, clock=clock):
            started = clock()
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: bool(observed.outcomes(workflow)))
        (sleeping,) = observed.outcomes(workflow)
        assert isinstance(sleeping, Sleeping)
        assert sleeping.due - started >= timedelta(days=1)  # on the worker's clock, not the wall's
        recorded = (await durable.checkpointer.load(workflow))["settling"]
        assert datetime.fromisoformat(str(recorded)) == sleeping.due
        await durable.delete(workflow)
