"""The payout and the console on every store, each run by an in-process worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from durability import Durable
from integration.console import said
from integration.effects import Gateway
from integration.payout import APPROVAL, progress
from integration.submission import Line, Order
from integration.workflow import ORDER, Effects

# Fixture types (the conftest beside this file builds them).
Worker = Any
Eventually = Any


async def test_payout_captures_each_line_once_sleeps_then_pays_on_approval(
    durable: Durable, tag: str, worker: Worker, eventually: Eventually
) -> None:
    effects = Effects(gateway=Gateway(), settlement=timedelta(milliseconds=300))
    workflow = f"{tag}-payout"
    order = Order.of("payout", "ada", [Line("piano", 1, 120000), Line("stool", 2, 5000)])
    checkpointer = durable.checkpointer

    async def stage_is(stage: str) -> bool:
        records = await checkpointer.load(workflow)
        return progress(records, datetime.now(UTC)).stage == stage

    async with worker(durable, effects):
        await durable.arrive(workflow, ORDER, order.to_record())
        await eventually(lambda: stage_is("awaiting approval"), "the payout waits for approval")
        assert effects.gateway.calls == {"capture": 2}
        await durable.arrive(workflow, APPROVAL, "dana")
        await eventually(lambda: stage_is("paid"), "the payout is paid")

    assert effects.gateway.calls == {"capture": 2, "payout": 1}
    written = await checkpointer.history(workflow)
    assert [w.key for w in written] == [
        ORDER,
        "items",
        "captured:piano",
        "captured:stool",
        "settling",
        APPROVAL,
        "paid",
        "engine:ended:000000",  # the workflow's ending, with its value
    ]
    # The deadline was recorded, not the duration, and the approval came after it.
    due = datetime.fromisoformat(str(written[4].value))
    assert written[4].at < due <= written[5].at


async def test_console_answers_every_message_once_in_order_until_bye(
    durable: Durable, tag: str, worker: Worker, eventually: Eventually
) -> None:
    workflow = f"{tag}-console"
    checkpointer = durable.checkpointer

    async def recorded(key: str) -> bool:
        return key in await checkpointer.load(workflow)

    async with worker(durable, Effects()):
        await durable.arrive(workflow, ORDER, Order.of("console", "ada", []).to_record())
        await durable.deliver(workflow, {"text": "hello"})
        await eventually(lambda: recorded("answer:0"), "the first turn is answered")
        for text in ("how are you", "bye"):
            await durable.deliver(workflow, {"text": text})
        await eventually(lambda: recorded("closed"), "the console closes on bye")

    records = await checkpointer.load(workflow)
    assert records["answer:0"] == "turn 0: heard 1 message(s): hello"
    answers = [str(v) for k, v in records.items() if k.startswith("answer:")]
    assert records["closed"] == answers
    # However the later messages were split into turns, each was heard once, in order.
    heard = [text for answer in answers for text in answer.split(": ", 2)[2].split(" | ")]
    assert heard == ["hello", "how are you", "bye"]


def test_a_message_is_its_text() -> None:
    from durability import Entry

    assert said(Entry("inbox:1", {"text": "hi"})) == "hi"
    assert said(Entry("inbox:1", "plain")) == "plain"


async def test_worker_fulfils_one_order_and_rolls_back_another(
    durable: Durable, tag: str, worker: Worker, eventually: Eventually
) -> None:
    from integration.effects import Warehouse
    from integration.orders import unwind_id
    from integration.workflow import status

    effects = Effects(gateway=Gateway(), warehouse=Warehouse())
    checkpointer = durable.checkpointer
    good, bad = f"{tag}-good", f"{tag}-bad"

    async def stage(workflow: str) -> str:
        records = await checkpointer.load(workflow)
        rollback = await checkpointer.load(unwind_id(workflow))
        return status(records, rollback, datetime.now(UTC)).stage

    async def stage_is(workflow: str, wanted: str) -> bool:
        return await stage(workflow) == wanted

    async with worker(durable, effects):
        for workflow, sku in ((good, "piano"), (bad, "unshippable")):
            order = Order.of("fulfilment", "ada", [Line(sku, 1, 500)])
            await durable.arrive(workflow, ORDER, order.to_record())
        await eventually(lambda: stage_is(good, "fulfilled"), "the good order is fulfilled")
        await eventually(lambda: stage_is(bad, "rolled back"), "the bad order is rolled back")

    assert effects.gateway.calls == {"charge": 2, "refund": 1}
    assert effects.warehouse.calls == {"reserve": 2, "ship": 1, "release": 1}


async def test_a_rollback_refunds_through_one_child_workflow_however_many_passes_reach_it(
    durable: Any, tag: str, worker: Worker, eventually: Eventually
) -> None:
    from integration.effects import Warehouse
    from integration.orders import unwind_id
    from integration.refund import REFUND

    # The rollback fails once after the refund (its release), so the order fails and its
    # retry is a further pass through the rollback: the refund must not start again.
    effects = Effects(gateway=Gateway(), warehouse=Warehouse(release_failures=1))
    checkpointer = durable.checkpointer
    order, refund = f"{tag}-bad", f"{tag}-bad.refund"

    async def state_is(workflow: str, wanted: str) -> bool:
        return bool((await durable.status(workflow)).state == wanted)

    async with worker(durable, effects):
        submitted = Order.of("fulfilment", "ada", [Line("unshippable", 1, 500)])
        await durable.arrive(order, ORDER, submitted.to_record())
        await eventually(lambda: state_is(order, "failed"), "the rollback fails at the release")
        assert await state_is(refund, "completed")
        assert (await checkpointer.load(unwind_id(order)))["refunded"] == f"re-ch-{order}"
        assert await durable.retry(order)
        await eventually(lambda: state_is(order, "completed"), "the retried rollback completes")

    # One child, started once, refunded once under its own id; its value is the order's step
    # result and the rollback's record of the refund.
    assert effects.gateway.calls == {"charge": 1, "refund": 1}
    assert effects.warehouse.calls == {"reserve": 1, "release": 1}  # the failed one did not
    records = await checkpointer.load(order)
    assert [key for key in records if key.startswith("engine:child:")] == [f"engine:child:{REFUND}"]
    assert records[f"engine:child:{REFUND}"] == {"body": REFUND, "id": refund}
    ending = records[REFUND]
    assert isinstance(ending, dict)
    assert (ending["state"], ending["value"]) == ("completed", f"re-ch-{order}")
    child = await checkpointer.load(refund)
    assert child["refunded"] == f"re-ch-{order}"
    assert not await durable.start(
        REFUND, {"order": order, "charge": f"ch-{order}"}, workflow=refund
    )
    undone = (await checkpointer.load(unwind_id(order)))["unwound"]
    assert undone["refund"] == f"re-ch-{order}"
