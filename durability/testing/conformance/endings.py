"""A workflow's ending: cancel, and the result awaited without polling (`durability.endings`).

Mixed into `DurableContract`, so every store's suite (and a third party's) runs it over the
same `durable` fixture. The race of a cancel against a pass's last write is run many times over
the store itself (`finish_ended` against `cancel`, sent at once) and through the real `work`
loop: exactly one of the two wins every time.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import timedelta

import pytest

from durability.codec import as_int
from durability.endings import (
    ResultTimeout,
    WorkflowCancelled,
    WorkflowFailed,
    completion,
    ended,
    ending_key,
)
from durability.interfaces import Durable, FinishingEnded
from durability.signals import Cancelled
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.bounds import BAD_ID_CASES
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.scheduler import ARRIVES, QUIET
from durability.testing.conformance.standings import inspected, ledger, reaches
from durability.testing.conformance.working import PATIENCE, working

#: How long a test lets `result` wait at most: never waited out by a passing test.
WITHIN = timedelta(seconds=PATIENCE)
#: How many times each race is run.
RACES = 25


async def _one(run: Run) -> int:
    return await run.step("one", lambda: 1, as_int)


async def _completed_unread(durable: Durable, workflow: str) -> None:
    """Once `workflow`'s standing says it completed: a look, which reads none of its records."""
    async with asyncio.timeout(PATIENCE):
        while True:
            standing = (await ledger(durable).look(workflow)).standing
            if standing is not None and standing.state == "completed":
                return
            await asyncio.sleep(0.01)


