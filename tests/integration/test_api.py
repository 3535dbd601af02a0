"""The HTTP API on every store, in process (httpx over ASGI): what each request writes, and
that every refusal writes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from durability import Durable
from integration.api import MAX_BODY, make_app

PAYOUT = {
    "customer": "ada",
    "lines": [{"sku": "piano", "quantity": 1, "cents": 120000}],
}


@pytest.fixture
async def client(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(durable))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as made:
        yield made


async def drain(durable: Durable) -> None:
    """Take and answer every queued wakeup, so a later check sees only new ones."""
    while (delivery := await durable.scheduler.next_ready(timedelta(milliseconds=50))) is not None:
        await durable.scheduler.done(delivery)


async def test_an_order_is_submitted_once_per_idempotency_key(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    headers = {"Idempotency-Key": f"{tag}-1"}
    first = await client.post("/orders", json=PAYOUT, headers=headers)
    again = await client.post("/orders", json=PAYOUT, headers=headers)

    assert first.status_code == 201 and first.json()["created"] is True
    assert first.headers["location"] == f"/orders/{tag}-1"
    assert again.status_code == 200 and again.json()["created"] is False
    written = await durable.checkpointer.history(f"{tag}-1")
    assert [w.key for w in written] == ["order"]
    # The resubmission queued a wakeup too: a lost one is recovered by retrying.
    assert await durable.scheduler.next_ready(timedelta(seconds=2)) is not None


async def test_the_view_renders_the_checkpoint_and_what_the_order_waits_on(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    order = f"{tag}-1"
    await client.post("/orders", json=PAYOUT, headers={"Idempotency-Key": order})
    # Play the worker's part by hand: the payout reached its approval.
    holder = await durable.checkpointer.claim(order, timedelta(minutes=1), timedelta(minutes=1))
    assert holder is not None
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    for key, value in [("items", []), ("settling", past)]:
        await durable.checkpointer.record(holder, key, value)

    view = (await client.get(f"/orders/{order}")).json()

    assert view["kind"] == "payout"
    assert view["stage"] == "awaiting approval"
    assert view["waiting_on"] == ["approved-by"]
    assert [entry["key"] for entry in view["history"]] == ["order", "items", "settling"]
    assert all(datetime.fromisoformat(entry["at"]).tzinfo for entry in view["history"])
    confirmed = await client.post(f"/orders/{order}/confirmation", json={"approved_by": "dana"})
    assert confirmed.status_code == 202
    assert (await durable.checkpointer.load(order))["approved-by"] == "dana"


async def test_messages_reach_a_console_inbox_and_delete_forgets_the_order(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    order = f"{tag}-c"
    body = {"kind": "console", "customer": "ada"}
    assert (await client.post("/orders", json=body, headers={"Idempotency-Key": order})).is_success
    sent = await client.post(f"/orders/{order}/messages", json={"text": "hello"})
    assert sent.status_code == 202
    records = await durable.checkpointer.load(order)
    assert records[sent.json()["entry"]] == {"text": "hello"}
    assert (await client.get(f"/orders/{order}")).json()["listening"] is True

    deleted = await client.delete(f"/orders/{order}")

    assert deleted.status_code == 200 and deleted.json()["deleted"] == 2
    assert await durable.checkpointer.load(order) == {}
    assert (await client.get(f"/orders/{order}")).status_code == 404


async def _chunks(size: int) -> AsyncIterator[bytes]:
    """A body sent without Content-Length (chunked), so only the bytes read can tell."""
    yield b'{"customer": "'
    for _ in range(size // 1024):
        yield b"x" * 1024
    yield b'"}'


REFUSED = [
    # (name, method, path, body, headers, status, field named in the answer)
    ("no key", "post", "/orders", PAYOUT, {}, 400, None),
    ("bad key", "post", "/orders", PAYOUT, {"Idempotency-Key": "a:unwind"}, 400, None),
    ("a refund's id", "post", "/orders", PAYOUT, {"Idempotency-Key": "a.refund"}, 400, None),
    ("bad quantity", "post", "/orders",
     {"customer": "ada", "lines": [{"sku": "piano", "quantity": 0, "cents": 1}]},
     {"Idempotency-Key": "{new}"}, 422, "lines.0.quantity"),
    ("no customer", "post", "/orders", {"lines": []}, {"Idempotency-Key": "{new}"}, 422,
     "customer"),
    ("no lines", "post", "/orders", {"customer": "ada"}, {"Idempotency-Key": "{new}"}, 422,
     "lines"),
    ("not json", "post", "/orders", b"{", {"Idempotency-Key": "{new}"}, 422, "body"),
    ("declared too big", "post", "/orders", b"x" * (MAX_BODY + 1),
     {"Idempotency-Key": "{new}"}, 413, None),
    ("read too big", "post", "/orders", "chunks", {"Idempotency-Key": "{new}"}, 413, None),
    ("other order", "post", "/orders", {**PAYOUT, "customer": "bob"},
     {"Idempotency-Key": "{old}"}, 409, None),
    ("unknown view", "get", "/orders/{new}", None, {}, 404, None),
    ("unknown confirm", "post", "/orders/{new}/confirmation", {"approved_by": "dana"}, {}, 404,
     None),
    ("unknown message", "post", "/orders/{new}/messages", {"text": "hi"}, {}, 404, None),
    ("unknown delete", "delete", "/orders/{new}", None, {}, 404, None),
    ("bad confirmation", "post", "/orders/{old}/confirmation", {"approved": "dana"}, {}, 422,
     "approved_by"),
    ("not waiting", "post", "/orders/{old}/confirmation", {"approved_by": "dana"}, {}, 409,
     None),
    ("not listening", "post", "/orders/{old}/messages", {"text": "hi"}, {}, 409, None),
]  # fmt: skip


async def test_every_refused_request_writes_nothing(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    """Each case of `REFUSED` in turn (one test per store: the setup is the slow part)."""
    old, new = f"{tag}-old", f"{tag}-new"
    await client.post("/orders", json=PAYOUT, headers={"Idempotency-Key": old})
    await drain(durable)
    before = {name: await durable.checkpointer.history(name) for name in (old, new)}

    def fill(text: str) -> str:
        return text.replace("{old}", old).replace("{new}", new)

    wrong: list[str] = []
    for name, method, path, body, headers, status, field in REFUSED:
        sent: dict[str, object] = {"headers": {k: fill(v) for k, v in headers.items()}}
        if body == "chunks":
            sent["content"] = _chunks(MAX_BODY + 1024)
        elif isinstance(body, bytes):
            sent["content"] = body
        elif body is not None:
            sent["content"] = json.dumps(body).encode()
        answer = await client.request(method.upper(), fill(path), **sent)  # type: ignore[arg-type]

        if answer.status_code != status:
            wrong.append(f"{name}: {answer.status_code} {answer.text}")
        elif field is not None and field not in [p["field"] for p in answer.json()["detail"]]:
            wrong.append(f"{name}: {field} not named in {answer.text}")
        for workflow in (old, new):
            if await durable.checkpointer.history(workflow) != before[workflow]:
                wrong.append(f"{name}: recorded something for {workflow}")
        # The API queues before it answers, so a wakeup it queued is already visible.
        if await durable.scheduler.next_ready(timedelta(milliseconds=50)) is not None:
            wrong.append(f"{name}: queued a wakeup")

    assert not wrong, "\n".join(wrong)
