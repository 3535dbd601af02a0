"""The `durability` command on every store: what it prints (a table whose ids are quoted, or
JSON), and the exit code of each way a command can end (`EXIT`)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from durability import Durable, claimed
from durability.command import EXIT, main
from experiments.harness.servers import free_port
from tests.integration.failing import HOSTILE, fail


async def run(*argv: str) -> tuple[int, str]:
    """The command run in a thread of its own (it runs its own event loop): code, stdout."""
    out = io.StringIO()
    code = await asyncio.to_thread(main, list(argv), out)
    return code, out.getvalue()


@pytest.fixture
def shared(shared_store_url: str) -> str:
    return shared_store_url


async def test_status_history_and_list_of_failed_workflows(
    shared: str, durable_at: Durable, tag: str
) -> None:
    ids = [f"{tag}-a", f"{tag}-b", f"{tag}-c"]
    await fail(durable_at, ids)
    code, out = await run("status", ids[0], "--url", shared)
    assert code == EXIT["ok"]
    assert "failed" in out and "ValueError" in out and "charge" in out
    code, out = await run("status", ids[0], "--url", shared, "--json")
    found = json.loads(out)
    assert found["state"] == "failed" and found["failure"]["step"] == "charge"
    code, out = await run("history", ids[0], "--url", shared)
    assert code == EXIT["ok"]
    lines = out.splitlines()
    assert "1 failure(s)" in lines[0]
    keys = [line.split()[1] for line in lines[2:]]
    assert keys == ["order", "reserve", "engine:failure:000001", "engine:ended:000000"]
    code, out = await run("history", ids[0], "--url", shared, "--json")
    assert [r["key"] for r in json.loads(out)["records"]] == keys
    # A page at a time: two, then the rest from the cursor the first page gave.
    code, out = await run("list", "--state", "failed", "--prefix", tag, "--limit", "2",
                          "--json", "--url", shared)
    first = json.loads(out)
    assert [w["workflow"] for w in first["workflows"]] == ids[:2]
    assert first["next"] == ids[1]
    code, out = await run("list", "--state", "failed", "--prefix", tag, "--limit", "2",
                          "--after", first["next"], "--url", shared)
    assert code == EXIT["ok"]
    assert [line.split()[0] for line in out.splitlines()[1:]] == ids[2:]


async def test_retry_answers_done_refused_and_not_found(
    shared: str, durable_at: Durable, tag: str
) -> None:
    workflow = f"{tag}-r"
    await fail(durable_at, [workflow])
    holder = await claimed(durable_at.checkpointer, workflow)  # a live pass holds it
    code, out = await run("retry", workflow, "--url", shared)
    assert code == EXIT["refused"] and "live pass" in out
    await durable_at.checkpointer.release(holder)
    code, out = await run("retry", workflow, "--url", shared, "--json")
    assert code == EXIT["ok"] and json.loads(out)["result"] == "done"
    code, out = await run("status", workflow, "--url", shared, "--json")
    assert json.loads(out)["state"] == "queued"
    # Asked again before any pass ran, it finishes the same retry (a caller cut off retries).
    assert (await run("retry", workflow, "--url", shared))[0] == EXIT["ok"]
    await durable_at.arrive(f"{tag}-fresh", "order", 1)  # queued, never failed
    code, out = await run("retry", f"{tag}-fresh", "--url", shared)
    assert code == EXIT["refused"] and "has not failed" in out
    code, _ = await run("retry", f"{tag}-nobody", "--url", shared)
    assert code == EXIT["not found"]


async def test_delete_needs_yes_and_then_forgets(
    shared: str, durable_at: Durable, tag: str
) -> None:
    workflow = f"{tag}-d"
    await fail(durable_at, [workflow])
    code, _ = await run("delete", workflow, "--url", shared)
    assert code == EXIT["usage"]
    assert (await run("status", workflow, "--url", shared))[0] == EXIT["ok"]  # untouched
    code, out = await run("delete", workflow, "--yes", "--url", shared)
    assert code == EXIT["ok"] and "deleted" in out
    assert (await run("status", workflow, "--url", shared))[0] == EXIT["not found"]
    assert (await run("history", workflow, "--url", shared))[0] == EXIT["not found"]
    assert (await run("delete", workflow, "--yes", "--url", shared))[0] == EXIT["not found"]


async def test_cancel_needs_yes_and_then_cancels_once(
    shared: str, durable_at: Durable, tag: str
) -> None:
    workflow = f"{tag}-c"
    await durable_at.arrive(workflow, "order", 1)  # queued: no worker runs here
    code, _ = await run("cancel", workflow, "--url", shared)
    assert code == EXIT["usage"]
    code, out = await run("status", workflow, "--url", shared, "--json")
    assert json.loads(out)["state"] == "queued"  # untouched
    code, out = await run("cancel", workflow, "--yes", "--url", shared)
    assert code == EXIT["ok"] and "cancelled" in out
    code, out = await run("status", workflow, "--url", shared, "--json")
    assert json.loads(out)["state"] == "cancelled"
    code, out = await run("cancel", workflow, "--yes", "--url", shared)
    assert code == EXIT["refused"] and "ended already" in out
    assert (await run("cancel", f"{tag}-nobody", "--yes", "--url", shared))[0] == EXIT[
        "not found"]


async def test_a_hostile_id_is_quoted_in_tables_and_exact_in_json(
    shared: str, durable_at: Durable, tag: str
) -> None:
    workflow = f"{tag}{HOSTILE}"
    await fail(durable_at, [workflow])
    for command in (("status", workflow), ("list", "--prefix", tag), ("history", workflow)):
        code, out = await run(*command, "--url", shared)
        assert code == EXIT["ok"]
        assert "\x1b" not in out and "\u202e" not in out  # shown, not obeyed
        assert "\\u001b[31m" in out and "\\u202e" in out
        assert '"' + tag + "<script>" in out  # quoted whole, so a split on spaces keeps it
    code, out = await run("list", "--prefix", tag, "--json", "--url", shared)
    assert [w["workflow"] for w in json.loads(out)["workflows"]] == [workflow]


async def test_memory_is_a_store_of_this_process_alone(tag: str) -> None:
    code, out = await run("list", "--url", "memory://", "--json")
    assert code == EXIT["ok"] and json.loads(out) == {"workflows": [], "next": None}
    code, out = await run("status", f"{tag}-x", "--url", "memory://", "--json")
    assert code == EXIT["not found"]
    assert json.loads(out) == {"error": "not found", "workflow": f"{tag}-x"}


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        "postgresql://postgres@127.0.0.1:1/nothing",
        "sqlite:///no/such/folder/store.db",
    ],
)
async def test_a_store_that_does_not_answer_is_exit_5_not_a_traceback(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = await run("list", "--url", url)
    assert code == EXIT["store down"]
    said = capsys.readouterr().err
    assert "did not answer" in said and "Traceback" not in said


async def test_bad_usage_is_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert (await run("list", "--url", "mysql://x"))[0] == EXIT["usage"]
    assert (await run("list", "--state", "lost", "--url", "memory://"))[0] == EXIT["usage"]
    assert (await run("status", "a{b}", "--url", "memory://"))[0] == EXIT["usage"]
    environment = os.environ.pop("DURABILITY_URL", None)
    try:
        assert (await run("list"))[0] == EXIT["usage"]
    finally:
        if environment is not None:
            os.environ["DURABILITY_URL"] = environment
    assert "Traceback" not in capsys.readouterr().err


def test_the_console_script_documents_its_exit_codes() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "durability.command", "--help"],
        capture_output=True, text=True, check=False,
    )
    assert shown.returncode == 0
    for meaning, code in EXIT.items():
        assert f"{code}  {meaning}" in shown.stdout
    for command in ("status", "list", "history", "retry", "cancel", "delete", "ui"):
        assert command in shown.stdout
    environment = {**os.environ, "DURABILITY_URL": "memory://"}
    missing = subprocess.run(
        [sys.executable, "-m", "durability.command", "status", "nobody"],
        capture_output=True, text=True, check=False, env=environment,
    )
    assert missing.returncode == EXIT["not found"]


async def test_ui_with_actions_needs_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    environment = os.environ.pop("DURABILITY_UI_TOKEN", None)
    try:
        assert (await run("ui", "memory://", "--actions"))[0] == EXIT["usage"]
        os.environ["DURABILITY_UI_TOKEN"] = "short"
        assert (await run("ui", "memory://", "--actions"))[0] == EXIT["usage"]
    finally:
        os.environ.pop("DURABILITY_UI_TOKEN", None)
        if environment is not None:
            os.environ["DURABILITY_UI_TOKEN"] = environment
    said = capsys.readouterr().err
    assert "DURABILITY_UI_TOKEN" in said and "at least 16" in said


def test_ui_serves_the_page_on_loopback(tmp_path: Path) -> None:
    import time
    import urllib.request

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "durability.command", "ui", f"sqlite:///{tmp_path / 's.db'}",
         "--port", str(port)],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        give_up = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/?format=json") as answer:
                    body = json.loads(answer.read())
                break
            except OSError:
                if time.monotonic() > give_up or server.poll() is not None:
                    raise
                time.sleep(0.1)
        assert body["workflows"] == [] and body["counts"] == {}
    finally:
        server.terminate()
        _, said = server.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/ (read-only)" in said
