"""A failing order through the API on every store: listed by state, shown failed with its
error, retried from its last recorded step (`POST /orders/{id}/retry`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from durability import Durable
from durability.failures import FAILURE, RETRY
from integration.api import make_app
from integration.effects import Gateway, Warehouse
from integration.workflow import Effects
from tests.integration.conftest import Eventually, Worker

STUCK = {
    "kind": "fulfilment",
    "customer": "ada",
    "lines": [{"sku": "unshippable", "quantity": 1, "cents": 500}],
}


@pytest.fixture
async def client(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(durable))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as made:
        yield made


async def test_a_failed_order_is_listed_shown_and_retried(
    durable: Durable,
    client: httpx.AsyncClient,
    worker: Worker,
    eventually: Eventually,
    tag: str,
) -> None:
    order = f"{tag}-f"
    # The order cannot ship, so it is rolled back; the rollback's release fails once, which
    # fails the order (the worker's default retries nothing).
    effects = Effects(gateway=Gateway(), warehouse=Warehouse(release_failures=1))

    async def state() -> str:
        return str((await client.get(f"/orders/{order}")).json()["status"]["state"])

    async def listed_failed() -> bool:
        page = (await client.get("/orders", params={"state": "failed", "prefix": tag})).json()
        return bool(page["orders"])

    async def completed() -> bool:
        return await state() == "completed"

    async with worker(durable, effects):
        submitted = await client.post("/orders", json=STUCK, headers={"Idempotency-Key": order})
        assert submitted.status_code == 201
        await eventually(listed_failed, "the order is listed as failed")
        page = (
            await client.get("/orders", params={"state": "failed", "prefix": tag, "limit": 10})
        ).json()
        assert [found["workflow"] for found in page["orders"]] == [order]
        assert page["after"] is None
        failure = page["orders"][0]["failure"]
        assert failure["type"] == "ReleaseFailed" and failure["attempt"] == 1
        assert failure["retry_at"] is None
        assert await state() == "failed"
        assert (await client.get(f"/orders/{order}")).json()["stage"] == "failed"

        retried = await client.post(f"/orders/{order}/retry")
        assert retried.status_code == 202 and retried.json() == {"id": order, "retried": True}
        await eventually(completed, "the retried order completes")

    view = (await client.get(f"/orders/{order}")).json()
    assert view["stage"] == "rolled back"
    keys = [entry["key"] for entry in view["history"]]
    assert keys.index(f"{FAILURE}000001") < keys.index(f"{RETRY}000001")
    assert effects.warehouse.calls["release"] == 1  # the failed try released nothing
    assert (await client.post(f"/orders/{order}/retry")).status_code == 409  # not failed
    assert (await client.post(f"/orders/{tag}-nobody/retry")).status_code == 404
    assert (await client.get("/orders", params={"state": "completed", "prefix": tag})).json()[
        "orders"
    ][0]["workflow"] == order


async def test_an_order_waiting_for_its_approval_is_cancelled_once(
    durable: Durable, client: httpx.AsyncClient, worker: Worker, eventually: Eventually,
    tag: str,
) -> None:
    order = f"{tag}-c"
    payout = {"kind": "payout", "customer": "ada",
              "lines": [{"sku": "piano", "quantity": 1, "cents": 500}]}

    async def state() -> str:
        return str((await client.get(f"/orders/{order}")).json()["status"]["state"])

    async def waiting() -> bool:
        return await state() in ("sleeping", "blocked")

    async def cancelled() -> bool:
        return await state() == "cancelled"

    async with worker(durable, Effects(gateway=Gateway(), warehouse=Warehouse())):
        submitted = await client.post("/orders", json=payout, headers={"Idempotency-Key": order})
        assert submitted.status_code == 201
        await eventually(waiting, "the payout waits (its settlement, or its approval)")
        answer = await client.post(f"/orders/{order}/cancel")
        assert answer.status_code == 202 and answer.json() == {"id": order, "cancelled": True}
        await eventually(cancelled, "the order is cancelled")
        assert (await client.post(f"/orders/{order}/cancel")).status_code == 409  # ended
        approval = await client.post(f"/orders/{order}/confirmation", json={"approved_by": "x"})
        assert approval.status_code in (202, 409)
        assert await state() == "cancelled"  # whatever wakes it, nothing more runs
    assert (await client.post(f"/orders/{tag}-nobody/cancel")).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        {"state": "bogus"},
        {"state": "running"},
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "many"},
        {"limit": "²"},
        {"after": "{braced}"},
        {"prefix": "has space"},
    ],
)
async def test_a_bad_listing_query_is_refused_naming_the_field(
    client: httpx.AsyncClient,
    query: dict[str, str],
) -> None:
    refused = await client.get("/orders", params=query)
    assert refused.status_code == 422
    assert [problem["field"] for problem in refused.json()["detail"]] == list(query)
