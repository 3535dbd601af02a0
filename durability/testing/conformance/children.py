"""Bodies by name and child workflows (`durability.bodies`, `Run.child`).

Mixed into `DurableContract`, so every store's suite runs it over the same `durable` fixture,
through the real `work` loop with one slot: a parent waiting for its child holds no worker, so
the child runs in the slot the parent freed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from durability.children import ChildFailed
from durability.codec import as_int
from durability.endings import WorkflowFailed
from durability.interfaces import Durable
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.endings import WITHIN
from durability.testing.conformance.standings import inspected, reaches
from durability.testing.conformance.working import PATIENCE, working


def _refused(run: Run) -> int:
    raise LookupError(f"no refund for {run.workflow}")


class ChildrenContract:
    """A worker runs several bodies by name; a child starts once under its parent, the parent
    waits holding no worker, and the child's ending is the parent's step. Needs `durable`."""

    async def test_a_worker_runs_each_workflow_as_the_body_it_was_started_as(
        self, durable: Durable
    ) -> None:
        async def order(run: Run) -> int:
            return await run.step("total", lambda: run.input(as_int) * 2, as_int)

        async def refund(run: Run) -> int:
            return -run.input(as_int)

        first, second, odd = fresh("order"), fresh("refund"), fresh("odd")
        assert await inspected(durable).start("order", 5, workflow=first) is True
        assert await inspected(durable).start("order", 5, workflow=first) is False  # once
        with pytest.raises(ValueError, match="started as body 'order'"):
            await inspected(durable).start("refund", 5, workflow=first)
        await inspected(durable).start("refund", 7, workflow=second)
        await inspected(durable).start("nobody", 1, workflow=odd)
        observed = Observed(PATIENCE)
        async with working(durable, {"order": order, "refund": refund}, observed, pool=2):
            assert await inspected(durable).result(first, within=WITHIN) == 10
            assert await inspected(durable).result(second, within=WITHIN) == -7
            with pytest.raises(WorkflowFailed) as unknown:
                await inspected(durable).result(odd, within=WITHIN)
        assert unknown.value.failure is not None
        assert unknown.value.failure.type == "UnknownBody"
        assert "'nobody'" in unknown.value.failure.message
        for bad in ("", "a\x00b"):
            with pytest.raises(ValueError, match="body name"):
                await inspected(durable).start(bad, 1, workflow=fresh("bad"))
        with pytest.raises(ValueError):
            await inspected(durable).start("order", 1, workflow="a{b}")

    async def test_a_child_runs_once_and_its_result_is_the_parents_step(
        self, durable: Durable
    ) -> None:
        parent = fresh("parent")
        ran: Counter[str] = Counter()
        go = asyncio.Event()

        async def order(run: Run) -> int:
            ran["order"] += 1
            refunded = await run.child("refund", "refund", run.input(as_int), as_int)
            return refunded + 1

        async def refund(run: Run) -> int:
            ran["refund"] += 1
            await go.wait()
            return await run.step("paid", lambda: run.input(as_int) * 10, as_int)

        observed = Observed(PATIENCE)
        await inspected(durable).start("order", 7, workflow=parent)
        async with working(durable, {"order": order, "refund": refund}, observed, pool=1):
            # One slot: the parent waits for its child without holding it.
            await reaches(durable, parent, "blocked")
            assert (await inspected(durable).status(parent)).waiting == {"refund"}
            await observed.until(lambda: ran["refund"] == 1)
            go.set()
            assert await inspected(durable).result(parent, within=WITHIN) == 71
        child = f"{parent}.refund"
        assert await inspected(durable).result(child, within=WITHIN) == 70
        assert ran == Counter(order=2, refund=1)  # the parent's second pass got the same child
        assert (await durable.checkpointer.load(parent))["engine:child:refund"] == {
            "body": "refund", "id": child}

    async def test_a_childs_failure_reaches_the_parent_naming_it(self, durable: Durable) -> None:
        parent = fresh("parent-caught")

        async def order(run: Run) -> str:
            try:
                await run.child("refund", "refund", 1, as_int)
            except ChildFailed as failed:
                assert failed.failure is not None
                return f"{failed.child}: {failed.failure.type}"
            return "no failure"

        async def refund(run: Run) -> int:
            return await run.step("pay", lambda: _refused(run), as_int)

        observed = Observed(PATIENCE)
        await inspected(durable).start("order", 1, workflow=parent)
        async with working(durable, {"order": order, "refund": refund}, observed, pool=1):
            said = await inspected(durable).result(parent, within=WITHIN)
        assert said == f"{parent}.refund: LookupError"

    async def test_cancelling_the_parent_cancels_its_children(self, durable: Durable) -> None:
        parent = fresh("parent-cancelled")

        async def order(run: Run) -> int:
            return await run.child("refund", "refund", 1, as_int)

        async def refund(run: Run) -> int:
            await run.sleep("hold", timedelta(hours=1))
            return 1

        observed = Observed(PATIENCE)
        await inspected(durable).start("order", 1, workflow=parent)
        async with working(durable, {"order": order, "refund": refund}, observed, pool=1):
            await reaches(durable, f"{parent}.refund", "sleeping")
            assert await inspected(durable).cancel(parent)
            assert (await inspected(durable).status(f"{parent}.refund")).state == "cancelled"
            # the child's cancel tells the parent: a wakeup whose pass runs nothing
            await reaches(durable, parent, "cancelled")
        assert await inspected(durable).cancel(f"{parent}.refund") is False

    async def test_a_child_key_reused_for_another_body_is_refused(
        self, durable: Durable
    ) -> None:
        parent = fresh("parent-reused")
        which = ["refund"]

        async def order(run: Run) -> str:
            return str(await run.child("k", which[0], 1, as_int))

        async def refund(run: Run) -> int:
            await run.sleep("hold", timedelta(hours=1))
            return 1

        observed = Observed(PATIENCE)
        await inspected(durable).start("order", 1, workflow=parent)
        async with working(durable, {"order": order, "refund": refund}, observed, pool=1):
            await reaches(durable, f"{parent}.k", "sleeping")
            which[0] = "order"  # the code changed: the same key now names another body
            await durable.arrive(parent, "poke", "again")
            with pytest.raises(WorkflowFailed) as failed:
                await inspected(durable).result(parent, within=WITHIN)
        assert failed.value.failure is not None
        assert failed.value.failure.type == "ValueError"
        assert "cannot be reused" in failed.value.failure.message
