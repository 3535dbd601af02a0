"""Fixtures for the SQLite store tests: a fresh, migrated file per test in `tmp_path`.

SQLite needs no server, so nothing here skips for want of one. What can be missing is the
driver: without `aiosqlite` the tests skip locally and fail when `CI` is set, since CI must
never pass by silently skipping a store.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from durability.sqlite import SqliteDatabase


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail when running in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this store: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _driver() -> None:
    if importlib.util.find_spec("aiosqlite") is None:
        unavailable("aiosqlite is not installed (pip install durability[sqlite])")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A file nobody has opened yet."""
    return tmp_path / "durability.db"


@pytest.fixture
async def database(path: Path) -> AsyncIterator[SqliteDatabase]:
    """An open, migrated database over `path`, closed after the test."""
    from durability.sqlite import migrate, open_database

    opened = await open_database(path)
    try:
        await migrate(opened)
        yield opened
    finally:
        await opened.close()
