"""Time the Postgres statements this branch changed on the common path (no priority, no limit),
for one revision.

    python results/ab/postgres-limit-fill/explain.py LABEL URL [ITERATIONS] >> explain.csv

Run with the revision's own `durability` importable first (its virtualenv, or PYTHONPATH set to
its checkout). It migrates a fresh schema, PREPAREs each statement as the store sends it on a
plain queue (`take_many_plain`; `finish_many` and `finish_settled` of passes under no limit),
on a fresh connection planned as the store's are (`enable_seqscan = off`), and runs it
ITERATIONS times (default 40) under `EXPLAIN (ANALYZE, FORMAT JSON)` and as often plainly (the
round trip, the client's clock), the tables set up before each run and emptied after it,
outside the timing. Each row printed is one run: label, scenario, run, planning ms, execution
ms, round trip ms.
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
    "alive": "interval", "n": "int8", "asked": "text", "ended_channel": "text",
    "workflow": "text", "token": "int8", "receipt": "int8", "state": "text", "detail": "text",
    "ending_key": "text", "ending_value": "text", "held_key": "text", "hold": "text",
}
VALUES = {
    "queue": "'q'", "channel": "'ab_fill'", "lease": "'30 s'", "budget": "'1 h'",
    "alive": "'30 s'", "ended_channel": "'ab_fill_ended'", "workflow": "'w1'", "token": "1",
    "receipt": "1", "state": "'completed'", "detail": "'{}'", "ending_key": "NULL",
    "ending_value": "NULL", "held_key": "NULL", "hold": "NULL",
}
#: scenario: (file, statement, rows set up before each run, n)
SCENARIOS = {
    "take_many 64: 64 ready": ("durable.sql", "take_many_plain", 64, 64),
    "finish_many: 32 passes": ("durable.sql", "finish_many", 32, 32),
    "finish_settled: 1 pass": ("durable.sql", "finish_settled", 1, 1),
}


def _asked(rows: int) -> str:
    asked = [{"workflow": f"w{i}", "token": i, "receipt": i, "state": "completed",
              "detail": "{}", "ending_key": None, "ending_value": None, "held_key": None,
              "hold": None} for i in range(1, rows + 1)]
    return "'" + json.dumps(asked) + "'"


def prepared(sql: str, n: int, rows: int) -> tuple[str, str]:
    """`PREPARE hot (...) AS ...` for `sql`, and the argument list its EXECUTE takes."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    types = ", ".join(TYPES[name] for name in names)
    values = {**VALUES, "n": str(n), "asked": _asked(rows)}
    return f"PREPARE hot ({types}) AS {text}", ", ".join(values[name] for name in names)


async def _set_up(conn: AsyncConnection[Any], where: str, statement: str, rows: int) -> None:
    for table in ("queue", "claims", "standings"):
        await conn.execute(f"DELETE FROM {where}.{table}")
    if statement.startswith("take"):  # ready rows (receipts from the sequence)
        await conn.execute(
            f"INSERT INTO {where}.queue (queue, workflow, visible_at, receipt)"
            " SELECT 'q', 'w' || i, clock_timestamp() - interval '1 s', i"
            " FROM generate_series(1, %s) AS i", [rows])
        return
    # passes in flight: each row taken (its receipt i), each claim live under token i
    await conn.execute(
        f"INSERT INTO {where}.queue (queue, workflow, visible_at, receipt)"
        " SELECT 'q', 'w' || i, clock_timestamp() + interval '30 s', i"
        " FROM generate_series(1, %s) AS i", [rows])
    await conn.execute(
        f"INSERT INTO {where}.claims (workflow, token, until, deadline)"
        " SELECT 'w' || i, i, clock_timestamp() + interval '30 s',"
        " clock_timestamp() + interval '1 h' FROM generate_series(1, %s) AS i", [rows])


async def scenario(conn: AsyncConnection[Any], where: str, label: str, name: str,
                   iterations: int) -> None:
    filename, statement, rows, n = SCENARIOS[name]
    prepare, args = prepared(statements(filename, where)[statement], n, rows)
    await conn.execute(prepare)
    try:
        for run in range(1, iterations + 1):
            times = []
            for explain in (True, False):
                await _set_up(conn, where, statement, rows)
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


async def main(label: str, url: str, iterations: int) -> None:
    from psycopg_pool import AsyncConnectionPool

    where = f"ab_{uuid.uuid4().hex[:10]}"
    pool: Any = AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=1, open=False)
    await pool.open(wait=True)
    try:
        await migrate(pool, where)
        for name in SCENARIOS:
            async with await AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute("SET enable_seqscan = off")
                await scenario(conn, where, label, name, iterations)
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {where} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40))
