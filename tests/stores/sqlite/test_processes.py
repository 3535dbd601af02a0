"""What only several processes on one file can show: migration races, exclusion across
processes, concurrent writers meeting the file lock, and a worker killed mid-pass.

Each test runs `process.py` in fresh interpreters, lined up at a start line so their real work
begins together, and checks the file afterwards from this process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.interfaces import Fenced, Pass
from durability.sqlite import (
    SCHEMA_VERSION,
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteScheduler,
    migrate,
    open_database,
)
from durability.values import Reclaimed

SCRIPT = Path(__file__).with_name("process.py")
LONG = timedelta(seconds=30)


def _run_together(path: Path, line: Path, *argvs: list[str]) -> list[dict[str, object]]:
    """Start one process per argv, release them together, and return what each printed."""
    line.mkdir()
    processes = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), argv[0], str(path), str(line), *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        give_up = time.monotonic() + 60
        while len(list(line.glob("ready-*"))) < len(processes):
            if any(process.poll() is not None for process in processes):
                break  # one died before the line: its stderr says why, below
            assert time.monotonic() < give_up, "the processes never reached the start line"
            time.sleep(0.01)
        (line / "go").touch()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, f"a process failed:\n{err}"
            assert "database is locked" not in err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.slow
async def test_ten_processes_migrate_a_fresh_file_at_once_and_all_run(
    path: Path, tmp_path: Path
) -> None:
    results = await asyncio.to_thread(
        _run_together, path, tmp_path / "line", *(["migrate", str(n)] for n in range(10))
    )
    assert len(results) == 10
    database = await open_database(path)
    try:
        # Each process's claim, record and wakeup landed.
        checkpointer = SqliteCheckpointer(database)
        for n in range(10):
            assert await checkpointer.load(f"migrated-{n}") == {"step": str(n)}
        scheduler = SqliteScheduler(database, queue="migrate")
        taken = set()
        while (delivery := await scheduler.next_ready(timedelta(milliseconds=100))) is not None:
            taken.add(delivery.workflow)
        assert taken == {f"migrated-{n}" for n in range(10)}
        mode, version = await database.read(
            lambda connection: (
                connection.execute("PRAGMA journal_mode").fetchone()[0],
                connection.execute("PRAGMA user_version").fetchone()[0],
            )
        )
        assert (mode, version) == ("wal", SCHEMA_VERSION)
    finally:
        await database.close()


async def test_two_processes_claiming_at_once_admit_exactly_one_each_time(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    count = 150
    first, second = await asyncio.to_thread(
        _run_together, path, tmp_path / "line", ["claim", str(count)], ["claim", str(count)]
    )
    won = Counter([*first["won"], *second["won"]])  # type: ignore[misc]
    # Every workflow was claimed, none twice: exactly one process won each race.
    assert set(won) == {f"contested-{n}" for n in range(count)}
    assert set(won.values()) == {1}


async def test_two_processes_taking_from_one_queue_share_it_without_overlap(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    scheduler = SqliteScheduler(database)
    workflows = [f"queued-{n}" for n in range(120)]
    for workflow in workflows:
        await scheduler.make_ready(workflow)
    first, second = await asyncio.to_thread(
        _run_together, path, tmp_path / "line", ["take"], ["take"]
    )
    taken = [*first["taken"], *second["taken"]]  # type: ignore[misc]
    assert sorted(taken) == sorted(workflows)  # each once, none lost
    assert await scheduler.next_ready(timedelta(milliseconds=100)) is None


async def test_two_processes_taking_and_claiming_at_once_never_share_a_workflow(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    scheduler = SqliteScheduler(database)
    workflows = [f"claimed-{n}" for n in range(120)]
    for workflow in workflows:
        await scheduler.make_ready(workflow)
    first, second = await asyncio.to_thread(
        _run_together, path, tmp_path / "line", ["durable"], ["durable"]
    )
    taken = [*first["taken"], *second["taken"]]  # type: ignore[misc]
    assert sorted(taken) == sorted(workflows)  # each once, none lost
    # Nobody held a workflow when it was taken, so every take came with its claim.
    assert first["unclaimed"] == second["unclaimed"] == []
    checkpointer = SqliteCheckpointer(database)
    for workflow in workflows:
        assert set(await checkpointer.load(workflow)) == {"by"}  # each claim was live
    assert await scheduler.next_ready(timedelta(milliseconds=100)) is None
    # Every pass finished: its claim was released with its delivery.
    assert await checkpointer.claim(workflows[0], LONG, LONG) is not None


async def test_two_processes_writing_at_once_lose_nothing_and_never_see_a_lock(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    count = 150
    await asyncio.to_thread(
        _run_together,
        path,
        tmp_path / "line",
        ["write", "a", str(count)],
        ["write", "b", str(count)],
    )
    checkpointer = SqliteCheckpointer(database)
    for label in ("a", "b"):
        for w in range(10):
            records = await checkpointer.load(f"{label}-{w}")
            mine = [n for n in range(count) if n % 10 == w]
            assert [records[f"key-{n}"] for n in mine] == mine
            inbox = [value for key, value in records.items() if key.startswith("inbox:")]
            assert inbox == [{"n": n} for n in mine]  # appended in order, none lost
    scheduler = SqliteScheduler(database)
    taken = []
    while (delivery := await scheduler.next_ready(timedelta(milliseconds=100))) is not None:
        taken.append(delivery.workflow)
    expected = {f"{label}-{w}" for label in "ab" for w in range(10)}
    expected |= {f"{label}-solo-{n}" for label in "ab" for n in range(count)}
    assert sorted(taken) == sorted(expected)  # one row per workflow, however many wakeups


async def test_a_worker_killed_mid_pass_is_taken_over_after_its_lease(
    database: SqliteDatabase, path: Path, tmp_path: Path
) -> None:
    lease = timedelta(milliseconds=400)
    scheduler = SqliteScheduler(database, lease=lease, poll=timedelta(milliseconds=20))
    checkpointer = SqliteCheckpointer(database)
    await scheduler.make_ready("payout")
    dead = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(SCRIPT), "die", str(path), str(tmp_path), str(400)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    stale = json.loads(dead.stdout.strip().splitlines()[-1])

    # Nothing to take over: the lease lapses and the row is visible again.
    assert await scheduler.reclaiming(lease) == Reclaimed(None, None)
    delivery = await scheduler.next_ready(timedelta(seconds=5))
    assert delivery is not None
    assert delivery.workflow == "payout"
    holder = None
    give_up = asyncio.get_running_loop().time() + 5
    while holder is None and asyncio.get_running_loop().time() < give_up:
        holder = await checkpointer.claim("payout", LONG, LONG)  # once its claim lapses too
        await asyncio.sleep(0.05)
    assert holder is not None
    assert holder.token > stale["token"]
    # What the dead pass recorded stays recorded; the dead pass itself is fenced for good.
    assert await checkpointer.load("payout") == {"charged": True}
    corpse = Pass("payout", stale["token"], lease, holder.budget_ends)
    with pytest.raises(Fenced):
        await checkpointer.record(corpse, "shipped", True)
    await checkpointer.record(holder, "shipped", True)
    await scheduler.done(delivery)
    assert await checkpointer.load("payout") == {"charged": True, "shipped": True}


async def test_migrate_twice_is_harmless(path: Path) -> None:
    database = await open_database(path)
    try:
        await migrate(database)
        await migrate(database)
        assert await SqliteCheckpointer(database).supply("twice", "k", 1)
    finally:
        await database.close()
