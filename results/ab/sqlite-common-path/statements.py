"""Time the SQLite scheduler's take and idle-look statements of the tree it runs from.

    PYTHONPATH=. python results/ab/sqlite-common-path/statements.py

On a fresh file with every wakeup at priority 0 and none limited (the common path), 0, 1 and
100 rows ready: each statement run 3,000 times inside `BEGIN IMMEDIATE` and rolled back (the
file unchanged), its median time printed in microseconds.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from durability.sqlite import SqliteScheduler, migrate, open_database
from durability.sqlite.database import now_us, queries


async def made(path: Path, ready: int) -> None:
    database = await open_database(path)
    await migrate(database)
    scheduler = SqliteScheduler(database)
    for n in range(ready):
        await scheduler.make_ready(f"w{n}")
    await database.close()


def median_us(path: Path, sql: str, params: dict[str, object], times: int = 3000) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.create_function("durability_now_us", 0, now_us, deterministic=False)
    took = []
    for _ in range(times):
        connection.execute("BEGIN IMMEDIATE")
        began = time.perf_counter_ns()
        connection.execute(sql, params).fetchall()
        took.append(time.perf_counter_ns() - began)
        connection.execute("ROLLBACK")
    connection.close()
    return statistics.median(took) / 1000


def main() -> None:
    sql = queries("scheduler")
    take = {"queue": "default", "lease": 30_000_000, "fresh": 3, "lapsed": 1}
    with tempfile.TemporaryDirectory() as folder:
        for ready in (0, 1, 100):
            path = Path(folder) / f"ready-{ready}.db"
            asyncio.run(made(path, ready))
            print(f"{ready} ready: take {median_us(path, sql['take'], take):.1f} us,"
                  f" look {median_us(path, sql['probe'], {'queue': 'default'}):.1f} us")


if __name__ == "__main__":
    main()
