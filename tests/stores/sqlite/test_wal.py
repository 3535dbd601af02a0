"""The WAL is checkpointed beside the commits (`durability.sqlite.wal`), never inside one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durability.sqlite import SqliteDatabase
from durability.sqlite.wal import EVERY, WalCheckpoints

#: Each write below adds a row this large, so it fills about one WAL page of 4 KiB.
ROW = 3_000


def _wal_pages(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size // 4096 if wal.exists() else 0


async def _write_rows(database: SqliteDatabase, count: int) -> None:
    await database.writer(lambda c: c.execute("CREATE TABLE IF NOT EXISTS scratch (body BLOB)"))
    for _ in range(count):
        await database.write(lambda c: c.execute("INSERT INTO scratch VALUES (?)", (b"x" * ROW,)))
        await database.wal.checkpoint()  # the one running now, if this write started one


async def test_the_writer_commits_without_checkpointing(database: SqliteDatabase) -> None:
    pages = await database.writer(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    assert pages == 0


async def test_the_wal_is_copied_back_and_reused_as_the_writes_go_on(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    from durability.sqlite import migrate, open_database

    # The same writes with checkpoints too rare to come: the WAL holds every one of them.
    unkept = await open_database(tmp_path / "unkept.db")
    unkept.wal = WalCheckpoints(str(tmp_path / "unkept.db"), "NORMAL", every=10**9)
    try:
        await migrate(unkept)
        await _write_rows(unkept, 4 * EVERY)
        grown = _wal_pages(tmp_path / "unkept.db")
    finally:
        await unkept.close()
    await _write_rows(database, 4 * EVERY)
    assert database.wal.checkpoints == 4
    assert _wal_pages(path) < grown / 2, (_wal_pages(path), grown)
    # What was checkpointed is in the database file for a connection that reads no WAL.
    await database.close()
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT count(*) FROM scratch").fetchone()[0] == 4 * EVERY


async def test_a_checkpoint_that_cannot_open_the_file_is_left_for_the_next(
    tmp_path: Path,
) -> None:
    wal = WalCheckpoints(str(tmp_path / "missing" / "no.db"), "NORMAL", every=1)
    wal.committed()
    await wal.checkpoint()  # failed, and said so only in the log
    assert wal.checkpoints == 0
    (tmp_path / "missing").mkdir()
    with sqlite3.connect(tmp_path / "missing" / "no.db") as made:
        made.execute("PRAGMA journal_mode = WAL")
    wal.committed()  # the next is started, and runs
    await wal.checkpoint()
    assert wal.checkpoints == 1
    await wal.close()


async def test_a_checkpoint_starts_every_so_many_writes(tmp_path: Path) -> None:
    path = tmp_path / "counted.db"
    with sqlite3.connect(path) as setup:
        setup.execute("PRAGMA journal_mode = WAL")
    wal = WalCheckpoints(str(path), "NORMAL", every=3)
    for count in range(1, 8):
        wal.committed()
        await wal.checkpoint()
        assert wal.checkpoints == count // 3
    await wal.close()
    wal.committed()  # closed: no more
    assert wal.checkpoints == 2


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WalCheckpoints("x.db", "NORMAL", every=0)
