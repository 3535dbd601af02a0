"""Deploying changed code: what every `Durable` owes a workflow whose body changed in flight.

Mixed into `DurableContract`. The store's part is small: its claim reads back the stamps a pass
wrote (`Pass.ordinals`, through `durability.codec.decode_checkpoint`) while every other read
sees bare values. The rest runs the real `work` loop: a workflow started under one body and
stopped at a wait, then a worker with a changed body, which either fails the workflow as
`Nondeterministic` (a step renamed) or carries it on the old way (the change under `patched`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from durability.codec import Stamped, as_text
from durability.determinism import PATCH
from durability.failures import Retry
from durability.interfaces import Durable
from durability.stepwise import Blocked, Run
from durability.testing import Observed
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.standings import inspected, reaches
from durability.testing.conformance.working import PATIENCE, working

#: Where the bodies here stop: a wait only a client's `arrive` answers.
APPROVAL = "approved"
WAITING = Blocked(waiting=frozenset({APPROVAL}))

Body = Callable[[Run], Awaitable[str]]


def _bodies(ran: Counter[str]) -> tuple[Body, Body, Body]:
    """The old body, the same with a step renamed, and that rename guarded by `patched`;
    `ran` counts each step's effect."""

    def effect(name: str) -> Callable[[], str]:
        def perform() -> str:
            ran[name] += 1
            return name

        return perform

    async def old(run: Run) -> str:
        await run.step("charge", effect("charge"), as_text)
        await run.step("reserve", effect("reserve"), as_text)
        approver = await run.awaiting(APPROVAL, as_text)
        return await run.step("ship", effect("ship"), as_text) + " by " + approver

    async def renamed(run: Run) -> str:
        await run.step("charge", effect("charge"), as_text)
        await run.step("reserve-stock", effect("reserve-stock"), as_text)
        approver = await run.awaiting(APPROVAL, as_text)
        return await run.step("ship", effect("ship"), as_text) + " by " + approver

    async def patched(run: Run) -> str:
        await run.step("charge", effect("charge"), as_text)
        if await run.patched("reserve-stock"):
            await run.step("reserve-stock", effect("reserve-stock"), as_text)
        else:
            await run.step("reserve", effect("reserve"), as_text)
        approver = await run.awaiting(APPROVAL, as_text)
        return await run.step("ship", effect("ship"), as_text) + " by " + approver

    return old, renamed, patched


async def _in_flight(durable: Durable, body: Body, workflow: str) -> None:
    """`workflow` started under `body` and stopped at its wait for `APPROVAL`."""
    observed = Observed(PATIENCE)
    async with working(durable, body, observed, pool=1):
        await durable.arrive(workflow, "order", 1)
        await observed.until(lambda: WAITING in observed.outcomes(workflow))
        # The pass ended: let its standing and its finish land before the worker stops.
        await reaches(durable, workflow, "blocked")


