"""The operator's page on every store, through its ASGI interface: what each page shows (and
as JSON), user data escaped, moves refused without the token, its confirmation, or from
another site (nothing changed), a store that is down as a 503 page, and a long listing paged.
The page in a real browser is `test_page_in_browser.py`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from durability import Durable, MemoryCheckpointer, MemoryScheduler, SplitDurable, claimed
from durability.status import status
from durability.web import OperatorPage
from tests.integration.failing import HOSTILE, fail

TOKEN = "a-token-of-some-length-0123456789"


def client(page: OperatorPage, root: str = "") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=page, root_path=root)
    return httpx.AsyncClient(transport=transport, base_url="http://ops.test")


@pytest.fixture
async def acting(durable: Durable) -> AsyncIterator[httpx.AsyncClient]:
    async with client(OperatorPage(durable, token=TOKEN)) as opened:
        yield opened


async def nonce(http: httpx.AsyncClient, action: str, workflow: str) -> str:
    answer = await http.get("/confirm", params={"action": action, "id": workflow})
    assert answer.status_code == 200
    found = re.search(r'name="nonce" value="([^"]+)"', answer.text)
    assert found is not None
    return found.group(1)


async def test_the_overview_counts_lists_and_answers_json_too(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    ids = [f"{tag}-1", f"{tag}-2"]
    await fail(durable, ids)
    # Two arrivals: the stopped worker's last blocking read can still be open on the server
    # for a moment and take one (it is the stopped worker's then, until its lease lapses).
    for queued in (f"{tag}-q1", f"{tag}-q2"):
        await durable.arrive(queued, "order", 1)
    answer = await acting.get("/", params={"prefix": tag})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    for workflow in ids:
        assert f"/workflow?id={workflow}" in answer.text
    data = (await acting.get("/", params={"prefix": tag, "format": "json"})).json()
    assert data["counts"] == {"failed": 2}
    assert [w["workflow"] for w in data["workflows"]] == ids
    assert data["queue"]["ready"] >= 1
    only = (await acting.get("/", params={"state": "completed", "prefix": tag,
                                          "format": "json"})).json()
    assert only["workflows"] == []


async def test_a_workflow_page_shows_its_records_failure_and_claim(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    workflow = f"{tag}-w"
    await fail(durable, [workflow])
    page = await acting.get("/workflow", params={"id": workflow})
    assert page.status_code == 200
    text = page.text
    assert text.index("order") < text.index("reserve") < text.index("engine:failure:000001")
    assert "the card was declined &lt;b&gt;twice&lt;/b&gt;" in text
    assert "free" in text and "Retry…" in text
    data = (await acting.get("/workflow", params={"id": workflow, "format": "json"})).json()
    assert data["status"]["state"] == "failed" and data["held"] is False
    assert [r["key"] for r in data["records"]] == [
        "order", "reserve", "engine:failure:000001", "engine:ended:000000"
    ]
    assert data["failures"][0]["step"] == "charge"
    holder = await claimed(durable.checkpointer, workflow)
    held = (await acting.get("/workflow", params={"id": workflow, "format": "json"})).json()
    assert held["held"] is True and held["status"]["state"] == "running"
    await durable.checkpointer.release(holder)
    missing = await acting.get("/workflow", params={"id": f"{tag}-nobody"})
    assert missing.status_code == 404


async def test_a_hostile_id_is_shown_escaped_and_acted_on_exactly(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    workflow = f"{tag}{HOSTILE}"
    await fail(durable, [workflow])
    for path, params in (("/", {"prefix": tag}), ("/workflow", {"id": workflow}),
                         ("/confirm", {"action": "retry", "id": workflow})):
        text = (await acting.get(path, params=params)).text
        assert "<script>" not in text
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27;&amp;amp;" in text
        assert "\x1b" not in text and "\u202e" not in text and "\\u202eevil" in text
    data = (await acting.get("/workflow", params={"id": workflow, "format": "json"})).json()
    assert data["status"]["workflow"] == workflow
    answer = await acting.post("/act", data={
        "action": "retry", "id": workflow, "token": TOKEN,
        "nonce": await nonce(acting, "retry", workflow),
    })
    assert answer.status_code == 200
    assert (await status(durable.checkpointer, workflow)).state == "queued"


async def test_a_move_needs_the_token_and_its_confirmation(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    workflow, other = f"{tag}-m", f"{tag}-o"
    await fail(durable, [workflow, other])
    good = await nonce(acting, "retry", workflow)
    refused = [
        {"action": "retry", "id": workflow, "nonce": good},  # no token
        {"action": "retry", "id": workflow, "nonce": good, "token": TOKEN + "x"},
        {"action": "retry", "id": workflow, "nonce": good, "token": ""},
        {"action": "retry", "id": workflow, "token": TOKEN},  # no confirmation
        {"action": "retry", "id": workflow, "token": TOKEN,
         "nonce": await nonce(acting, "retry", other)},  # another workflow's
        {"action": "retry", "id": workflow, "token": TOKEN,
         "nonce": await nonce(acting, "delete", workflow)},  # another move's
    ]
    for form in refused:
        answer = await acting.post("/act", data=form)
        assert answer.status_code == 403, form
        assert (await status(durable.checkpointer, workflow)).state == "failed"
    bad_bearer = await acting.post("/act", data={"action": "retry", "id": workflow},
                                   headers={"Authorization": "Bearer wrong-token-wrong-token"})
    assert bad_bearer.status_code == 403
    assert (await status(durable.checkpointer, workflow)).state == "failed"
    answer = await acting.post("/act", data={"action": "retry", "id": workflow},
                               headers={"Authorization": f"Bearer {TOKEN}",
                                        "Accept": "application/json"})
    assert answer.status_code == 200 and answer.json()["result"] == "done"
    again = await acting.post("/act", data={"action": "delete", "id": other, "token": TOKEN,
                                            "nonce": await nonce(acting, "delete", other)})
    assert again.status_code == 200
    assert (await status(durable.checkpointer, other)).state == "unknown"


async def test_a_queued_workflow_is_offered_cancel_and_cancelled(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    workflow = f"{tag}-cancel"
    await durable.arrive(workflow, "order", 1)
    page = await acting.get("/workflow", params={"id": workflow})
    assert "action=cancel" in page.text and "action=retry" not in page.text
    answer = await acting.post("/act", data={
        "action": "cancel", "id": workflow, "token": TOKEN,
        "nonce": await nonce(acting, "cancel", workflow),
    })
    assert answer.status_code == 200
    assert (await status(durable.checkpointer, workflow)).state == "cancelled"
    page = await acting.get("/workflow", params={"id": workflow})
    assert "action=cancel" not in page.text  # ended: not offered again


async def test_a_form_forged_on_another_site_is_refused(
    durable: Durable, acting: httpx.AsyncClient, tag: str
) -> None:
    workflow = f"{tag}-x"
    await fail(durable, [workflow])
    form = {"action": "retry", "id": workflow, "token": TOKEN,
            "nonce": await nonce(acting, "retry", workflow)}
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "null"}):
        answer = await acting.post("/act", data=form, headers=headers)
        assert answer.status_code == 403, headers
        assert (await status(durable.checkpointer, workflow)).state == "failed"
    same = await acting.post("/act", data=form, headers={"Origin": "http://ops.test",
                                                          "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200


async def test_a_read_only_page_offers_no_move_and_refuses_every_one(
    durable: Durable, tag: str
) -> None:
    workflow = f"{tag}-ro"
    await fail(durable, [workflow])
    async with client(OperatorPage(durable)) as http:
        page = await http.get("/workflow", params={"id": workflow})
        assert "read-only" in page.text and "Retry…" not in page.text
        assert (await http.get("/confirm", params={"action": "retry", "id": workflow})
                ).status_code == 403
        answer = await http.post("/act", data={"action": "retry", "id": workflow,
                                               "token": TOKEN},
                                 headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 403
    assert (await status(durable.checkpointer, workflow)).state == "failed"


def test_a_short_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        OperatorPage(SplitDurable(MemoryCheckpointer(), MemoryScheduler()), token="short")


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        "postgresql://postgres:secret@127.0.0.1:1/nothing",
        "sqlite:///no/such/folder/store.db",
    ],
)
async def test_a_store_that_is_down_is_a_clear_503_page(url: str) -> None:
    async with client(OperatorPage(url=url)) as http:
        page = await http.get("/")
        assert page.status_code == 503
        assert "The store does not answer" in page.text and "Traceback" not in page.text
        assert "secret" not in page.text  # the URL's password is never shown
        data = await http.get("/", params={"format": "json"})
        assert data.status_code == 503 and data.json()["error"] == "The store does not answer"


async def test_ten_thousand_failed_workflows_load_a_page_at_a_time() -> None:
    store = SplitDurable(MemoryCheckpointer(), MemoryScheduler())
    checkpointer = store.checkpointer
    for n in range(10_000):
        workflow = f"bulk-{n:05d}"
        await checkpointer.supply(workflow, "order", n)
        holder = await claimed(checkpointer, workflow)
        await checkpointer.settle_release(holder, "failed", {})
    async with client(OperatorPage(store)) as http:
        first = await http.get("/", params={"state": "failed"})
        assert first.status_code == 200
        assert '<span class="n">10000</span>' in first.text
        assert first.text.count('href="/workflow?id=bulk-') == 50
        assert len(first.content) < 100_000
        following = re.search(r'href="([^"]+)" rel="next"', first.text)
        assert following is not None
        after = parse_qs(urlsplit(following.group(1).replace("&amp;", "&")).query)["after"]
        assert after == ["bulk-00049"]
        second = (await http.get("/", params={"state": "failed", "after": after[0],
                                             "format": "json"})).json()
        assert second["workflows"][0]["workflow"] == "bulk-00050"
        assert len(second["workflows"]) == 50 and second["next"] == "bulk-00099"
        capped = (await http.get("/", params={"limit": "100000", "format": "json"})).json()
        assert len(capped["workflows"]) == 200


async def test_mounted_under_a_prefix_its_links_follow(durable: Durable, tag: str) -> None:
    await durable.arrive(f"{tag}-p", "order", 1)
    async with client(OperatorPage(durable), root="/ops") as http:
        page = await http.get("/ops/")
        assert page.status_code == 200
        assert 'href="/ops/style.css"' in page.text
        assert (await http.get("/ops/style.css")).status_code == 200

