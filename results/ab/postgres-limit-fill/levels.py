"""Time `earliest` and `backlog` (scheduler.sql) of one revision on a queue over many levels.

    python results/ab/postgres-limit-fill/levels.py LABEL URL LEVELS ROWS [plans] >> levels.csv

Run with the revision's own `durability` importable first (its virtualenv, or PYTHONPATH set to
its checkout). It migrates a fresh schema and fills one queue with ROWS rows spread over LEVELS
priorities, every other one hidden for an hour, the rest ready; analyzes it; PREPAREs each
statement on a connection planned as the store's are (`enable_seqscan = off`) and runs it 30
times under `EXPLAIN (ANALYZE, BUFFERS)`. Each row printed: label, statement, levels, rows, the
median execution ms, the shared buffers the last run hit. With `plans`, each plan is printed
after its row.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

from psycopg import AsyncConnection

from durability.postgres import migrate
from durability.postgres.statements import statements

RUNS = 30


async def main(label: str, url: str, levels: int, rows: int, plans: bool) -> None:
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
                f"INSERT INTO {where}.queue (queue, workflow, visible_at, receipt, priority)"
                " SELECT 'q', 'w' || i, CASE WHEN i %% 2 = 0 THEN now() + interval '1 hour'"
                " ELSE now() - interval '1 s' END, i, (i %% %s) - (%s / 2)"
                " FROM generate_series(1, %s) AS i", [levels, levels, rows])
            await conn.execute(f"ANALYZE {where}.queue")
            for name in ("earliest", "backlog"):
                sql = statements("scheduler.sql", where)[name].replace("%(queue)s", "$1")
                await conn.execute(f"PREPARE s (text) AS {sql}")
                times, hits = [], 0
                for _ in range(RUNS):
                    cursor = await conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE s ('q')")
                    row = await cursor.fetchone()
                    assert row is not None
                    times.append(row[0][0]["Execution Time"])
                    hits = row[0][0]["Plan"].get("Shared Hit Blocks", 0)
                times.sort()
                print(f"{label},{name},{levels},{rows},{times[RUNS // 2]:.4f},{hits}")
                if plans:
                    cursor = await conn.execute("EXPLAIN (COSTS OFF) EXECUTE s ('q')")
                    print("\n".join(line for (line,) in await cursor.fetchall()))
                await conn.execute("DEALLOCATE s")
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {where} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                     len(sys.argv) > 5 and sys.argv[5] == "plans"))
