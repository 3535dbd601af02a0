"""A store that fails under a running pass: the pass tries its write again, and nothing is lost.

Opt-in, because each store fails in its own way and only the store's suite knows how to make it
fail for real: it subclasses `StoreFaultContract` and gives it a `cut` (`docs/conformance.md`
has the example).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from durability.codec import as_text
from durability.interfaces import Durable
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.working import PATIENCE, working

#: Awaited inside a step, makes the store fail the write that follows, for real (kill the
#: connection it is in flight on: Redis `CLIENT KILL`, Postgres `pg_terminate_backend`; hold the
#: SQLite file's lock past its busy timeout), and lets the store recover on its own soon after.
Cut = Callable[[], Awaitable[None]]


class StoreFaultContract:
    """What a pass owes a workflow when its store fails under it. Subclass and override
    `durable` and `cut` (a `Cut`):

        class TestRedisCut(StoreFaultContract):
            @pytest.fixture
            async def durable(self) -> Durable: ...
            @pytest.fixture
            def cut(self) -> Cut: ...
    """

    @pytest.fixture
    def durable(self) -> Durable:
        raise NotImplementedError(f"{type(self).__name__} must override the `durable` fixture")

    @pytest.fixture
    def cut(self) -> Cut:
        raise NotImplementedError(
            f"{type(self).__name__} must override `cut`: make the store fail the write that"
            " follows, for real, and recover by itself"
        )

    async def test_a_record_the_store_failed_is_written_again_and_its_step_runs_once(
        self, durable: Durable, cut: Cut, caplog: pytest.LogCaptureFixture
    ) -> None:
        workflow = fresh("cut")
        observed = Observed(PATIENCE)
        ran: Counter[str] = Counter()

        async def charge() -> str:
            ran["charge"] += 1
            await cut()  # the effect happened; now the store fails the write of its result
            return "charged"

        async def body(run: Run) -> str:
            charged = await run.step("charged", charge, as_text)
            return await run.step("shipped", lambda: f"shipped after {charged}", as_text)

        # A long tick: no renewal of the claim is in flight when the store fails.
        with caplog.at_level(logging.WARNING, logger="durability.faults"):
            async with working(durable, body, observed, pool=1, tick=timedelta(seconds=2)):
                await durable.arrive(workflow, "go", True)
                await observed.until(lambda: observed.completed(workflow))

        assert ran == Counter(charge=1)
        assert "failed" not in observed.kinds(workflow)
        assert observed.kinds(workflow).count("started") == 1
        # The record really did fail, and was tried again, rather than slipping past the cut.
        assert any(workflow in record.getMessage() for record in caplog.records)
        records = await durable.checkpointer.load(workflow)
        assert records["charged"] == "charged"
        assert records["shipped"] == "shipped after charged"
        await durable.delete(workflow)
