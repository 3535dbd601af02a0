"""`open_durable`: one function chooses the store by URL, and refuses a URL it cannot serve."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from durability import MemoryCheckpointer, MemoryScheduler
from durability.connect import open_durable


async def test_memory_url_opens_a_fresh_memory_store_with_the_lease_given() -> None:
    async with open_durable("memory://", lease=timedelta(seconds=7)) as durable:
        assert isinstance(durable.checkpointer, MemoryCheckpointer)
        assert isinstance(durable.scheduler, MemoryScheduler)
        assert durable.scheduler.lease == timedelta(seconds=7)
        await durable.arrive("w", "k", 1)
    async with open_durable("memory://") as other:
        assert await other.checkpointer.load("w") == {}


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://localhost/db", "'mysql'"),
        ("localhost:6379", "'localhost'"),
        ("/tmp/file.db", "no scheme"),
        ("memory://somewhere", "memory://"),
        ("redis://127.0.0.1:6379/0?scheduler=list", "'list'"),
        ("sqlite://", "file path"),
        ("sqlite:///tmp/x.db?journal=wal", "journal"),
        ("redis://127.0.0.1:6379/0?cluster=maybe", "cluster"),
        ("postgresql://postgres@127.0.0.1:5432/test?notify=sometimes", "notify"),
    ],
)
async def test_a_url_no_store_answers_is_refused_by_name(url: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        async with open_durable(url):
            pass


async def test_timings_are_refused_unless_positive() -> None:
    with pytest.raises(ValueError, match="lease"):
        async with open_durable("memory://", lease=timedelta(0)):
            pass


def test_importing_the_library_and_connect_needs_no_driver() -> None:
    check = (
        "import sys, durability, durability.connect, integration.workflow;"
        "loaded = {'redis', 'psycopg', 'psycopg_pool', 'aiosqlite', 'fastapi'} & set(sys.modules);"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


async def test_postgres_notify_off_polls_alone(postgres_database: str) -> None:
    store_url = f"{postgres_database}?queue=notify-off"
    async with open_durable(f"{store_url}&notify=off", poll=timedelta(milliseconds=20)) as off:
        scheduler = off.scheduler
        assert scheduler.poll == timedelta(milliseconds=20)  # type: ignore[attr-defined]
        assert scheduler._listener is None  # type: ignore[attr-defined]
    async with open_durable(store_url) as on:
        assert on.scheduler._listener is not None  # type: ignore[attr-defined]
