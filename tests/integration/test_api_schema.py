"""The API against its own OpenAPI document: schemathesis fuzzes every operation in process
(ASGI) over a real store and checks that nothing answers 5xx, that every answer (status,
headers, body) is one the document names, and that a refused request writes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI
from hypothesis import HealthCheck, settings

from durability import Durable, MemoryCheckpointer, MemoryScheduler, SplitDurable, Written
from durability.connect import open_durable
from integration.api import make_app
from integration.orders import unwind_id


@dataclass(frozen=True, slots=True)
class Served:
    """The app and its store, living on one event loop the tests reach through `portal`."""

    portal: BlockingPortal
    durable: Durable
    app: FastAPI


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(open_durable("memory://")) as durable,
    ):
        yield Served(portal, durable, make_app(durable))


#: The document comes from the routes alone (no store is touched to build it), so an app over a
#: store of its own serves the same one as `served`.
schema = schemathesis.openapi.from_dict(
    make_app(SplitDurable(MemoryCheckpointer(), MemoryScheduler())).openapi()
)


async def _send(app: FastAPI, sent: dict[str, Any]) -> httpx.Response:
    """Send one schemathesis request (requests-style keywords) to `app` over httpx."""
    body: dict[str, Any] = {}
    if "json" in sent:
        body["json"] = sent["json"]
    elif sent.get("data") is not None:
        body["content"] = sent["data"]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.request(
            sent["method"],
            sent["url"],
            headers=sent.get("headers"),
            params=sent.get("params"),
            **body,
        )


async def _state(durable: Durable, ids: list[str]) -> dict[str, list[Written] | None]:
    """Each workflow's history; None for an id the store refuses (nothing is ever under it)."""
    state: dict[str, list[Written] | None] = {}
    for name in ids:
        try:
            state[name] = await durable.checkpointer.history(name)
        except ValueError:
            state[name] = None
    return state


async def _queued(durable: Durable) -> int:
    """Take and answer every queued wakeup; how many there were."""
    count = 0
    while (taken := await durable.scheduler.next_ready(timedelta(milliseconds=1))) is not None:
        await durable.scheduler.done(taken)
        count += 1
    return count


def _named(case: Any) -> list[str]:
    """The workflows a request could write: the ids in its path and `Idempotency-Key`."""
    named = [
        str((case.path_parameters or {}).get("order_id", "")),
        str((case.headers or {}).get("Idempotency-Key", "")),
    ]
    return [workflow for name in named if name for workflow in (name, unwind_id(name))]


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_every_answer_is_documented_and_a_refusal_writes_nothing(case: Any, served: Served) -> None:
    ids = _named(case)
    sent = case.as_transport_kwargs(base_url="http://api")
    before = served.portal.call(_state, served.durable, ids)
    response = served.portal.call(_send, served.app, sent)
    after = served.portal.call(_state, served.durable, ids)
    queued = served.portal.call(_queued, served.durable)

    case.validate_response(response)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert after == before, f"{response.status_code} yet a record was written"
        assert queued == 0, f"{response.status_code} yet a wakeup was queued"


# -- the document itself, and what the fuzz reaches only by chance ------------------------------


def test_the_document_names_every_body_and_status_the_api_answers() -> None:
    document = make_app(SplitDurable(MemoryCheckpointer(), MemoryScheduler())).openapi()
    paths = document["paths"]
    expected = {
        ("/orders", "post"): ({"200", "201", "400", "409", "413", "422", "503"}, "OrderIn"),
        ("/orders/{order_id}", "get"): ({"200", "404", "503"}, None),
        ("/orders/{order_id}", "delete"): ({"200", "404", "503"}, None),
        ("/orders/{order_id}/confirmation", "post"): (
            {"202", "400", "404", "409", "413", "422", "503"},
            "ConfirmationIn",
        ),
        ("/orders/{order_id}/messages", "post"): (
            {"202", "400", "404", "409", "413", "422", "503"},
            "MessageIn",
        ),
        ("/orders", "get"): ({"200", "422", "503"}, None),
        ("/orders/{order_id}/retry", "post"): ({"202", "404", "409", "503"}, None),
        ("/schedules", "post"): ({"200", "201", "400", "413", "422", "503"}, "ScheduleIn"),
        ("/schedules", "get"): ({"200", "503"}, None),
        ("/schedules/{name}", "get"): ({"200", "404", "503"}, None),
        ("/schedules/{name}", "delete"): ({"200", "404", "503"}, None),
        ("/schedules/{name}/pause", "post"): ({"200", "404", "503"}, None),
        ("/schedules/{name}/resume", "post"): ({"200", "404", "503"}, None),
        ("/orders/{order_id}/cancel", "post"): ({"202", "404", "409", "503"}, None),
    }
    assert {(path, method) for path in paths for method in paths[path]} == set(expected)
    for (path, method), (statuses, body) in expected.items():
        operation = paths[path][method]
        assert set(operation["responses"]) == statuses, (path, method)
        for answer in operation["responses"].values():
            assert "$ref" in answer["content"]["application/json"]["schema"], (path, method)
        assert "Retry-After" in operation["responses"]["503"]["headers"]
        if body is not None:
            schema_ref = operation["requestBody"]["content"]["application/json"]["schema"]
            assert schema_ref == {"$ref": f"#/components/schemas/{body}"}
            assert body in document["components"]["schemas"]
    assert "HTTPValidationError" not in str(document)  # FastAPI's 422, which nothing answers
    invalid = document["components"]["schemas"]["Invalid"]
    problem = document["components"]["schemas"]["Problem"]
    assert invalid["properties"]["detail"]["items"] == {"$ref": "#/components/schemas/Problem"}
    assert set(problem["required"]) == {"field", "problem"}


