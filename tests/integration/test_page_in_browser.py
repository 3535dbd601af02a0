"""The operator's page in a real browser (Debian's Chromium, driven by Playwright) over
Postgres and both Redis queues: the list, a failed workflow's page, its retry behind the
confirmation, and a hostile id shown as text, never run. Screenshots of each step go to the
test's folder (and to `$DURABILITY_PICTURES`, if set: how the operating page's pictures are made).

Without Chromium the test skips locally and fails under CI, like a store that is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durability import Durable
from durability.status import status
from durability.web import OperatorPage
from experiments.harness.servers import free_port
from tests.integration.conftest import unavailable
from tests.integration.failing import fail

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "browser-test-token-0123456789abcdef"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["postgres", "redis-stream", "redis-set"])
def browsed_url(request: pytest.FixtureRequest, tag: str, tmp_path: Path) -> str:
    from tests.integration.conftest import _url

    return _url(request.param, tag, tmp_path, request)


@contextlib.asynccontextmanager
async def serving(url: str) -> AsyncIterator[str]:
    """The page over `url` on a loopback port of its own, for the block."""
    import uvicorn

    port = free_port()
    page = OperatorPage(url=url, token=TOKEN)
    server = uvicorn.Server(
        uvicorn.Config(page, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    try:
        pause = 0.01
        async with asyncio.timeout(20):
            while not server.started:  # uvicorn tells no one: look again, less often
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def _pictures(tmp_path: Path) -> list[Path]:
    folders = [tmp_path]
    extra = os.environ.get("DURABILITY_PICTURES")
    if extra:
        folders.append(Path(extra))
    return folders


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium and Playwright, or a skip (a failure under CI) saying which is missing."""
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        unavailable(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        unavailable("Playwright is not installed (pip install playwright)")
    return CHROMIUM


async def test_list_then_workflow_then_retry_in_a_browser(
    browsed_url: str, tag: str, tmp_path: Path, chromium: str
) -> None:
    from durability.connect import open_durable

    failed = f"{tag}-order-1042"
    hostile = f'{tag}-<script>alert("x")</script>'
    async with open_durable(browsed_url) as durable:
        await fail(durable, [failed, f"{tag}-order-1043", hostile])
        for n in range(3):
            await durable.arrive(f"{tag}-order-20{n}", "order", {"amount": n})
        await _browse(durable, browsed_url, tag, failed, hostile, _pictures(tmp_path))


async def _browse(
    durable: Durable, url: str, tag: str, failed: str, hostile: str, folders: list[Path]
) -> None:
    from playwright.async_api import async_playwright, expect

    dialogs: list[str] = []

    async def shot(page: object, name: str) -> None:
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(folder / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]

    async with serving(url) as base, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            await page.goto(f"{base}/?prefix={tag}")
            await expect(page.locator("h1")).to_have_text("Workflows")
            # The hostile id is text in its cell, not a script that ran.
            cells = await page.locator("td.id").all_inner_texts()
            assert hostile in cells
            await shot(page, "overview")
            await page.get_by_role("link", name="failed").first.click()
            await expect(page.locator("tbody tr")).to_have_count(3)
            await page.get_by_role("link", name=failed, exact=True).click()
            await expect(page.locator("h1")).to_contain_text(failed)
            await expect(page.locator(".state").first).to_have_text("failed")
            await expect(page.locator("main")).to_contain_text(
                "ValueError: the card was declined <b>twice</b>"
            )
            await shot(page, "workflow")
            await page.get_by_role("link", name="Retry…").click()
            await expect(page.locator("h1")).to_have_text("Retry?")
            await shot(page, "confirm")
            # A wrong token first: refused, and nothing changes.
            await page.fill("#token", "not-the-token-not-the-token")
            await page.get_by_role("button", name="Retry").click()
            await expect(page.locator(".notice.bad")).to_contain_text("wrong or missing token")
            assert (await status(durable.checkpointer, failed)).state == "failed"
            await page.go_back()
            await page.reload()  # a fresh confirmation
            await page.fill("#token", TOKEN)
            await page.get_by_role("button", name="Retry").click()
            await expect(page.locator(".notice.good")).to_contain_text("queued to run again")
            await shot(page, "retried")
            assert (await status(durable.checkpointer, failed)).state == "queued"
            await page.get_by_role("link", name="Back to the workflow").click()
            await expect(page.locator(".state").first).to_have_text("queued")
        finally:
            await browser.close()
    assert dialogs == []  # no script of a workflow's ever ran