class DeployContract:
    """A body changed under workflows in flight is caught, or carried on safely with
    `patched`; records written before stamps still replay. Needs `durable`."""

    async def test_the_claim_reads_back_stamps_that_every_other_read_leaves_out(
        self, durable: Durable
    ) -> None:
        workflow = fresh("stamps")
        checkpointer = durable.checkpointer
        await durable.arrive(workflow, "order", {"sku": "piano"})
        holder = await checkpointer.claim(workflow, LONG, LONG)
        assert holder is not None
        await checkpointer.record(holder, "first", Stamped([1, "x"], 0))
        await checkpointer.record(holder, "branch", Stamped({"k": None}, None))
        await checkpointer.record(holder, "plain", 3)
        await checkpointer.release(holder)
        bare = {"order": {"sku": "piano"}, "first": [1, "x"], "branch": {"k": None}, "plain": 3}
        assert await checkpointer.load(workflow) == bare
        assert [(w.key, w.value) for w in await checkpointer.history(workflow)] == list(
            bare.items()
        )
        again = await checkpointer.claim(workflow, LONG, LONG)
        assert again is not None
        if again.records is not None:  # a store that reads the checkpoint with its claim
            assert dict(again.records) == bare
            assert again.ordinals == {"first": 0, "branch": None}
        await checkpointer.release(again)
        await durable.delete(workflow)

    async def test_a_step_renamed_under_a_workflow_in_flight_fails_it_before_the_new_step_runs(
        self, durable: Durable
    ) -> None:
        workflow = fresh("renamed")
        ran: Counter[str] = Counter()
        old, renamed, _ = _bodies(ran)
        await _in_flight(durable, old, workflow)

        observed = Observed(PATIENCE)
        retrying = Retry(attempts=5)  # a policy that would retry any other failure
        async with working(durable, renamed, observed, pool=1, retry=retrying):
            await durable.arrive(workflow, APPROVAL, "ada")
            await observed.until(lambda: bool(observed.of(workflow, "dead")))
            await reaches(durable, workflow, "failed")

        assert ran == Counter(charge=1, reserve=1)  # nothing of the renamed step ran
        assert observed.of(workflow, "retrying") == []
        failure = (await inspected(durable).status(workflow)).failure
        assert failure is not None and failure.type == "Nondeterministic"
        assert failure.step == "reserve-stock"
        assert "'reserve-stock'" in failure.message and "'reserve'" in failure.message
        await durable.delete(workflow)

    async def test_a_change_under_patched_carries_old_workflows_the_old_way_and_new_ones_the_new(
        self, durable: Durable
    ) -> None:
        before, after = fresh("before"), fresh("after")
        ran: Counter[str] = Counter()
        old, _, patched = _bodies(ran)
        await _in_flight(durable, old, before)

        observed = Observed(PATIENCE)
        async with working(durable, patched, observed, pool=2):
            await durable.arrive(after, "order", 2)
            await observed.until(lambda: WAITING in observed.outcomes(after))
            await durable.arrive(before, APPROVAL, "ada")
            await durable.arrive(after, APPROVAL, "bob")
            await observed.until(lambda: observed.completed(before) and observed.completed(after))

        assert ran == Counter({"charge": 2, "reserve": 1, "reserve-stock": 1, "ship": 2}), ran
        key = f"{PATCH}reserve-stock"
        old_way = await durable.checkpointer.load(before)
        new_way = await durable.checkpointer.load(after)
        assert old_way[key] is False and "reserve-stock" not in old_way
        assert new_way[key] is True and "reserve" not in new_way
        await durable.delete(before)
        await durable.delete(after)

    async def test_a_failed_workflow_retried_under_a_patched_body_completes(
        self, durable: Durable
    ) -> None:
        workflow = fresh("mended")
        ran: Counter[str] = Counter()
        old, renamed, patched = _bodies(ran)
        await _in_flight(durable, old, workflow)
        observed = Observed(PATIENCE)
        async with working(durable, renamed, observed, pool=1):
            await durable.arrive(workflow, APPROVAL, "ada")
            await reaches(durable, workflow, "failed")
        async with working(durable, patched, observed, pool=1):
            assert await inspected(durable).retry(workflow) is True
            await reaches(durable, workflow, "completed")
        assert ran == Counter(charge=1, reserve=1, ship=1)
        await durable.delete(workflow)

    async def test_records_written_without_stamps_still_replay(self, durable: Durable) -> None:
        workflow = fresh("unstamped")
        ran: Counter[str] = Counter()
        _, _, patched = _bodies(ran)
        # What a pass before stamps left: the same records, each a bare value.
        await durable.arrive(workflow, "order", 1)
        holder = await durable.checkpointer.claim(workflow, LONG, LONG)
        assert holder is not None
        await durable.checkpointer.record(holder, "charge", "charge")
        await durable.checkpointer.record(holder, "reserve", "reserve")
        await durable.checkpointer.release(holder)

        observed = Observed(PATIENCE)
        async with working(durable, patched, observed, pool=1):
            await durable.arrive(workflow, APPROVAL, "ada")
            await observed.until(lambda: observed.completed(workflow))
        assert ran == Counter(ship=1)  # replayed, not run again, and the old way
        assert (await durable.checkpointer.load(workflow))[f"{PATCH}reserve-stock"] is False
        await durable.delete(workflow)
