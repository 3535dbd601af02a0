"""An order's refund in the HTTP API, on every store: the refund is a workflow of its own
(`<id>.refund`, the rollback's child), so the listing leaves it out, the order's view shows it
under the rollback, and deleting the order forgets it too, a live one cancelled first; and a
worker given the gateway's limit (`--gateway-limit`) starts each refund under it.

The worker's part is played by hand (the note and the start `run.child` makes), so a refund
can be left queued, or held mid-pass, at the moment the request comes; but for the limit,
which a real worker's rollback is run for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from durability import Durable, Fenced, Limit
from durability.bodies import start
from durability.children import CHILD, child_id
from durability.interfaces import Ledger
from durability.status import Inspectable
from integration.api import make_app
from integration.effects import GATEWAY, Gateway
from integration.refund import REFUND
from integration.worker import effects_from
from integration.workflow import Effects
from tests.integration.conftest import Eventually, Worker

FULFILMENT = {
    "kind": "fulfilment",
    "customer": "ada",
    "lines": [{"sku": "unshippable", "quantity": 1, "cents": 500}],
}
LONG = timedelta(minutes=1)


@pytest.fixture
async def client(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(durable))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as made:
        yield made


async def submitted(client: httpx.AsyncClient, order: str) -> None:
    sent = await client.post("/orders", json=FULFILMENT, headers={"Idempotency-Key": order})
    assert sent.status_code == 201


async def refunding(durable: Durable, order: str) -> str:
    """What the order's rollback does as it reaches its refund: the child noted in the order
    under its claim, then started (queued; no worker here takes it). The refund's id."""
    refund = child_id(order, REFUND)
    holder = await durable.checkpointer.claim(order, LONG, LONG)
    assert holder is not None
    await durable.checkpointer.record(holder, f"{CHILD}{REFUND}", {"body": REFUND, "id": refund})
    await durable.checkpointer.release(holder)
    value = {"order": order, "charge": f"ch-{order}"}
    assert await start(durable, REFUND, value, refund, parent=order, key=REFUND)
    return refund


async def settled(durable: Durable, workflow: str, state: str) -> None:
    """A standing for `workflow`, as a worker's pass leaves one."""
    holder = await durable.checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    assert isinstance(durable.checkpointer, Ledger)
    assert await durable.checkpointer.settle(holder, state, {})
    await durable.checkpointer.release(holder)


async def drained(durable: Durable) -> list[str]:
    """Every wakeup still queued (taken and answered): the workflows they were for."""
    found = []
    while (taken := await durable.scheduler.next_ready(timedelta(milliseconds=50))) is not None:
        found.append(taken.workflow)
        await durable.scheduler.done(taken)
    return found


