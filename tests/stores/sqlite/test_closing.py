"""Closing a SQLite store ends what it started: a write cancelled while it waits for another
process's lock is still on the writer's thread, and closing the store waits for it (its busy
timeout bounds it), so no task of the store is left pending and nothing warns of one, nor of
a connection left open."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

from durability.connect import open_durable
from tests.closing import watched


async def test_closing_a_store_mid_locked_write_leaves_no_task_and_no_warning(
    tmp_path: Path,
) -> None:
    path = tmp_path / "closing.db"
    with watched() as after:
        async with open_durable(f"sqlite:///{path}?call_timeout_ms=2000") as durable:
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            calls = [asyncio.ensure_future(durable.arrive(f"w{n}", "k", n)) for n in range(3)]
            reading = asyncio.ensure_future(durable.scheduler.next_ready(timedelta(seconds=5)))
            await asyncio.sleep(0.2)  # the writes wait on the lock; the read waits for a ring
            assert after.pending(), "the writes are under way"
            for call in (*calls, reading):
                call.cancel()
            await asyncio.gather(*calls, reading, return_exceptions=True)
            # The lock goes while the store closes: the writes it held back end then.
            asyncio.get_running_loop().call_later(0.2, other.rollback)
        assert after.pending() == set(), "a task of the store outlived it"
        other.close()
    assert after.said == []
