"""The order saga on every store: fulfilment as a graph, and rollback as a second workflow."""

from __future__ import annotations

import pytest

from durability import Durable, claimed
from integration.effects import Gateway, ReleaseFailed, Warehouse
from integration.orders import FAILED, Fulfilled, Reached, RolledBack, fulfil, unwind_id
from integration.submission import Line, Order


def an_order(*skus: str) -> Order:
    return Order.of("fulfilment", "ada", [Line(sku, 1, 1000) for sku in skus])


async def one_pass(
    durable: Durable, workflow: str, order: Order, gateway: Gateway, warehouse: Warehouse
) -> Fulfilled | RolledBack:
    """One pass of the fulfilment workflow, as a worker would run it."""
    holder = await claimed(durable.checkpointer, workflow)
    try:
        return await fulfil(durable.checkpointer, holder, order, gateway, warehouse)
    finally:
        await durable.checkpointer.release(holder)


async def test_fulfilment_charges_reserves_ships_and_renders_a_receipt_once(
    durable: Durable, tag: str
) -> None:
    gateway, warehouse = Gateway(), Warehouse()
    workflow = f"{tag}-order"
    order = an_order("piano", "stool")

    first = await one_pass(durable, workflow, order, gateway, warehouse)
    again = await one_pass(durable, workflow, order, gateway, warehouse)

    assert isinstance(first, Fulfilled)
    assert "2 line(s), 2000 cents" in first.receipt
    assert again == first
    # The second pass found every node recorded, so it performed no effect.
    assert gateway.calls == {"charge": 1}
    assert warehouse.calls == {"reserve": 1, "ship": 1}
    records = await durable.checkpointer.load(workflow)
    assert list(records) == ["charged", "reserved", "shipped", "receipt"] or list(records) == [
        "reserved",
        "charged",
        "shipped",
        "receipt",
    ]
    assert await durable.checkpointer.load(unwind_id(workflow)) == {}


async def test_a_failed_fulfilment_is_rolled_back_under_a_second_id(
    durable: Durable, tag: str
) -> None:
    gateway, warehouse = Gateway(), Warehouse()
    workflow = f"{tag}-order"

    outcome = await one_pass(
        durable, workflow, an_order("piano", "unshippable"), gateway, warehouse
    )

    assert isinstance(outcome, RolledBack)
    assert "cannot ship unshippable" in outcome.because
    assert outcome.undone["refund"] == f"re-ch-{workflow}"
    assert outcome.undone["release"] == f"rl-rs-{workflow}"
    assert gateway.calls == {"charge": 1, "refund": 1}
    assert warehouse.calls == {"reserve": 1, "release": 1}
    forward = await durable.checkpointer.load(workflow)
    assert "shipped" not in forward and FAILED in forward
    backward = await durable.checkpointer.load(unwind_id(workflow))
    assert list(backward) == ["refunded", "released", "unwound"]


async def test_a_rollback_that_crashes_midway_resumes_without_refunding_twice(
    durable: Durable, tag: str
) -> None:
    gateway = Gateway()
    warehouse = Warehouse(release_failures=1)  # the rollback dies after refunding
    workflow = f"{tag}-order"
    order = an_order("unshippable")

    with pytest.raises(ReleaseFailed):
        await one_pass(durable, workflow, order, gateway, warehouse)
    halfway = await durable.checkpointer.load(unwind_id(workflow))
    assert list(halfway) == ["refunded"]

    outcome = await one_pass(durable, workflow, order, gateway, warehouse)

    assert isinstance(outcome, RolledBack)
    assert gateway.calls == {"charge": 1, "refund": 1}
    # The resumed pass went straight to the rollback: the forward graph was not retried.
    assert warehouse.calls == {"reserve": 1, "release": 1}
    assert list(await durable.checkpointer.load(unwind_id(workflow))) == [
        "refunded",
        "released",
        "unwound",
    ]


def test_what_to_undo_is_read_off_the_forward_records() -> None:
    assert Reached.of({}) == Reached(None, None, None)
    assert Reached.of({"charged": "ch-1", FAILED: "boom"}) == Reached("ch-1", None, "boom")
    assert Reached.of({"charged": "ch-1", "reserved": "rs-1", "shipped": "tr-1"}) == Reached(
        "ch-1", "rs-1", None
    )
