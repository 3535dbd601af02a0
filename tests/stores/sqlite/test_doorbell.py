"""Processes on one SQLite file wake each other's waiting readers (`durability.sqlite.doorbell`):
a reader whose poll is far longer than the test still takes another process's work at once,
an idle reader looks only now and then, and the socket a killed process left is cleared."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durability.sqlite import SqliteDatabase, SqliteScheduler, migrate, open_database
from durability.sqlite.doorbell import directory_of
from durability.sqlite.scheduler import LOOK_AGAIN

#: Longer than any wait here: a reader that polled would not see the work in time.
SLOW_POLL = timedelta(minutes=2)
LONG = timedelta(minutes=5)
PATIENCE = 30.0

#: A reader in a process of its own: it says when it has looked at the queue once, then waits
#: for one delivery and prints its workflow.
READER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import timedelta
    from durability.sqlite import SqliteScheduler, open_database

    async def main() -> None:
        database = await open_database(sys.argv[1])
        looked = False

        def traced(sql: str) -> None:
            nonlocal looked
            if not looked and "min(visible_us)" in sql:
                looked = True
                print("looked", flush=True)

        await database.trace(traced)
        scheduler = SqliteScheduler(database, poll=timedelta(minutes=2))
        delivery = await scheduler.next_ready(timedelta(seconds=60))
        print(None if delivery is None else delivery.workflow, flush=True)
        await database.close()

    asyncio.run(main())
    """
)


_children: list[asyncio.subprocess.Process] = []


@pytest.fixture(autouse=True)
async def _no_reader_left() -> AsyncIterator[None]:
    yield
    while _children:
        child = _children.pop()
        if child.returncode is None:
            child.kill()
            await child.wait()


async def _reader(path: Path) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", READER, str(path), stdout=subprocess.PIPE
    )
    _children.append(child)
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), PATIENCE)
    assert line.strip() == b"looked", line
    return child


async def _delivered(child: asyncio.subprocess.Process) -> str:
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), PATIENCE)
    await asyncio.wait_for(child.wait(), PATIENCE)
    return line.decode().strip()


async def test_work_made_ready_in_one_process_wakes_a_reader_waiting_in_another(
    database: SqliteDatabase, path: Path
) -> None:
    child = await _reader(path)
    await asyncio.sleep(0.2)  # into its wait (were it still looking, it would find it anyway)
    started = asyncio.get_running_loop().time()
    await SqliteScheduler(database).make_ready("rung")
    assert await _delivered(child) == "rung"
    # Well inside its two-minute poll: the ring woke it, not a look of its own.
    assert asyncio.get_running_loop().time() - started < PATIENCE


async def test_a_deadline_set_in_another_process_is_taken_when_it_comes_without_a_poll(
    database: SqliteDatabase, path: Path
) -> None:
    scheduler = SqliteScheduler(database, lease=timedelta(minutes=5))
    await scheduler.make_ready("sleeper")
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    child = await _reader(path)  # it sees only a row held for five minutes
    await asyncio.sleep(0.2)
    # The pass sleeps for half a second: the reader must look again when that comes.
    assert await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(milliseconds=500))
    assert await _delivered(child) == "sleeper"


async def _looks(database: SqliteDatabase, scheduler: SqliteScheduler, within: timedelta) -> int:
    """How many times an idle `next_ready` looks at the queue in `within` (finding nothing)."""
    looks = 0

    def traced(sql: str) -> None:
        nonlocal looks
        looks += "min(visible_us)" in sql

    await database.trace(traced)
    try:
        assert await scheduler.next_ready(within) is None
    finally:
        await database.trace(None)
    return looks


async def test_an_idle_reader_that_hears_the_others_looks_only_now_and_then(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database, poll=timedelta(milliseconds=10))
    looks = await _looks(database, scheduler, LOOK_AGAIN * 1.5)
    assert database.hears_others
    # A 10 ms poll would have looked some 300 times; the doorbell's fallback looks twice.
    assert 1 <= looks <= 3, looks


