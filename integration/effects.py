"""The outside world the example's workflows act on: a payment gateway and a warehouse.

Both are fakes that count every call, so a test can assert that an effect happened exactly
once. Calls are keyed by the workflow id (the idempotency key a real gateway would be given).
Both take a `journal` file (`_Journal`) so that a test can count the effects of other
processes; each class says which knobs make it slow or fail on purpose, for tests and demos.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from datetime import timedelta
from pathlib import Path

#: The key every gateway-calling pass's wakeups share a limit under (`--gateway-limit`): a
#: paying order's (made by the API) and a refund's (started by the worker's rollback).
GATEWAY = "payment-gateway"


class CannotShip(RuntimeError):
    """The warehouse cannot ship an order: the forward fulfilment fails here."""


class CaptureDeclined(RuntimeError):
    """The gateway declined a capture (on purpose, `declines` times): the payout fails here."""


class ReleaseFailed(RuntimeError):
    """A release failed (on purpose, `release_failures` times): the rollback crashes here."""


class _Journal:
    """Counts calls in memory and, when given a file (`journal`), appends one line per call
    to it (`capture workflow=... sku=... pid=...`): the side channel a test reads to count
    effects performed by *other processes*."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.calls: Counter[str] = Counter()

    def note(self, effect: str, **fields: object) -> None:
        self.calls[effect] += 1
        self.write(effect, **fields)

    def write(self, effect: str, **fields: object) -> None:
        """Append the line alone (not counted in `calls`)."""
        if self.path is None:
            return
        described = " ".join(f"{key}={value}" for key, value in fields.items())
        line = f"{effect} {described} pid={os.getpid()}\n"
        # One write per line on a file opened for append: lines from several processes do not
        # interleave mid-line.
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line)


class Gateway:
    """A fake payment gateway. `charges`, `refunds`, `captures` and `payouts` count calls.

    `slow` is how long a capture takes, so a test can kill a worker mid-payout; a capture
    journals `capturing ...` as it begins, so one started and cut short (its worker stopped
    mid-step) shows as a start without its end. `declines` is how many captures are declined
    before one goes through, so a payout fails and can be retried
    (`durability-worker --declines 1`).
    """

    def __init__(
        self, *, journal: Path | None = None, slow: timedelta | None = None, declines: int = 0
    ) -> None:
        self._journal = _Journal(journal)
        self._slow = slow
        self._declines = declines

    @property
    def calls(self) -> Counter[str]:
        return self._journal.calls

    async def charge(self, workflow: str, cents: int) -> str:
        await asyncio.sleep(0)
        self._journal.note("charge", workflow=workflow, cents=cents)
        return f"ch-{workflow}"

    async def refund(self, workflow: str, charge: str) -> str:
        await asyncio.sleep(0)
        self._journal.note("refund", workflow=workflow, charge=charge)
        return f"re-{charge}"

    async def capture(self, workflow: str, sku: str, cents: int) -> str:
        # The slow part comes before the effect, as a real call's round trip would: a worker
        # killed while it sleeps has captured nothing (but has journalled that it began).
        self._journal.write("capturing", workflow=workflow, sku=sku, cents=cents)
        if self._slow is not None:
            await asyncio.sleep(self._slow.total_seconds())
        if self._declines > 0:  # declined: nothing captured
            self._declines -= 1
            raise CaptureDeclined(f"the gateway declined capturing {sku} for {workflow}")
        self._journal.note("capture", workflow=workflow, sku=sku, cents=cents)
        return f"cap-{workflow}-{sku}"

    async def pay(self, workflow: str, cents: int, approver: str) -> str:
        await asyncio.sleep(0)
        self._journal.note("payout", workflow=workflow, cents=cents, approver=approver)
        return f"po-{workflow}"


class Warehouse:
    """A fake warehouse. `reserves`, `releases` and `shipments` count calls.

    A SKU in `unshippable` cannot ship, so the forward fulfilment fails and is rolled back;
    `release_failures` is how many releases fail before one works, so the rollback crashes
    mid-way and is resumed.
    """

    def __init__(
        self,
        *,
        journal: Path | None = None,
        unshippable: frozenset[str] = frozenset({"unshippable"}),
        release_failures: int = 0,
    ) -> None:
        self._journal = _Journal(journal)
        self._unshippable = unshippable
        self._release_failures = release_failures

    @property
    def calls(self) -> Counter[str]:
        return self._journal.calls

    async def reserve(self, workflow: str, skus: list[str]) -> str:
        await asyncio.sleep(0)
        self._journal.note("reserve", workflow=workflow, skus=",".join(skus))
        return f"rs-{workflow}"

    async def release(self, workflow: str, reservation: str) -> str:
        await asyncio.sleep(0)
        if self._release_failures > 0:
            self._release_failures -= 1
            raise ReleaseFailed(f"the warehouse did not answer releasing {reservation}")
        self._journal.note("release", workflow=workflow, reservation=reservation)
        return f"rl-{reservation}"

    async def ship(self, workflow: str, reservation: str, skus: list[str]) -> str:
        await asyncio.sleep(0)
        stuck = sorted(set(skus) & self._unshippable)
        if stuck:
            raise CannotShip(f"cannot ship {', '.join(stuck)}")
        self._journal.note("ship", workflow=workflow, reservation=reservation)
        return f"tr-{workflow}"