class CancelContract:
    """`cancel` ends a workflow once: queued, asleep or mid-pass, it runs nothing more; a
    second cancel, or one of a finished workflow, says False. Needs `durable`."""

    async def test_a_queued_workflow_cancelled_never_runs(self, durable: Durable) -> None:
        workflow = fresh("cancel-queued")
        ran: Counter[str] = Counter()

        async def body(run: Run) -> int:
            ran[run.workflow] += 1
            return await _one(run)

        await durable.arrive(workflow, "go", True)
        assert await inspected(durable).cancel(workflow) is True
        assert await inspected(durable).cancel(workflow) is False  # a no-op that says so
        assert (await inspected(durable).status(workflow)).state == "cancelled"
        page = await inspected(durable).list(state="cancelled", prefix=workflow)
        assert [status.workflow for status in page.statuses] == [workflow]
        assert await durable.scheduler.next_ready(QUIET) is None  # out of the queue
        await durable.arrive(workflow, "poke", 1)  # woken whatever way: still nothing runs
        observed = Observed(PATIENCE)
        async with working(durable, body, observed, pool=2):
            await observed.until(lambda: bool(observed.of(workflow, "delivered")))
            await reaches(durable, workflow, "cancelled")
            await asyncio.sleep(0.1)
        assert ran[workflow] == 0
        with pytest.raises(WorkflowCancelled):
            await inspected(durable).result(workflow, within=WITHIN)

    async def test_a_sleeper_cancelled_is_taken_off_the_timer(self, durable: Durable) -> None:
        workflow = fresh("cancel-sleeper")
        observed = Observed(PATIENCE)
        woke: Counter[str] = Counter()

        async def body(run: Run) -> int:
            # Long enough that no loaded machine sees it wake before the test looks: the timer
            # itself is read (its earliest sleeper), not raced against a short nap.
            await run.sleep("nap", timedelta(hours=1))
            woke[run.workflow] += 1
            return 1

        await durable.arrive(workflow, "go", True)
        async with working(durable, body, observed, pool=1):
            await reaches(durable, workflow, "sleeping")
            assert await durable.scheduler.wake_due() is not None  # the nap is on the timer
            assert await inspected(durable).cancel(workflow)
        assert woke[workflow] == 0
        assert await durable.scheduler.wake_due() is None  # and cancelling took it off
        assert (await inspected(durable).status(workflow)).state == "cancelled"

    async def test_a_running_pass_stops_at_its_next_step_and_its_finally_runs_no_step(
        self, durable: Durable
    ) -> None:
        workflow = fresh("cancel-running")
        observed = Observed(PATIENCE)
        inside, let_go = asyncio.Event(), asyncio.Event()
        seen: Counter[str] = Counter()

        async def slow() -> int:
            seen["slow"] += 1
            inside.set()
            await let_go.wait()
            seen["slow finished"] += 1  # never killed mid-effect
            return 2

        def later() -> int:
            seen["later"] += 1
            return 3

        async def body(run: Run) -> int:
            try:
                await run.step("slow", slow, as_int)
                return await run.step("later", later, as_int)
            except Cancelled:
                seen["cancelled"] += 1
                raise
            finally:
                seen["finally"] += 1  # plain code runs; a step here raises Cancelled unrun
                try:
                    await run.step("cleanup", later, as_int)
                except Cancelled:
                    seen["cleanup refused"] += 1

        await durable.arrive(workflow, "go", True)
        async with working(durable, body, observed, pool=1):
            await asyncio.wait_for(inside.wait(), PATIENCE)
            assert await inspected(durable).cancel(workflow)
            let_go.set()
            await observed.until(lambda: bool(observed.of(workflow, "cancelled")))
        assert seen == Counter({"slow": 1, "slow finished": 1, "cancelled": 1, "finally": 1,
                                "cleanup refused": 1})
        records = await durable.checkpointer.load(workflow)
        assert "slow" not in records and "cleanup" not in records  # its result was refused
        assert (await inspected(durable).status(workflow)).state == "cancelled"
        assert observed.kinds(workflow).count("started") == 1

    async def test_a_finished_workflow_is_not_cancelled(self, durable: Durable) -> None:
        workflow = fresh("cancel-finished")
        observed = Observed(PATIENCE)
        await durable.arrive(workflow, "go", True)
        async with working(durable, _one, observed, pool=1):
            await reaches(durable, workflow, "completed")
        assert await inspected(durable).cancel(workflow) is False
        assert (await inspected(durable).status(workflow)).state == "completed"
        assert await inspected(durable).result(workflow, within=WITHIN) == 1

    async def test_retry_revives_a_cancelled_workflow_only_when_asked(
        self, durable: Durable
    ) -> None:
        workflow = fresh("cancel-revived")
        await durable.arrive(workflow, "go", True)
        assert await inspected(durable).cancel(workflow)
        assert await inspected(durable).retry(workflow) is False
        assert (await inspected(durable).status(workflow)).state == "cancelled"
        assert await inspected(durable).retry(workflow, cancelled=True) is True
        observed = Observed(PATIENCE)
        async with working(durable, _one, observed, pool=1):
            assert await inspected(durable).result(workflow, within=WITHIN) == 1
        assert await inspected(durable).cancel(workflow) is False  # this epoch completed

    async def test_cancel_refuses_a_bad_id(self, durable: Durable) -> None:
        for bad, error, _ in BAD_ID_CASES:
            with pytest.raises(error):
                await inspected(durable).cancel(bad)

    async def test_cancel_against_the_last_write_has_one_winner(self, durable: Durable) -> None:
        """The store's half of the race: a pass's `finish_ended` and a `cancel`, sent together
        (in either order, by a random pause): exactly one ends the workflow."""
        if not isinstance(durable, FinishingEnded):
            pytest.skip("the durable writes no ending with its finish")
        wins: Counter[str] = Counter()
        for n in range(RACES):
            wins[await _race(durable, n)] += 1
        assert sum(wins.values()) == RACES

    async def test_cancel_against_a_worker_finishing_has_one_winner(
        self, durable: Durable
    ) -> None:
        """The race through `work`: each workflow either completes (its cancel says False) or
        is cancelled (its result raises), never both, never neither."""
        observed = Observed(PATIENCE)
        names = [fresh(f"worker-race-{n}") for n in range(RACES)]
        for name in names:
            await durable.arrive(name, "go", True)
        lost = both = 0
        async with working(durable, _one, observed, pool=8):
            cancels = []
            for name in names:
                await asyncio.sleep(random.random() / 100)
                cancels.append(await inspected(durable).cancel(name))
            for name, cancelled in zip(names, cancels, strict=True):
                try:
                    value = await inspected(durable).result(name, within=WITHIN)
                except WorkflowCancelled:
                    lost += not cancelled
                else:
                    both += cancelled
                    assert value == 1
        assert (lost, both) == (0, 0)


