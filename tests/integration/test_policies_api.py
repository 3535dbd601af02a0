"""An urgent order's priority and the payment gateway's limit, through the API and a worker:
the wakeups the API makes carry them, bad input is refused writing nothing, and under a
worker no more gateway calls run at once than the limit allows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from durability import Durable, Limit
from integration.api import GATEWAY, make_app
from integration.effects import Gateway
from integration.payout import progress
from integration.workflow import Effects
from tests.integration.conftest import Eventually, Worker

PAYOUT = {"customer": "ada", "lines": [{"sku": "piano", "quantity": 1, "cents": 100}]}
QUIET = timedelta(milliseconds=300)


def _client(durable: Durable, gateway: Limit | None = None) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=make_app(durable, gateway=gateway))
    return httpx.AsyncClient(transport=transport, base_url="http://api")


async def test_an_urgent_order_is_taken_before_the_orders_queued_ahead_of_it(
    durable: Durable, tag: str
) -> None:
    async with _client(durable) as client:
        for name, priority in (("plain", None), ("later", 0), ("urgent", 10)):
            body = PAYOUT if priority is None else {**PAYOUT, "priority": priority}
            headers = {"Idempotency-Key": f"{tag}-{name}"}
            made = await client.post("/orders", json=body, headers=headers)
            assert made.status_code == 201
        urgent = await client.post(
            "/orders", json={**PAYOUT, "priority": 10}, headers={"Idempotency-Key": f"{tag}-urgent"}
        )
        assert urgent.status_code == 200 and urgent.json()["order"]["priority"] == 10
        other = await client.post(
            "/orders", json={**PAYOUT, "priority": 3}, headers={"Idempotency-Key": f"{tag}-urgent"}
        )
        assert other.status_code == 409  # another priority is another order
    taken = []
    while (delivery := await durable.scheduler.next_ready(QUIET)) is not None:
        taken.append((delivery.workflow, delivery.priority))
        await durable.scheduler.done(delivery)
    assert taken[0] == (f"{tag}-urgent", 10)
    assert sorted(taken[1:]) == [(f"{tag}-later", 0), (f"{tag}-plain", 0)]
    records = await durable.checkpointer.load(f"{tag}-plain")
    assert "priority" not in records["order"]  # an order as recorded before, when not asked


@pytest.mark.parametrize(
    "priority",
    [101, -101, "high", True, 1.5, None],
    ids=["101", "-101", "text", "bool", "1.5", "null"],
)
async def test_a_bad_priority_is_refused_and_writes_nothing(
    durable: Durable, tag: str, priority: object
) -> None:
    order = f"{tag}-bad"
    async with _client(durable) as client:
        refused = await client.post(
            "/orders", json={**PAYOUT, "priority": priority}, headers={"Idempotency-Key": order}
        )
    assert refused.status_code == 422
    assert [problem["field"] for problem in refused.json()["detail"]] == ["priority"]
    assert await durable.checkpointer.load(order) == {}
    assert await durable.scheduler.next_ready(QUIET) is None


async def test_paying_orders_wake_under_the_gateway_limit_and_a_console_does_not(
    durable: Durable, tag: str
) -> None:
    gateway = Limit(f"{GATEWAY}-{tag}", 1)
    async with _client(durable, gateway) as client:
        for name in ("one", "two"):
            headers = {"Idempotency-Key": f"{tag}-{name}"}
            assert (await client.post("/orders", json=PAYOUT, headers=headers)).is_success
        console = {"kind": "console", "customer": "ada"}
        headers = {"Idempotency-Key": f"{tag}-console"}
        assert (await client.post("/orders", json=console, headers=headers)).is_success
    first = await durable.scheduler.next_ready(QUIET)
    assert first is not None and first.limit == gateway
    chat = await durable.scheduler.next_ready(QUIET)
    assert chat is not None and (chat.workflow, chat.limit) == (f"{tag}-console", None)
    assert await durable.scheduler.next_ready(QUIET) is None  # the second payout waits
    await durable.scheduler.done(first)
    second = await durable.scheduler.next_ready(QUIET)
    assert second is not None and second.limit == gateway
    assert {first.workflow, second.workflow} == {f"{tag}-one", f"{tag}-two"}


class _Counting(Gateway):
    """A gateway whose captures take a while, counting how many run at once."""

    def __init__(self) -> None:
        super().__init__(slow=timedelta(milliseconds=50))
        self.running = self.most = 0

    async def capture(self, workflow: str, sku: str, cents: int) -> str:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super().capture(workflow, sku, cents)
        finally:
            self.running -= 1


async def test_under_a_worker_no_more_gateway_calls_run_at_once_than_the_limit(
    durable: Durable, tag: str, worker: Worker, eventually: Eventually
) -> None:
    gateway = _Counting()
    effects = Effects(gateway=gateway, settlement=timedelta(milliseconds=50))
    names = [f"{tag}-{n}" for n in range(6)]
    async with _client(durable, Limit(f"{GATEWAY}-{tag}", 2)) as client:
        for name in names:
            headers = {"Idempotency-Key": name}
            assert (await client.post("/orders", json=PAYOUT, headers=headers)).is_success

        async def approvable() -> bool:
            now = datetime.now(UTC)
            loaded = [await durable.checkpointer.load(name) for name in names]
            return all(progress(records, now).stage == "awaiting approval" for records in loaded)

        async with worker(durable, effects):  # four slots, and a limit of two
            await eventually(approvable, "every payout captured and settled")
            for name in names:
                answer = await client.post(
                    f"/orders/{name}/confirmation", json={"approved_by": "dana"}
                )
                assert answer.status_code == 202
            await eventually(
                lambda: _all_paid(durable, names), "every payout paid after its confirmation"
            )
    assert gateway.most == 2
    assert gateway.calls["capture"] == len(names)  # each captured once, none lost


async def _all_paid(durable: Durable, names: list[str]) -> bool:
    for name in names:
        if "paid" not in await durable.checkpointer.load(name):
            await asyncio.sleep(0)
            return False
    return True
