"""Time the full take (scheduler.sql `take`, n=4) of one revision beside many limit keys held.

    python results/ab/postgres-limit-fill/manykeys.py LABEL URL KEYS READY >> manykeys.csv

Run with the revision's own `durability` importable first. It migrates a fresh schema, gives
one queue KEYS limits rows, each holding one live concurrency hold at a limit of 1 (so every
key is full), and READY ready wakeups under the first READY keys (each passed over: its key
is full), analyzes both tables, then runs the take 20 times under `EXPLAIN (ANALYZE)` and 20
times plainly. The row printed: label, keys, ready, the median execution ms, the median round
trip ms (the client's clock; planned afresh each time, as an unprepared statement is). What
it shows: how the take's cost grows with the keys held, which the sweep of emptied `limits`
rows must not make grow.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

from psycopg import AsyncConnection

from durability.postgres import migrate
from durability.postgres.statements import statements

RUNS = 20


async def main(label: str, url: str, keys: int, ready: int) -> None:
    from psycopg_pool import AsyncConnectionPool

    where = f"ab_{uuid.uuid4().hex[:10]}"
    pool: Any = AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=1, open=False)
    await pool.open(wait=True)
    try:
        await migrate(pool, where)
        async with await AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("SET enable_seqscan = off")
            await conn.execute(
                f"INSERT INTO {where}.limits (queue, key, held, at_most, per, last)"
                " SELECT 'q', 'tenant-' || i, jsonb_build_object(i || '/w' || i,"
                " jsonb_build_array('w' || i, (extract(epoch FROM now() + interval '1 hour')"
                " * 1000000)::bigint)), 1, NULL, 'w' || i FROM generate_series(1, %s) AS i",
                [keys])
            await conn.execute(
                f"INSERT INTO {where}.queue (queue, workflow, visible_at, receipt, priority,"
                " limit_key, limit_at_most) SELECT 'q', 'r' || i, now() - interval '1 s', i, 0,"
                " 'tenant-' || i, 1 FROM generate_series(1, %s) AS i", [ready])
            await conn.execute(f"ANALYZE {where}.limits")
            await conn.execute(f"ANALYZE {where}.queue")
            sql = statements("scheduler.sql", where)["take"]
            for name, value in {"queue": "'q'", "lease": "'30 s'::interval", "n": "4"}.items():
                sql = sql.replace(f"%({name})s", value)
            times = []
            for _ in range(RUNS):
                cursor = await conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
                row = await cursor.fetchone()
                assert row is not None
                times.append(row[0][0]["Execution Time"])
            trips = []
            for _ in range(RUNS):
                start = time.perf_counter()
                await conn.execute(sql)
                trips.append((time.perf_counter() - start) * 1000)
            times.sort()
            trips.sort()
            print(f"{label},{keys},{ready},{times[RUNS // 2]:.4f},{trips[RUNS // 2]:.4f}")
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {where} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
