"""The refund of a rolled-back fulfilment, as a child workflow of its order.

The order's rollback starts it with `run.child("refund", "refund", {...}, as_text)`, so a
refund is started once however many passes of the order reach it, and the order waits for it
without holding a worker. Its effect is keyed by its own workflow id (`<order>.refund`), so the
gateway refunds once even if a pass dies between the refund and its record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from durability import Run, as_dict, as_text
from integration.effects import Gateway

#: The name the refund body is registered under, and the order's child key for it.
REFUND = "refund"


def refunder(gateway: Gateway) -> Callable[[Run], Awaitable[str]]:
    """The refund body over `gateway`: its input is `{"order": id, "charge": charge}`."""

    async def refund(run: Run) -> str:
        given = run.input(as_dict)
        charge = as_text(given.get("charge"))
        return await run.step("refunded", lambda: gateway.refund(run.workflow, charge), as_text)

    return refund