async def _paused() -> None:
    await asyncio.sleep(random.random() / 200)


async def _race(durable: FinishingEnded, n: int) -> str:
    """One race of a pass's `finish_ended` against a `cancel`, each after a random pause; the
    winner, after checking there was exactly one and the store agrees."""
    assert isinstance(durable, Durable)
    workflow = fresh(f"race-{n}")
    await durable.arrive(workflow, "go", True)
    taken = await durable.take(ARRIVES, LONG, LONG)
    assert taken is not None and taken.holder is not None
    holder, delivery = taken.holder, taken.delivery
    key = ending_key(holder.records or {})

    async def finishing() -> bool:
        await _paused()
        return await durable.finish_ended(holder, delivery, key, completion(n), "completed", {})

    async def cancelling() -> bool:
        await _paused()
        return await inspected(durable).cancel(workflow)

    finished, cancelled = await asyncio.gather(finishing(), cancelling())
    assert finished != cancelled, f"race {n}: finish {finished}, cancel {cancelled}"
    ending = ended(await durable.checkpointer.load(workflow))
    assert ending is not None
    assert ending.state == ("completed" if finished else "cancelled")
    assert (await inspected(durable).status(workflow)).state == ending.state
    return "finish" if finished else "cancel"


class ResultContract:
    """`result` waits for a workflow's ending and says what it was: the value, the failure, or
    the cancel; a bad `within` or id is refused. Needs `durable`."""

    async def test_result_waits_for_the_ending(self, durable: Durable) -> None:
        workflow = fresh("result")
        observed = Observed(PATIENCE)
        waiting = asyncio.create_task(inspected(durable).result(workflow, within=WITHIN))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await durable.arrive(workflow, "go", True)
        async with working(durable, _one, observed, pool=1):
            assert await asyncio.wait_for(waiting, PATIENCE) == 1

    async def test_result_raises_the_failure(self, durable: Durable) -> None:
        workflow = fresh("result-failed")
        observed = Observed(PATIENCE)

        def broken() -> int:
            raise LookupError("no such card")

        async def body(run: Run) -> int:
            return await run.step("charge", broken, as_int)

        await durable.arrive(workflow, "go", True)
        async with working(durable, body, observed, pool=1):
            with pytest.raises(WorkflowFailed) as failed:
                await inspected(durable).result(workflow, within=WITHIN)
        assert failed.value.failure is not None
        assert failed.value.failure.type == "LookupError"
        assert failed.value.failure.step == "charge"
        assert await inspected(durable).cancel(workflow) is False  # failed is an ending

    async def test_result_is_the_value_as_returned_and_says_when_it_was_not_kept(
        self, durable: Durable
    ) -> None:
        # Memory keeps an ending as a checked copy rather than text: it is still what the body
        # returned then, whatever the body's code does to that value afterwards, and a value
        # the codec refuses is still refused at the ending (whose record says so).
        returned: list[object] = ["as returned"]
        kept, unkept = fresh("result-kept"), fresh("result-unkept")

        async def body(run: Run) -> object:
            await run.step("one", lambda: 1, as_int)
            return returned if run.workflow == kept else ("a", "tuple")

        for workflow in (kept, unkept):
            await durable.arrive(workflow, "go", True)
        async with working(durable, body, Observed(PATIENCE), pool=2):
            await _completed_unread(durable, kept)
            returned.append("changed after")
            assert await inspected(durable).result(kept, within=WITHIN) == ["as returned"]
            with pytest.raises(TypeError, match="completed with a tuple"):
                await inspected(durable).result(unkept, within=WITHIN)

    async def test_result_times_out_and_refuses_bad_input(self, durable: Durable) -> None:
        workflow = fresh("result-never")
        with pytest.raises(ResultTimeout):
            await inspected(durable).result(workflow, within=timedelta(milliseconds=50))
        for within in (timedelta(0), timedelta(seconds=-1)):
            with pytest.raises(ValueError, match="within"):
                await inspected(durable).result(workflow, within=within)
        for bad, error, _ in BAD_ID_CASES:
            with pytest.raises(error):
                await inspected(durable).result(bad, within=WITHIN)