@pytest.fixture
async def client(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(durable))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as made:
        yield made


def conforms(path: str, method: str, answer: httpx.Response) -> httpx.Response:
    """`answer`, having checked it is what the document says `method path` answers."""
    schema[path][method].validate_response(answer)
    return answer


PAYOUT = {"customer": "ada", "lines": [{"sku": "piano", "quantity": 1, "cents": 120000}]}


async def test_an_order_s_life_answers_as_documented(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    order, path = f"{tag}-1", "/orders/{order_id}"
    key = {"Idempotency-Key": order}
    first = conforms("/orders", "POST", await client.post("/orders", json=PAYOUT, headers=key))
    again = conforms("/orders", "POST", await client.post("/orders", json=PAYOUT, headers=key))
    other = {**PAYOUT, "customer": "bob"}
    clash = conforms("/orders", "POST", await client.post("/orders", json=other, headers=key))
    assert (first.status_code, again.status_code, clash.status_code) == (201, 200, 409)

    view = conforms(path, "GET", await client.get(f"/orders/{order}"))
    assert view.status_code == 200 and view.json()["history"][0]["key"] == "order"
    early = await client.post(f"/orders/{order}/confirmation", json={"approved_by": "dana"})
    assert conforms(f"{path}/confirmation", "POST", early).status_code == 409
    bad = await client.post(f"/orders/{order}/messages", json={"text": ""})
    assert conforms(f"{path}/messages", "POST", bad).status_code == 422

    console = f"{tag}-c"
    await client.post(
        "/orders", json={"kind": "console", "customer": "ada"}, headers={"Idempotency-Key": console}
    )
    sent = await client.post(f"/orders/{console}/messages", json={"text": "hi"})
    assert conforms(f"{path}/messages", "POST", sent).status_code == 202

    gone = conforms(path, "DELETE", await client.delete(f"/orders/{order}"))
    assert gone.status_code == 200 and gone.json()["deleted"] == 1
    assert conforms(path, "GET", await client.get(f"/orders/{order}")).status_code == 404


async def test_options_and_405_name_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    one = await client.options("/orders/any")
    assert one.status_code == 204
    assert one.headers["allow"] == "DELETE, GET, OPTIONS"
    assert (await client.options("/orders")).headers["allow"] == "GET, OPTIONS, POST"
    wrong = await client.put("/orders/any")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE, GET, OPTIONS"


async def test_two_idempotency_keys_are_refused_and_write_nothing(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    first, second = f"{tag}-a", f"{tag}-b"
    keys = [("Idempotency-Key", first), ("Idempotency-Key", second)]
    answer = conforms("/orders", "POST", await client.post("/orders", json=PAYOUT, headers=keys))
    assert answer.status_code == 400 and "one Idempotency-Key" in answer.json()["detail"]
    for workflow in (first, second):
        assert await durable.checkpointer.load(workflow) == {}


async def test_an_integer_is_what_json_schema_calls_one(
    durable: Durable, client: httpx.AsyncClient, tag: str
) -> None:
    def lines(quantity: object) -> dict[str, object]:
        return {"customer": "ada", "lines": [{"sku": "piano", "quantity": quantity, "cents": 5}]}

    whole = await client.post("/orders", json=lines(2.0), headers={"Idempotency-Key": tag})
    assert whole.status_code == 201, whole.text
    assert (await durable.checkpointer.load(tag))["order"]["lines"][0]["quantity"] == 2  # type: ignore[index]
    for refused in ("2", True, 2.5):
        answer = await client.post(
            "/orders", json=lines(refused), headers={"Idempotency-Key": f"{tag}-x"}
        )
        assert answer.status_code == 422, (refused, answer.text)