async def test_deleting_an_order_cancels_its_running_refund_and_forgets_it(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    order = f"{tag}-o"
    await submitted(client, order)
    refund = await refunding(durable, order)
    # A worker's pass of the refund, mid-step: it holds the refund's claim.
    running = await durable.checkpointer.claim(refund, LONG, LONG)
    assert running is not None

    deleted = await client.delete(f"/orders/{order}")

    assert deleted.status_code == 200
    assert deleted.json()["deleted"] >= 3  # the order's two records and the refund's start
    assert await durable.checkpointer.load(refund) == {}
    assert await durable.checkpointer.load(order) == {}
    assert isinstance(durable, Inspectable)
    assert (await durable.status(refund)).state == "unknown"
    with pytest.raises(Fenced):  # the running pass is refused at its next write
        await durable.checkpointer.record(running, "refunded", "re-ch")
    assert await drained(durable) == []  # no wakeup left for either to run again
    assert (await client.get(f"/orders/{order}")).status_code == 404


async def test_deleting_an_order_forgets_its_ended_refund(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    order = f"{tag}-o"
    await submitted(client, order)
    refund = await refunding(durable, order)
    assert isinstance(durable, Inspectable)
    assert await durable.cancel(refund)  # ended: nothing of it to stop
    await drained(durable)

    deleted = await client.delete(f"/orders/{order}")

    assert deleted.status_code == 200
    assert await durable.checkpointer.load(refund) == {}
    assert await durable.checkpointer.load(order) == {}
    assert await drained(durable) == []


async def test_the_listing_leaves_refunds_out_and_the_view_shows_one_under_its_rollback(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    first, second = f"{tag}-a", f"{tag}-b"
    for order in (first, second):
        await submitted(client, order)
    refund = await refunding(durable, first)
    # In id order the refund sits between the two orders: "-a" < "-a.refund" < "-b".
    for workflow in (first, refund, second):
        await settled(durable, workflow, "blocked")

    listed = (await client.get("/orders", params={"prefix": tag})).json()
    assert [found["workflow"] for found in listed["orders"]] == [first, second]

    # A page of one still holds one order: the refund after the first is passed over.
    page = (await client.get("/orders", params={"prefix": tag, "limit": "1"})).json()
    assert [found["workflow"] for found in page["orders"]] == [first]
    page = (
        await client.get("/orders", params={"prefix": tag, "limit": "1", "after": page["after"]})
    ).json()
    assert [found["workflow"] for found in page["orders"]] == [second]

    view = (await client.get(f"/orders/{first}")).json()
    assert view["rollback"]["refund"]["workflow"] == refund
    assert view["rollback"]["refund"]["state"] == "blocked"
    assert (await client.get(f"/orders/{second}")).json()["rollback"] is None


class _HeldRefunds(Gateway):
    """A gateway whose refunds wait until `go` is set, counting how many wait at once."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.running = self.most = 0

    async def refund(self, workflow: str, charge: str) -> str:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.go.wait()
        finally:
            self.running -= 1
        return await super().refund(workflow, charge)


async def test_refunds_call_the_gateway_one_at_a_time_under_its_limit(
    durable: Durable, client: httpx.AsyncClient, tag: str, worker: Worker, eventually: Eventually
) -> None:
    gateway = _HeldRefunds()
    effects = Effects(gateway=gateway, gateway_limit=Limit(f"{GATEWAY}-{tag}", 1))
    orders = [f"{tag}-a", f"{tag}-b"]
    refunds = [child_id(order, REFUND) for order in orders]
    for order in orders:  # the API gives orders no limit here: both reach their rollback
        await submitted(client, order)

    async def started(workflows: list[str], key: str) -> bool:
        loaded = [await durable.checkpointer.load(w) for w in workflows]
        return all(key in records for records in loaded)

    async def one_refunding() -> bool:
        return gateway.running == 1

    async with worker(durable, effects):
        await eventually(lambda: started(orders, f"{CHILD}{REFUND}"), "both refunds started")
        await eventually(one_refunding, "one refund at the gateway")
        await asyncio.sleep(0.3)  # time enough for a second worker slot to take the other
        assert gateway.running == 1  # the other refund's wakeup waits for the limit's slot
        gateway.go.set()
        await eventually(lambda: started(refunds, "refunded"), "both refunds done")
    assert gateway.most == 1
    assert gateway.calls["refund"] == 2


def test_the_worker_takes_the_gateway_limit_from_its_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from integration import cli

    made = cli.parser("durability-worker", "a test")
    cli.add_worker_options(made)
    assert effects_from(made.parse_args([])).gateway_limit is None
    given = effects_from(made.parse_args(["--gateway-limit", "3"]))
    assert given.gateway_limit == Limit(GATEWAY, 3)
    monkeypatch.setenv("DURABILITY_GATEWAY_LIMIT", "2")
    made = cli.parser("durability-worker", "a test")
    cli.add_worker_options(made)
    assert effects_from(made.parse_args([])).gateway_limit == Limit(GATEWAY, 2)
    with pytest.raises(SystemExit):
        made.parse_args(["--gateway-limit", "0"])
