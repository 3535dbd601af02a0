"""What a client submits as an order, and how the recorded submission is read back.

The API validates a request body into an `Order` and records `Order.to_record()` as the
workflow's `order` key; every pass of the workflow parses that record with `Order.parse`. The
record is plain JSON (amounts in integer cents, never floats), so every store's codec keeps it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from durability.checks import check_priority

#: Picks the body the worker runs for the order id (see `integration.workflow`):
#: `payout` (`integration.payout`: capture each line, settle, await approval, pay),
#: `fulfilment` (`integration.orders`: charge + reserve, ship, receipt; or roll back) or
#: `console` (`integration.console`: answer each message delivered to the order's inbox).
Kind = Literal["payout", "fulfilment", "console"]
KINDS: tuple[Kind, ...] = get_args(Kind)

#: A SKU is part of a step key (`captured:<sku>`), so it is kept to a plain, bounded alphabet.
SKU = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of an order: `quantity` units of `sku` at `cents` each."""

    sku: str
    quantity: int
    cents: int

    @property
    def total(self) -> int:
        return self.quantity * self.cents


@dataclass(frozen=True, slots=True)
class Order:
    """A submitted order. Lines with the same SKU are merged, so a SKU names one line."""

    kind: Kind
    customer: str
    lines: tuple[Line, ...]
    #: How soon it runs among orders waiting (`durability.checks.check_priority`): an urgent
    #: order is taken before every order of a lower priority, on every pass it makes.
    priority: int = 0

    @property
    def total(self) -> int:
        return sum(line.total for line in self.lines)

    @property
    def pays(self) -> bool:
        """Whether its passes call the payment gateway (a console order's do not)."""
        return self.kind != "console"

    def to_record(self) -> dict[str, object]:
        record: dict[str, object] = {
            "kind": self.kind,
            "customer": self.customer,
            "lines": [
                {"sku": line.sku, "quantity": line.quantity, "cents": line.cents}
                for line in self.lines
            ],
        }
        if self.priority:  # kept only when asked for: an order recorded before reads the same
            record["priority"] = self.priority
        return record

    @classmethod
    def of(cls, kind: Kind, customer: str, lines: list[Line], priority: int = 0) -> Order:
        """Build an order, merging lines that share a SKU (the first line's price wins)."""
        merged: dict[str, Line] = {}
        for line in lines:
            held = merged.get(line.sku)
            quantity = line.quantity + (held.quantity if held else 0)
            merged[line.sku] = Line(line.sku, quantity, held.cents if held else line.cents)
        return cls(kind, customer, tuple(merged.values()), priority)

    @classmethod
    def parse(cls, value: object) -> Order:
        """The order a recorded `order` value holds; `ValueError` if it is not one."""
        if not isinstance(value, dict):
            raise ValueError(f"an order is a JSON object, found {type(value).__name__}")
        kind = value.get("kind")
        if kind not in KINDS:
            raise ValueError(f"order kind must be one of {KINDS}, found {kind!r}")
        customer = value.get("customer")
        if not isinstance(customer, str) or not customer:
            raise ValueError("an order names its customer")
        raw = value.get("lines")
        if not isinstance(raw, list):
            raise ValueError("an order carries a list of lines")
        lines = [_line(item, index) for index, item in enumerate(raw)]
        if not lines and kind != "console":
            raise ValueError("an order needs at least one line")
        try:
            priority = check_priority(value.get("priority", 0))
        except (TypeError, ValueError) as error:
            raise ValueError(f"an order's {error}") from None
        return cls.of(kind, customer, lines, priority)


def _line(item: object, index: int) -> Line:
    where = f"lines[{index}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where} is not an object")
    sku, quantity, cents = item.get("sku"), item.get("quantity"), item.get("cents")
    if not isinstance(sku, str) or not SKU.fullmatch(sku):
        raise ValueError(f"{where}.sku must match {SKU.pattern}")
    if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
        raise ValueError(f"{where}.quantity must be a positive integer")
    if isinstance(cents, bool) or not isinstance(cents, int) or cents < 0:
        raise ValueError(f"{where}.cents must be a non-negative integer")
    return Line(sku, quantity, cents)
