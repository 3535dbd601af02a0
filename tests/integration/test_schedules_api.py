"""The example's schedules, on every store: kept and changed through `/schedules` as the
document says, and fired by the example's worker, a firing naming an unknown body failing on
its workflow rather than being lost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from durability import Durable
from durability.schedules import Schedules
from integration.api import make_app
from integration.effects import Gateway, Warehouse
from integration.nightly import NIGHTLY
from integration.workflow import Effects
from tests.integration.conftest import Eventually, Worker
from tests.integration.test_api_schema import conforms


@pytest.fixture
async def client(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(durable))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as made:
        yield made


async def test_a_schedule_s_life_answers_as_documented(
    client: httpx.AsyncClient, tag: str
) -> None:
    name, one = f"{tag}-nightly", "/schedules/{name}"
    asked = {"name": name, "body": NIGHTLY, "input": {"team": "ops"}, "cron": "0 2 * * *",
             "zone": "Europe/Berlin"}
    added = conforms("/schedules", "POST", await client.post("/schedules", json=asked))
    again = conforms("/schedules", "POST", await client.post("/schedules", json=asked))
    assert (added.status_code, again.status_code) == (201, 200)
    assert added.json()["next"] is not None and added.json()["cron"] == "0 2 * * *"
    listed = conforms("/schedules", "GET", await client.get("/schedules"))
    assert name in [s["name"] for s in listed.json()["schedules"]]

    paused = conforms(f"{one}/pause", "POST", await client.post(f"/schedules/{name}/pause"))
    assert paused.json()["paused"] is True and paused.json()["next"] is None
    resumed = conforms(f"{one}/resume", "POST", await client.post(f"/schedules/{name}/resume"))
    assert resumed.json()["paused"] is False and resumed.json()["next"] is not None
    assert conforms(one, "GET", await client.get(f"/schedules/{name}")).json() == resumed.json()

    gone = conforms(one, "DELETE", await client.delete(f"/schedules/{name}"))
    assert gone.json() == {"name": name, "removed": True}
    for answer in (
        await client.get(f"/schedules/{name}"),
        await client.delete(f"/schedules/{name}"),
        await client.post(f"/schedules/{name}/pause"),
    ):
        assert answer.status_code == 404, answer.text


@pytest.mark.parametrize(
    "asked",
    [
        {"body": NIGHTLY, "cron": "61 * * * *"},
        {"body": NIGHTLY, "cron": "0 2 * * *", "every_s": 60},
        {"body": NIGHTLY},
        {"body": NIGHTLY, "every_s": 0},
        {"body": NIGHTLY, "every_s": 60, "zone": "Mars/Olympus"},
        {"body": NIGHTLY, "every_s": 60, "missed": "sometimes"},
        {"body": "", "every_s": 60},
    ],
)
async def test_a_bad_schedule_is_refused_naming_the_field_and_kept_out(
    client: httpx.AsyncClient, durable: Durable, tag: str, asked: dict[str, object]
) -> None:
    answer = await client.post("/schedules", json={"name": tag, **asked})
    assert conforms("/schedules", "POST", answer).status_code == 422, answer.text
    assert await Schedules(durable).get(tag) is None


async def test_the_worker_fires_a_schedule_and_fails_a_firing_of_an_unknown_body(
    durable: Durable, worker: Worker, eventually: Eventually, tag: str
) -> None:
    schedules = Schedules(durable)
    often = timedelta(milliseconds=200)
    await schedules.add(f"{tag}-known", NIGHTLY, {"team": "ops"}, every=often, missed="skip")
    await schedules.add(f"{tag}-unknown", "weekly-audit", every=often, missed="skip")

    async def stood(prefix: str, state: str) -> bool:
        return bool((await durable.list(prefix=prefix, state=state)).statuses)  # type: ignore[attr-defined]

    async with worker(durable, Effects(Gateway(), Warehouse())):
        await eventually(lambda: stood(f"{tag}-known@", "completed"), "a nightly report ran")
        await eventually(lambda: stood(f"{tag}-unknown@", "failed"), "an unknown body failed")
        await schedules.pause(f"{tag}-known")
        await schedules.pause(f"{tag}-unknown")
    failed = (await durable.list(prefix=f"{tag}-unknown@", state="failed")).statuses  # type: ignore[attr-defined]
    assert failed[0].failure is not None and failed[0].failure.type == "UnknownBody"
    assert "weekly-audit" in failed[0].failure.message
    done = (await durable.list(prefix=f"{tag}-known@", state="completed")).statuses  # type: ignore[attr-defined]
    records = await durable.checkpointer.load(done[0].workflow)
    assert records["reported"] == {"night": str(records["started"]["at"])[:10],  # type: ignore[index]
                                   "for": {"team": "ops"}}
    await schedules.remove(f"{tag}-known")
    await schedules.remove(f"{tag}-unknown")
