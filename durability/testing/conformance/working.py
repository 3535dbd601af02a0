"""The worker over the store: what `work` owes a workflow, whichever `Durable` it runs on.

These run the real `work` loop on the real clock with short ticks, so they are the slowest
part of the contract (a second or so each). They are what makes "a workflow cannot tell which
store it got" a claim the suite checks rather than one the documentation makes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

from durability.codec import as_int, as_text
from durability.interfaces import Durable
from durability.stepwise import Blocked, Completed, Run, Sleeping
from durability.testing import Observed
from durability.testing.conformance.claims import fresh
from durability.worker import work

TICK = timedelta(milliseconds=50)
WITHIN = timedelta(milliseconds=200)
#: Long enough for any of these scenarios on a loaded machine; the tests never wait it out.
PATIENCE = 15.0


@contextlib.asynccontextmanager
async def _working(
    durable: Durable, body: Callable[[Run], Awaitable[object]], observed: Observed, pool: int
) -> AsyncIterator[None]:
    task = asyncio.create_task(
        work(durable, body, pool=pool, tick=TICK, within=WITHIN, observer=observed)
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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

        async with _working(durable, body, observed, pool=4):
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

        async with _working(durable, body, observed, pool=3), _working(
            durable, body, observed, pool=3
        ):
            for workflow in workflows:
                await durable.arrive(workflow, "go", True)
            await observed.until(lambda: all(observed.completed(w) for w in workflows))

        assert performed == Counter({workflow: 1 for workflow in workflows})
