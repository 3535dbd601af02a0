"""A payout as a stepwise workflow: what a fixed graph cannot say.

    items ─▶ captured:<sku> (one step per line, keyed by its SKU) ─▶ settling (a sleep)
          ─▶ approved-by (a value a person supplies) ─▶ paid

The fan-out is decided at run time by what the `items` step returned, and each capture is its
own step, so a crash mid-way resumes line by line: a line already captured is never captured
again. `settling` records its deadline, not its duration, so a crash during the window does not
restart the clock; `approved-by` ends the pass until the API `arrive`s it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Literal

from durability import Run, as_list, as_text
from integration.effects import Gateway
from integration.submission import Line, Order

#: The key a person's approval is supplied under.
APPROVAL = "approved-by"

Stage = Literal["capturing", "settling", "awaiting approval", "paying", "paid"]


def captured_key(sku: str) -> str:
    return f"captured:{sku}"


def items(order: Order) -> list[dict[str, object]]:
    """The line items to capture, as the `items` step records them (one per SKU)."""
    return [{"sku": line.sku, "cents": line.total} for line in order.lines]


def _item(value: object) -> Line:
    if not isinstance(value, dict):
        raise ValueError(f"a recorded item is an object, found {value!r}")
    sku, cents = value.get("sku"), value.get("cents")
    if not isinstance(sku, str) or not isinstance(cents, int):
        raise ValueError(f"a recorded item has a sku and cents, found {value!r}")
    return Line(sku, 1, cents)


async def payout(
    run: Run, order: Order, gateway: Gateway, *, settlement: timedelta
) -> dict[str, object]:
    """Capture every line, sleep out `settlement`, wait for an approver, pay."""
    lines = [_item(value) for value in await run.step("items", lambda: items(order), as_list)]
    captures: dict[str, object] = {}
    for line in lines:
        capture = partial(gateway.capture, run.workflow, line.sku, line.cents)
        captures[line.sku] = await run.step(captured_key(line.sku), capture, as_text)
    await run.sleep("settling", settlement)
    approver = await run.awaiting(APPROVAL, as_text)
    total = sum(line.cents for line in lines)
    paid = await run.step("paid", lambda: gateway.pay(run.workflow, total, approver), as_text)
    return {"paid": paid, "approved_by": approver, "captures": captures, "cents": total}


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a payout stands. `waiting` holds keys a client may `arrive`; `until` is the end of
    the settlement window while it lasts."""

    stage: Stage
    waiting: frozenset[str] = frozenset()
    until: datetime | None = None


def progress(records: Mapping[str, object], now: datetime) -> Progress:
    """The stage of a payout and what would advance it, from its records and the time alone,
    because the durable state is the state: the API renders it, and uses it to refuse a
    confirmation nobody is waiting for."""
    if "paid" in records:
        return Progress("paid")
    if APPROVAL in records:
        return Progress("paying")
    settling = records.get("settling")
    if not isinstance(settling, str):
        return Progress("capturing")
    due = datetime.fromisoformat(settling)
    if now < due:
        return Progress("settling", until=due)
    return Progress("awaiting approval", waiting=frozenset({APPROVAL}))
