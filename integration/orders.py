"""Order fulfilment as a graph, and its rollback as a second workflow.

Forward (`forward`) charges and reserves at once, then ships and writes a receipt, run by
`run_durably` under the order's id. Rollback is not a mechanism, it is another workflow
(`backward`) under another id, `unwind_id(workflow)`, which `fulfil` runs under its own claim
when the forward graph raises. The effects (a `Gateway`, a `Warehouse`) are injected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from durability import (
    Checkpointer,
    CompiledGraph,
    Graph,
    Pass,
    as_dict,
    as_text,
    run_durably,
)
from durability.cancelling import stop_if_cancelled
from integration.effects import Gateway, Warehouse
from integration.submission import Order

#: The forward checkpoint key that says the forward graph failed, and why.
FAILED = "failed"

#: How a rollback refunds a charge: `(workflow, charge) -> refund`. By default the gateway
#: itself; the order body passes one that runs the refund as its child workflow.
Refunder = Callable[[str, str], Awaitable[str]]


class RollbackHeld(RuntimeError):
    """A live pass holds the rollback. An ordinary failure rather than `Contended` (an
    interruption): the worker logs it and the order's next pass resumes the rollback."""

    def __init__(self, workflow: str) -> None:
        super().__init__(f"{workflow!r} is held by a live pass; a later pass resumes it")


def unwind_id(workflow: str) -> str:
    """The id the rollback of `workflow` runs under. The suffix is this application's choice;
    the API refuses order ids containing `:`, so no order can address another's rollback."""
    return f"{workflow}:unwind"


def forward(gateway: Gateway, warehouse: Warehouse) -> CompiledGraph:
    """The fulfilment graph. Inputs: the workflow id and the order record.

        order ─┬─▶ charged ──┬─▶ shipped ─▶ receipt
               └─▶ reserved ─┘

    `charged` and `reserved` run concurrently. Every node's key is written here in the source,
    so a recorded result means the same thing after a crash.
    """
    graph = Graph("workflow", "order")

    @graph.node("charged", after=("workflow", "order"))
    async def charge(workflow: str, order: object) -> str:
        return await gateway.charge(workflow, Order.parse(order).total)

    @graph.node("reserved", after=("workflow", "order"))
    async def reserve(workflow: str, order: object) -> str:
        return await warehouse.reserve(workflow, [line.sku for line in Order.parse(order).lines])

    @graph.node("shipped", after=("workflow", "order", "charged", "reserved"))
    async def ship(workflow: str, order: object, charged: object, reserved: object) -> str:
        skus = [line.sku for line in Order.parse(order).lines]
        return await warehouse.ship(workflow, as_text(reserved), skus)

    @graph.node("receipt", after=("order", "charged", "shipped"))
    async def render(order: object, charged: object, shipped: object) -> str:
        parsed = Order.parse(order)
        return (
            f"{parsed.customer}: {len(parsed.lines)} line(s), {parsed.total} cents"
            f" charged as {as_text(charged)}, shipped as {as_text(shipped)}"
        )

    return graph.compile()


@dataclass(frozen=True, slots=True)
class Reached:
    """What the forward run got as far as doing, i.e. what a rollback must undo."""

    charge: str | None
    reservation: str | None
    failure: str | None

    @classmethod
    def of(cls, records: Mapping[str, object]) -> Reached:
        def text(key: str) -> str | None:
            value = records.get(key)
            return value if isinstance(value, str) else None

        return cls(text("charged"), text("reserved"), text(FAILED))


def backward(
    gateway: Gateway, warehouse: Warehouse, refunder: Refunder | None = None
) -> CompiledGraph:
    """The rollback graph. Inputs: the forward workflow's id and its `Reached`.

        reached ─▶ refunded ─▶ released ─▶ unwound

    Sequential on purpose: money first, then stock, so a crash part-way leaves a state a
    person can read off the checkpoint (refunded, not yet released). Each node is recorded like
    any other, so a rollback that crashes part-way is resumed by the next pass without
    refunding twice. `refunder` does the refund (the gateway's own by default).
    """
    graph = Graph("workflow", "reached")
    refund_by: Refunder = gateway.refund if refunder is None else refunder

    @graph.node("refunded", after=("workflow", "reached"))
    async def refund(workflow: str, reached: Reached) -> str | None:
        if reached.charge is None:
            return None  # nothing was charged: nothing to refund
        return await refund_by(workflow, reached.charge)

    @graph.node("released", after=("workflow", "reached", "refunded"))
    async def release(workflow: str, reached: Reached, refunded: object) -> str | None:
        if reached.reservation is None:
            return None
        return await warehouse.release(workflow, reached.reservation)

    @graph.node("unwound", after=("reached", "refunded", "released"))
    async def summarise(reached: Reached, refunded: object, released: object) -> dict[str, object]:
        return {"because": reached.failure, "refund": refunded, "release": released}

    return graph.compile()


