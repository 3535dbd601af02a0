"""Time the Postgres store's take statements on the common path, for one revision.

    python results/ab/postgres-policies/explain.py LABEL URL [ITERATIONS] >> explain.csv

Run with the virtualenv of the revision to time (it imports that revision's `durability`): it
migrates a fresh schema, then for each scenario PREPAREs the statement the store sends on a
queue with no priority and no limit (`<name>_plain` where the revision has one, else `<name>`)
and runs `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE` on it ITERATIONS times (default 40), the
queue set up before each run and emptied after it, outside the timing. Runs 1 to 5 are
planned for their parameters (custom plans); from the sixth on Postgres may keep a generic
plan. Each row printed is one run: label, scenario, run, planning ms, execution ms, and the
round trip ms of the same statement sent plainly (EXECUTE, the client's clock) right after.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from typing import Any

from psycopg import AsyncConnection

from durability.postgres import migrate
from durability.postgres.statements import statements

TYPES = {
    "queue": "text", "channel": "text", "lease": "interval", "budget": "interval",
    "alive": "interval", "n": "int8", "workflow": "text", "priority": "int2",
    "limit_key": "text", "limit_at_most": "int4", "limit_per": "interval",
}
VALUES = {
    "queue": "'q'", "channel": "'ab_policies'", "lease": "'30 s'", "budget": "'1 h'",
    "alive": "'30 s'", "workflow": "'w'", "priority": "0", "limit_key": "NULL",
    "limit_at_most": "NULL", "limit_per": "NULL",
}
#: scenario: (file, statement, rows ready before each run, n)
SCENARIOS = {
    "scheduler take: empty": ("scheduler.sql", "take", 0, 1),
    "scheduler take: 1 ready": ("scheduler.sql", "take", 1, 1),
    "durable take: empty": ("durable.sql", "take", 0, 1),
    "durable take: 1 ready": ("durable.sql", "take", 1, 1),
    "take_many 64: empty": ("durable.sql", "take_many", 0, 64),
    "take_many 64: 64 ready": ("durable.sql", "take_many", 64, 64),
    "make_ready: new row": ("scheduler.sql", "make_ready", 0, 1),
}


def prepared(sql: str, n: int) -> tuple[str, str]:
    """`PREPARE hot (...) AS ...` for `sql`, and the argument list its EXECUTE takes."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    types = ", ".join(TYPES[name] for name in names)
    args = ", ".join(str(n) if name == "n" else VALUES[name] for name in names)
    return f"PREPARE hot ({types}) AS {text}", args


async def scenario(conn: AsyncConnection[Any], where: str, label: str, name: str,
                   iterations: int) -> None:
    filename, statement, ready, n = SCENARIOS[name]
    named = statements(filename, where)
    sql = named.get(f"{statement}_plain", named[statement])
    prepare, args = prepared(sql, n)
    await conn.execute(prepare)
    try:
        for run in range(1, iterations + 1):
            times = []
            for explain in (True, False):
                await conn.execute(f"DELETE FROM {where}.queue")
                if ready:
                    await conn.execute(
                        f"INSERT INTO {where}.queue (queue, workflow, visible_at, receipt)"
                        " SELECT 'q', 'w' || i || '-' || %s, clock_timestamp() - interval '1 s',"
                        f" nextval('{where}.receipts') FROM generate_series(1, %s) AS i",
                        [f"{run}{explain}", ready],
                    )
                if explain:
                    cursor = await conn.execute(
                        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE hot ({args})")
                    row = await cursor.fetchone()
                    assert row is not None
                    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
                    times += [plan[0]["Planning Time"], plan[0]["Execution Time"]]
                else:
                    start = time.perf_counter()
                    await conn.execute(f"EXECUTE hot ({args})")
                    times.append((time.perf_counter() - start) * 1000)
            print(f"{label},{name},{run},{times[0]:.4f},{times[1]:.4f},{times[2]:.4f}")
    finally:
        await conn.execute("DEALLOCATE hot")
        await conn.execute(f"DELETE FROM {where}.queue")


async def main(label: str, url: str, iterations: int) -> None:
    from psycopg_pool import AsyncConnectionPool

    where = f"ab_{uuid.uuid4().hex[:10]}"
    pool: Any = AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=1, open=False)
    await pool.open(wait=True)
    try:
        await migrate(pool, where)
        for name in SCENARIOS:
            # A fresh connection a scenario, planned as the store's are (no sequential scans).
            async with await AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute("SET enable_seqscan = off")
                await scenario(conn, where, label, name, iterations)
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {where} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40))
