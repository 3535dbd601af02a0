"""A store that freezes, or goes away, after it was opened: every call a caller makes ends, on
every store, with the library's own error (`Unanswered`, a `StoreUnavailable`), the driver's
error as its cause, and the store serves again once it is back.

Frozen: a private `redis-server` SIGSTOPped (the shared one on 6379 is never touched), a
Postgres database whose tables another session holds locked, a SQLite file another connection
holds the write lock of. Each is opened with a short `call_timeout_ms`; the assertions are on
what is raised, never on how soon (`HANG` only keeps a regression from hanging the suite).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from durability import Durable
from durability.connect import StoreUnavailable, Unanswered, open_durable, unavailable

# Fixture types (the conftest beside this file builds them).
Eventually = Any
PrivateRedis = Any
ThrowawayDatabase = Any

#: The bound every store here is opened with: short, so a frozen store fails fast.
BOUND_MS = 300
#: A bound on a hang, far past BOUND_MS: the test fails here rather than waiting forever.
HANG = 30.0

Call = Callable[[], Awaitable[object]]


def api_calls(durable: Durable, tag: str) -> dict[str, Call]:
    """What an API process asks of a store: each a fresh coroutine per call."""
    workflow = f"{tag}-w"
    return {
        "arrive": lambda: durable.arrive(f"{tag}-new", "order", {"n": 1}),
        "status": lambda: durable.status(workflow),  # type: ignore[attr-defined]
        "list": lambda: durable.list(state="queued"),  # type: ignore[attr-defined]
        "load": lambda: durable.checkpointer.load(workflow),
        "history": lambda: durable.checkpointer.history(workflow),
        "deliver": lambda: durable.deliver(workflow, {"text": "hi"}),
        "retry": lambda: durable.retry(workflow),  # type: ignore[attr-defined]
        "delete": lambda: durable.delete(f"{tag}-other"),
    }


async def unanswered(name: str, call: Call) -> Unanswered:
    """`call()` raises `Unanswered` (before the hang bound), recognised as unavailable."""
    async with asyncio.timeout(HANG):
        with pytest.raises(Unanswered) as raised:
            await call()
    error = raised.value
    assert isinstance(error, StoreUnavailable) and isinstance(error, ConnectionError), name
    assert unavailable(error), name
    assert error.__cause__ is not None, f"{name}: the driver's error is kept as the cause"
    return error


async def every_call_is_unanswered(durable: Durable, tag: str, said: str) -> None:
    for name, call in api_calls(durable, tag).items():
        error = await unanswered(name, call)
        assert said in str(error), f"{name}: {error}"
        if name == "arrive":
            # Its reply is lost, not (necessarily) its write: the caller is told how to find out.
            assert "unknown" in str(error) and "same workflow and key is safe" in str(error)
        if name == "deliver":  # which, unlike arrive, is not safe to send again blind
            assert "unknown" in str(error) and "append it twice" in str(error)


async def serves_again(durable: Durable, tag: str, eventually: Eventually) -> None:
    async def answers() -> bool:
        try:
            async with asyncio.timeout(HANG):
                await durable.checkpointer.load(f"{tag}-w")
        except Unanswered:
            return False
        return True

    await eventually(answers, "the store answers again")
    # The arrive whose answer was lost may have landed; sent again, it is written once.
    again = await durable.arrive(f"{tag}-new", "order", {"n": 1})
    assert again.value == {"n": 1}
    assert (await durable.checkpointer.load(f"{tag}-new")) == {"order": {"n": 1}}


# -- frozen: every call is bounded -------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_frozen_redis_fails_every_call_within_its_bound_and_serves_again(
    private_redis: PrivateRedis, scheduler: str, tag: str, eventually: Eventually
) -> None:
    url = (
        f"redis://127.0.0.1:{private_redis.port}/0?scheduler={scheduler}&namespace={tag}"
        f"&call_timeout_ms={BOUND_MS}"
    )
    async with open_durable(url) as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        private_redis.signal(signal.SIGSTOP)  # frozen: connections open, nothing answers
        try:
            await every_call_is_unanswered(durable, tag, "did not answer within 0.3 s")
        finally:
            private_redis.signal(signal.SIGCONT)
        await serves_again(durable, tag, eventually)


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_blocking_read_waits_its_block_past_the_call_bound(
    private_redis: PrivateRedis, scheduler: str, tag: str
) -> None:
    url = (
        f"redis://127.0.0.1:{private_redis.port}/0?scheduler={scheduler}&namespace={tag}"
        f"&call_timeout_ms={BOUND_MS}"
    )
    async with open_durable(url) as durable:
        # A read that waits four bounds for work is not a call that went unanswered.
        within = timedelta(milliseconds=4 * BOUND_MS)
        assert await durable.take(within, timedelta(seconds=5), timedelta(seconds=5)) is None
        assert await durable.scheduler.next_ready(within) is None


async def test_a_locked_postgres_fails_every_call_within_its_bound_and_serves_again(
    throwaway_database: ThrowawayDatabase, tag: str, eventually: Eventually
) -> None:
    import psycopg

    url = f"{throwaway_database.url}?queue={tag}&call_timeout_ms={BOUND_MS}"
    async with open_durable(url) as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        # Frozen: another session holds every table of the store locked, so each statement
        # waits on the server without end.
        async with await psycopg.AsyncConnection.connect(throwaway_database.url) as locker:
            tables = await (
                await locker.execute(
                    "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
                    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
                )
            ).fetchall()
            assert tables
            for (table,) in tables:
                await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            await every_call_is_unanswered(durable, tag, "did not answer within")
            await locker.rollback()
        await serves_again(durable, tag, eventually)


async def test_a_locked_sqlite_file_fails_every_write_within_its_bound(
    tmp_path: Path, tag: str, eventually: Eventually
) -> None:
    path = tmp_path / "store.db"
    async with open_durable(f"sqlite:///{path}?call_timeout_ms={BOUND_MS}") as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # another process's write lock, held
        try:
            calls = api_calls(durable, tag)
            for name in ("arrive", "deliver", "delete"):  # WAL: reads go on beside the lock
                error = await unanswered(name, calls[name])
                assert "locked" in str(error), f"{name}: {error}"
        finally:
            locker.rollback()
            locker.close()
        await serves_again(durable, tag, eventually)


# -- gone: one error type on every store ---------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_redis_that_went_away_fails_every_call_with_the_library_error(
    private_redis: PrivateRedis, scheduler: str, tag: str, eventually: Eventually
) -> None:
    import redis.exceptions

    url = f"redis://127.0.0.1:{private_redis.port}/0?scheduler={scheduler}&namespace={tag}"
    async with open_durable(url) as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        private_redis.kill()  # gone: its connections reset, its port refuses
        for name, call in api_calls(durable, tag).items():
            error = await unanswered(name, call)
            assert isinstance(error.__cause__, redis.exceptions.ConnectionError), name
            assert f"127.0.0.1:{private_redis.port}/0" in str(error), name
        private_redis.start()
        await serves_again(durable, tag, eventually)


async def test_a_postgres_that_went_away_fails_every_call_with_the_library_error(
    throwaway_database: ThrowawayDatabase, tag: str, eventually: Eventually
) -> None:
    import psycopg

    url = f"{throwaway_database.url}?queue={tag}&call_timeout_ms={BOUND_MS}"
    async with open_durable(url) as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        # Gone: every connection of the pool terminated, and no new one accepted.
        throwaway_database.refuse_connections()
        try:
            for name, call in api_calls(durable, tag).items():
                error = await unanswered(name, call)
                assert isinstance(error.__cause__, psycopg.OperationalError), name
                assert throwaway_database.name in str(error), name
        finally:
            throwaway_database.allow_connections()
        await serves_again(durable, tag, eventually)


async def test_a_sqlite_file_removed_under_an_open_store_fails_every_call_and_writes_nothing(
    tmp_path: Path, tag: str
) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    async with open_durable(f"sqlite:///{folder / 'store.db'}") as durable:
        await durable.arrive(f"{tag}-w", "order", 1)
        for leftover in folder.iterdir():  # the file (and its -wal, -shm) deleted, then the dir
            leftover.unlink()
        folder.rmdir()
        for name, call in api_calls(durable, tag).items():
            error = await unanswered(name, call)
            assert "removed" in str(error), f"{name}: {error}"
