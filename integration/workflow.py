"""The one body a worker runs for every order id, and the progress view of one order.

An order id is one workflow. Its first record is the submission (`order`), and the
submission's `kind` picks the body the rest of the workflow runs (`OrderWorkflow`). One id per
order keeps the API to one address per order, and dispatching on a recorded value keeps every
pass of a workflow on the same body. The kinds stay separate bodies rather than one long one so
each module shows one way to spend a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import assert_never

from durability import Checkpointer, Limit, Run, Written, as_text
from durability.bodies import started
from durability.failures import failed
from durability.schedules import FIRING, Firing
from integration import console, nightly, orders, payout
from integration.effects import Gateway, Warehouse
from integration.refund import REFUND, refunder
from integration.submission import Order

#: The key the submission is recorded under. The API supplies it with `arrive`, which is
#: first-writer-wins, so a resubmission addresses the same workflow.
ORDER = "order"


@dataclass(slots=True)
class Effects:
    """What a worker's workflows act on, injected so tests can count and break it.
    `gateway_limit`, if given, is the limit a refund's wakeup carries (`--gateway-limit`):
    the same one the API gives a paying order's, so refunds and payments share its slots."""

    gateway: Gateway = field(default_factory=Gateway)
    warehouse: Warehouse = field(default_factory=Warehouse)
    settlement: timedelta = timedelta(days=2)
    gateway_limit: Limit | None = None


class OrderWorkflow:
    """The worker body: `await work(durable, OrderWorkflow(durable.checkpointer, effects))`.

    | kind | body | done when |
    |---|---|---|
    | `payout` | `integration.payout.payout` | `paid` is recorded |
    | `fulfilment` | `integration.orders.fulfil` (a DAG; rollback as `<id>:unwind`) | `receipt` |
    | `console` | `integration.console.console` | `closed` is recorded |
    | a schedule's firing | the body it names (`integration.nightly`) | its body returns |
    | started as `refund` | `integration.refund` (a rollback's child) | `refunded` |

    It holds the checkpointer because fulfilment runs a graph (`run_durably` takes the store
    and the pass) and its rollback claims a second workflow.
    """

    def __init__(self, checkpointer: Checkpointer, effects: Effects) -> None:
        self.checkpointer = checkpointer
        self.effects = effects
        self.refund = refunder(effects.gateway)

    async def __call__(self, run: Run) -> object:
        # A workflow started by name (`durable.start`, which `run.child` and a schedule's
        # firing use) runs the body it names; an order is started by the API's `arrive` of
        # its submission instead, so it is the default.
        named = started(run.records)
        if named is not None and named.get("body") == REFUND:
            return await self.refund(run)
        if FIRING in run.records:  # started by a schedule, not by an order
            return await nightly.run_firing(run, Firing.from_record(run.records[FIRING]))
        order = await run.awaiting(ORDER, Order.parse)
        match order.kind:
            case "payout":
                return await payout.payout(
                    run, order, self.effects.gateway, settlement=self.effects.settlement
                )
            case "fulfilment":
                outcome = await orders.fulfil(
                    self.checkpointer,
                    run.holder,
                    order,
                    self.effects.gateway,
                    self.effects.warehouse,
                    lambda workflow, charge: run.child(
                        REFUND,
                        REFUND,
                        {"order": workflow, "charge": charge},
                        as_text,
                        limit=self.effects.gateway_limit,
                    ),
                )
                match outcome:
                    case orders.Fulfilled(receipt=receipt):
                        return {"fulfilled": receipt}
                    case orders.RolledBack(because=because, undone=undone):
                        return {"rolled_back": because, "undone": undone}
                    case _:
                        assert_never(outcome)
            case "console":
                return await console.console(run)
            case _:
                assert_never(order.kind)


@dataclass(frozen=True, slots=True)
class Status:
    """Where one order stands: `stage` in words, `waiting` the keys a client may `arrive`,
    `listening` whether it reads messages, `until` the end of a sleep."""

    kind: str
    stage: str
    waiting: frozenset[str] = frozenset()
    listening: bool = False
    until: str | None = None


def status(records: Mapping[str, object], rollback: Mapping[str, object], now: datetime) -> Status:
    """The status of an order from its checkpoint, its rollback's, and the time ("failed" once
    its last attempt failed for good).

    `GET /orders/{id}` renders it beside the history with the store's timestamps: where the
    order stands and what would advance it, all a pure function of the checkpoint (and, for a
    sleep, the time), because the durable state is the whole state.
    """
    try:
        order = Order.parse(records.get(ORDER))
    except ValueError:
        return Status("unknown", "no order submitted")
    if failed(records) is not None:
        # Recorded by the worker as the order's last attempt failed: nothing runs it again
        # until `POST /orders/{id}/retry`, so no stage it reached is still moving.
        return Status(order.kind, "failed")
    match order.kind:
        case "payout":
            stage = payout.progress(records, now)
            until = stage.until.isoformat() if stage.until else None
            return Status(order.kind, stage.stage, stage.waiting, until=until)
        case "fulfilment":
            return Status(order.kind, orders.progress(records, rollback))
        case "console":
            stage_text = console.progress(records)
            return Status(order.kind, stage_text, listening=stage_text == "listening")
        case _:
            assert_never(order.kind)


def history(written: list[Written]) -> list[dict[str, object]]:
    """A checkpoint's history as JSON: one `{key, value, at}` per record, first-recorded first."""
    return [{"key": w.key, "value": w.value, "at": w.at.isoformat()} for w in written]
