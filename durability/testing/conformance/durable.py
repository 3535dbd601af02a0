"""The moves that cross both halves: arrive, deliver, delete.

A store's suite subclasses `DurableContract` and overrides `durable` with a `Durable` whose
scheduler is fresh and on its own queue, so that "nothing is ready" can be asserted. The tests
check both halves after each move, since a move that lands in one half only is the bug here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durability.checks import INBOX
from durability.codec import Unencodable
from durability.interfaces import Durable
from durability.signals import Fenced
from durability.testing.conformance.bounds import ABSURD_CASES, BAD_ID_CASES
from durability.testing.conformance.children import ChildrenContract
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.deploying import DeployContract
from durability.testing.conformance.endings import CancelContract, ResultContract
from durability.testing.conformance.failures import FailuresContract
from durability.testing.conformance.scheduler import ARRIVES, QUIET
from durability.testing.conformance.schedules import ScheduleContract
from durability.testing.conformance.working import WorkContract
from durability.values import Recorded


async def _ready(durable: Durable, workflow: str) -> None:
    delivery = await durable.scheduler.next_ready(ARRIVES)
    assert delivery is not None, f"{workflow} should have been made ready"
    assert delivery.workflow == workflow
    await durable.scheduler.done(delivery)


async def _quiet(durable: Durable) -> None:
    assert await durable.scheduler.wake_due() is None
    assert await durable.scheduler.next_ready(QUIET) is None


class DurableContract(
    WorkContract,
    FailuresContract,
    DeployContract,
    CancelContract,
    ResultContract,
    ChildrenContract,
    ScheduleContract,
):
    """What every `Durable` must do, alone and under `work`, when its workflows fail, end,
    start children, and when their body changes in flight. Subclass and override `durable`."""

    @pytest.fixture
    def durable(self) -> Durable:
        raise NotImplementedError(
            f"{type(self).__name__} must override the `durable` fixture: a Durable over a"
            " fresh scheduler on its own queue"
        )

    async def test_is_a_durable(self, durable: Durable) -> None:
        assert isinstance(durable, Durable)

    async def test_arrive_records_the_value_and_makes_the_workflow_ready(
        self, durable: Durable
    ) -> None:
        workflow = fresh()
        assert await durable.arrive(workflow, "order", {"sku": "piano"}) == Recorded(
            {"sku": "piano"}, True
        )
        assert await durable.checkpointer.load(workflow) == {"order": {"sku": "piano"}}
        await _ready(durable, workflow)

    async def test_a_second_arrival_keeps_the_first_value(self, durable: Durable) -> None:
        workflow = fresh()
        await durable.arrive(workflow, "approved-by", "ada")
        assert await durable.arrive(workflow, "approved-by", "bob") == Recorded("ada", False)
        assert await durable.checkpointer.load(workflow) == {"approved-by": "ada"}
        await _ready(durable, workflow)

    async def test_a_refused_arrival_wakes_nothing(self, durable: Durable) -> None:
        workflow = fresh()
        with pytest.raises(ValueError):
            await durable.arrive(workflow, f"{INBOX}1", 1)
        with pytest.raises(Unencodable):
            await durable.arrive(workflow, "order", ("not", "json"))
        assert await durable.checkpointer.load(workflow) == {}
        await _quiet(durable)

    async def test_deliver_appends_an_entry_and_makes_the_workflow_ready(
        self, durable: Durable
    ) -> None:
        workflow = fresh()
        entry = await durable.deliver(workflow, {"text": "hello"})
        assert entry.key.startswith(INBOX)
        assert entry.value == {"text": "hello"}
        second = await durable.deliver(workflow, {"text": "again"})
        assert second.key > entry.key
        assert await durable.checkpointer.load(workflow) == {
            entry.key: {"text": "hello"},
            second.key: {"text": "again"},
        }
        await _ready(durable, workflow)

    async def test_a_refused_delivery_wakes_nothing(self, durable: Durable) -> None:
        workflow = fresh()
        with pytest.raises(Unencodable):
            await durable.deliver(workflow, {1: "int keys come back as text"})
        assert await durable.checkpointer.load(workflow) == {}
        await _quiet(durable)

    async def test_delete_forgets_records_and_every_wakeup(self, durable: Durable) -> None:
        workflow = fresh()
        await durable.arrive(workflow, "order", 1)
        await durable.arrive(workflow, "payment", 2)
        delivery = await durable.scheduler.next_ready(ARRIVES)
        assert delivery is not None
        assert await durable.scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        await durable.scheduler.done(delivery)
        await durable.deliver(workflow, "message")  # ready again, as well as sleeping
        running = await durable.checkpointer.claim(workflow, LONG, LONG)
        assert running is not None
        await durable.checkpointer.record(running, "charged", True)

        assert await durable.delete(workflow) == 4
        assert await durable.checkpointer.load(workflow) == {}
        assert await durable.checkpointer.history(workflow) == []
        with pytest.raises(Fenced):
            await durable.checkpointer.record(running, "shipped", True)
        await _quiet(durable)

    async def test_delete_during_a_pass_declines_the_pass_s_wakeup(self, durable: Durable) -> None:
        workflow = fresh()
        await durable.arrive(workflow, "order", 1)
        delivery = await durable.scheduler.next_ready(ARRIVES)
        assert delivery is not None
        assert await durable.delete(workflow) == 1
        # The worker answers for its delivery after the delete: it must not bring it back.
        assert not await durable.scheduler.wake_at(delivery, datetime.now(UTC))
        await durable.scheduler.done(delivery)
        await _quiet(durable)
        assert await durable.checkpointer.load(workflow) == {}

    async def test_delete_of_an_unknown_workflow_is_zero(self, durable: Durable) -> None:
        assert await durable.delete(fresh()) == 0

    async def test_a_bad_workflow_id_is_refused_and_wakes_nothing(
        self, durable: Durable
    ) -> None:
        for workflow, error, _ in BAD_ID_CASES:
            for call in (
                durable.arrive(workflow, "order", 1),
                durable.deliver(workflow, 1),
                durable.delete(workflow),
            ):
                with pytest.raises(error, match="workflow id"):
                    await call
        await _quiet(durable)

    async def test_a_take_with_an_absurd_duration_takes_nothing(self, durable: Durable) -> None:
        workflow = fresh()
        await durable.arrive(workflow, "order", 1)
        for duration, error, _ in ABSURD_CASES:
            with pytest.raises(error, match="budget"):
                await durable.take(ARRIVES, duration, LONG)
            with pytest.raises(error, match="alive"):
                await durable.take(ARRIVES, LONG, duration)
            with pytest.raises(error, match="within"):
                await durable.take(duration, LONG, LONG)
        # Refused before the delivery was taken or the claim written: both still free.
        taken = await durable.take(ARRIVES, LONG, LONG)
        assert taken is not None and taken.delivery.workflow == workflow
        assert taken.holder is not None
        await durable.finish(taken.holder, taken.delivery)