@dataclass(frozen=True, slots=True)
class Fulfilled:
    receipt: str


@dataclass(frozen=True, slots=True)
class RolledBack:
    because: str
    undone: dict[str, object]


Fulfilment = Fulfilled | RolledBack


async def fulfil(
    checkpointer: Checkpointer,
    holder: Pass,
    order: Order,
    gateway: Gateway,
    warehouse: Warehouse,
    refunder: Refunder | None = None,
) -> Fulfilment:
    """Fulfil `order` as one pass of `holder.workflow`; roll it back if fulfilment fails.

    A failure is not re-raised: it is recorded under `failed` in the forward checkpoint (so a
    later pass goes straight to the rollback instead of trying the forward effects again), the
    forward checkpoint is read into what to undo (`Reached.of`, a pure function of the
    records), and the rollback's summary is the result, so the order completes (as rolled
    back) and its checkpoint says so. What does raise is a rollback that fails itself; the next
    pass of the order resumes it.
    """
    workflow = holder.workflow
    records = await checkpointer.load(workflow)
    if FAILED not in records:
        try:
            receipt = await run_durably(
                forward(gateway, warehouse), checkpointer, holder, workflow, order.to_record()
            )
            return Fulfilled(as_text(receipt))
        except Exception as error:
            # `Exception` is the right net: fencing and suspensions descend from `BaseException`,
            # and a fenced pass that compensated would refund a charge its successor is still
            # building on.
            await checkpointer.record(holder, FAILED, f"{type(error).__name__}: {error}")
        records = await checkpointer.load(workflow)
    reached = Reached.of(records)
    undone = await unwind(checkpointer, holder, reached, gateway, warehouse, refunder)
    return RolledBack(reached.failure or "", undone)


async def unwind(
    checkpointer: Checkpointer,
    holder: Pass,
    reached: Reached,
    gateway: Gateway,
    warehouse: Warehouse,
    refunder: Refunder | None = None,
) -> dict[str, object]:
    """Run the rollback of `holder.workflow` under its own id and claim, to completion."""
    undoing = await _claim(checkpointer, unwind_id(holder.workflow), holder.alive)
    try:
        result = await run_durably(
            backward(gateway, warehouse, refunder),
            checkpointer,
            undoing,
            holder.workflow,
            reached,
        )
    finally:
        await checkpointer.release(undoing)
    return as_dict(result)


async def _claim(checkpointer: Checkpointer, workflow: str, alive: timedelta) -> Pass:
    """Claim the rollback, waiting out a claim left by a pass that died mid-rollback.

    That claim lapses at most `alive` after its last write, and only a pass of the forward
    workflow ever takes it, so waiting that long (and a little) is enough.
    """
    loop = asyncio.get_running_loop()
    give_up = loop.time() + alive.total_seconds() * 1.5
    while True:
        undoing = await checkpointer.claim(workflow, timedelta(minutes=5), alive)
        if undoing is not None:
            return undoing
        if loop.time() >= give_up:
            raise RollbackHeld(workflow)
        stop_if_cancelled()
        await asyncio.sleep(min(0.1, alive.total_seconds() / 10))


def progress(records: Mapping[str, object], rollback: Mapping[str, object]) -> str:
    """The status view of a fulfilment order: where it stands, from its checkpoint and its
    rollback's alone (a pure function of the records, like `Reached.of`)."""
    if "receipt" in records:
        return "fulfilled"
    if FAILED in records:
        return "rolled back" if "unwound" in rollback else "rolling back"
    return "fulfilling"