async def test_a_reader_that_cannot_hear_polls_as_before(path: Path) -> None:
    deaf = await open_database(path, doorbell=False)
    try:
        await migrate(deaf)
        scheduler = SqliteScheduler(deaf, poll=timedelta(milliseconds=20))
        looks = await _looks(deaf, scheduler, timedelta(milliseconds=500))
        assert not deaf.hears_others
        assert looks >= 5, looks
        assert not directory_of(path).exists()
    finally:
        await deaf.close()


async def test_the_socket_a_killed_process_left_is_cleared_by_the_next_ring(
    database: SqliteDatabase, path: Path
) -> None:
    child = await _reader(path)
    sockets = set(os.listdir(directory_of(path)))
    assert len(sockets) == 1, sockets
    child.send_signal(signal.SIGKILL)
    await child.wait()
    assert set(os.listdir(directory_of(path))) == sockets  # left behind
    await SqliteScheduler(database).make_ready("after-the-kill")
    assert os.listdir(directory_of(path)) == []  # the send was refused: removed


async def test_a_file_deep_in_a_long_path_still_gets_its_rings(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 5)
    deep.mkdir(parents=True)
    file = deep / "durability.db"
    assert len(os.fsencode(directory_of(file))) > 110  # past what a socket address holds
    first = await open_database(file)
    second = await open_database(file)
    try:
        await migrate(first)
        waiting = asyncio.create_task(
            SqliteScheduler(second, poll=SLOW_POLL).next_ready(timedelta(seconds=60))
        )
        await asyncio.sleep(0.2)
        assert second.hears_others
        await SqliteScheduler(first).make_ready("deep")
        delivery = await asyncio.wait_for(waiting, PATIENCE)
        assert delivery is not None and delivery.workflow == "deep"
    finally:
        await second.close()
        await first.close()


async def test_closing_takes_the_socket_away(path: Path) -> None:
    opened = await open_database(path)
    await migrate(opened)
    opened.signal("default")
    assert len(os.listdir(directory_of(path))) == 1
    await opened.close()
    assert os.listdir(directory_of(path)) == []


async def test_the_url_says_whether_the_file_has_a_doorbell(tmp_path: Path) -> None:
    from durability.connect import open_durable

    for option, hears in (("", True), ("?doorbell=on", True), ("?doorbell=off", False)):
        file = tmp_path / f"store{option.replace('?', '-').replace('=', '-')}.db"
        async with open_durable(f"sqlite:///{file}{option}", poll=timedelta(milliseconds=5)) as d:
            assert await d.take(timedelta(milliseconds=50), LONG, LONG) is None
            database = d.checkpointer.database  # type: ignore[attr-defined]
            assert database.hears_others is hears
    with pytest.raises(ValueError, match="doorbell"):
        async with open_durable(f"sqlite:///{tmp_path / 'x.db'}?doorbell=maybe"):
            pass


async def test_an_ending_rings_only_the_processes_waiting_for_one(
    database: SqliteDatabase, path: Path
) -> None:
    from durability.endings import cancel
    from durability.sqlite import SqliteCheckpointer, SqliteDurable
    from durability.sqlite.doorbell import ENDED

    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))
    reading = await open_database(path)  # hears the queue's rings, waits for no ending
    waiting = await open_database(path)
    try:
        reading.signal("default")
        await durable.arrive("unwatched", "input", 1)
        assert await cancel(durable, "unwatched")
        # Nobody waits for an ending: there is no folder of theirs to ring.
        assert not (directory_of(path) / ENDED).exists()
        await durable.arrive("watched", "input", 1)
        async with SqliteCheckpointer(waiting).watch("watched") as bell:
            assert waiting.hears_endings and not reading.hears_endings
            assert len(os.listdir(directory_of(path) / ENDED)) == 1
            rung = asyncio.create_task(bell.wait(LONG))
            await asyncio.sleep(0.1)
            assert await cancel(durable, "watched")
            assert await asyncio.wait_for(rung, PATIENCE)  # rung, not a timeout of LONG
    finally:
        await waiting.close()
        await reading.close()
    assert os.listdir(directory_of(path) / ENDED) == []  # closing took the socket away
