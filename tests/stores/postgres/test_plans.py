"""The store's hot statements find their rows by key, whatever the statistics say.

Each statement runs on a generic plan kept for a connection's life, made from the tables as
they were when it was planned. Planned over tables with rows but no statistics (a new database
in its first minute, or statistics from before a burst), a plan must still reach the rows a
statement names through their key or where they lie, never by reading a whole table (or the
whole of one queue) per call: that cost would grow with the tables, for every pass.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from durability.postgres import configure, migrate
from durability.postgres.statements import statements

#: A type for each parameter name the statements use, for PREPARE.
TYPES = {
    "queue": "text", "channel": "text", "lease": "interval", "budget": "interval",
    "alive": "interval", "n": "int8", "asked": "text", "lock_wait": "text", "workflow": "text",
    "token": "int8", "receipt": "int8", "key": "text", "value": "text", "state": "text",
    "detail": "text", "within": "interval", "ended_channel": "text", "ending_key": "text",
    "ending_value": "text", "held_key": "text", "priority": "int2", "limit_key": "text",
    "limit_at_most": "int4", "limit_per": "interval", "when": "timestamptz",
    "hold": "text",
}
HOT = [
    ("durable.sql", "take_many"), ("durable.sql", "take"), ("durable.sql", "finish_many"),
    ("durable.sql", "finish_many_plain"),
    ("durable.sql", "finish_settled"), ("durable.sql", "finish_settled_limited"),
    ("durable.sql", "finish_limited"), ("checkpointer.sql", "record_many"),
    ("checkpointer.sql", "record"), ("checkpointer.sql", "claim"), ("scheduler.sql", "done"),
    ("scheduler.sql", "extend"), ("checkpointer.sql", "renew"), ("scheduler.sql", "take"),
    ("scheduler.sql", "done_limited"), ("scheduler.sql", "extend_limited"),
    ("scheduler.sql", "wake_at"), ("scheduler.sql", "make_ready"),
    ("scheduler.sql", "take_plain"), ("durable.sql", "take_plain"),
    ("durable.sql", "take_many_plain"), ("scheduler.sql", "earliest"),
    ("scheduler.sql", "backlog"),
]
TABLES = {"queue", "claims", "records", "standings", "limits"}


@pytest.fixture(params=[3, 3000], ids=["small", "large"])
async def schema(
    database_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Any, str]]:
    """A schema of the store's tables holding rows they were never analyzed with: a few
    (a plan made now is kept while they grow), or thousands."""
    rows = int(request.param)
    from psycopg_pool import AsyncConnectionPool

    pool: Any = AsyncConnectionPool(database_url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=2, open=False, configure=configure)
    await pool.open(wait=True)
    name = f"plans_{uuid.uuid4().hex[:10]}"
    await migrate(pool, name)
    async with pool.connection() as conn:
        await conn.execute(
            f"INSERT INTO {name}.queue (queue, workflow, visible_at, receipt)"
            " SELECT 'q', 'w' || i, now(), i FROM generate_series(1, %s) AS i", [rows]
        )
        await conn.execute(
            f"INSERT INTO {name}.claims (workflow, token, until, deadline)"
            " SELECT 'w' || i, i, now(), now() FROM generate_series(1, %s) AS i", [rows]
        )
        await conn.execute(
            f"INSERT INTO {name}.records (workflow, key, value)"
            " SELECT 'w' || i, 'k', '1' FROM generate_series(1, %s) AS i", [rows]
        )
    try:
        yield pool, name
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {name} CASCADE")
        await pool.close()


def _scans(node: dict[str, Any], parent: str = "") -> Iterator[tuple[dict[str, Any], str]]:
    """Every node that reads a table or an index (a bitmap's index scan names no table), with
    the type of the node above it."""
    if "Relation Name" in node or "Index Name" in node:
        yield node, parent
    for child in node.get("Plans", ()):
        yield from _scans(child, node["Node Type"])


@pytest.mark.parametrize(("filename", "name"), HOT, ids=[name for _, name in HOT])
async def test_a_generic_plan_reaches_its_rows_by_key_on_tables_never_analyzed(
    schema: tuple[Any, str], filename: str, name: str
) -> None:
    pool, where = schema
    scans = await _explained(pool, where, filename, name)
    assert any(scan.get("Relation Name") in TABLES for scan, _ in scans), "reads no table?"
    for scan, above in scans:
        table = scan.get("Relation Name")
        assert not (table in TABLES and scan["Node Type"] == "Seq Scan"), (
            f"{name} reads all of {table}"
        )
        # The queue by priority is read a level at a time (the level in the condition), or
        # for its highest level alone (one entry: a Limit above the scan).
        if scan.get("Index Name") == "queue_by_priority" and above != "Limit":
            assert "priority" in str(scan.get("Index Cond", "")), (
                f"{name} reads the whole queue for its rows"
            )


@pytest.mark.parametrize(("filename", "name"), [("scheduler.sql", "cancel"),
                                                ("durable.sql", "delete")])
async def test_a_cancel_reads_only_the_limits_rows_its_workflow_holds_a_slot_in(
    schema: tuple[Any, str], filename: str, name: str
) -> None:
    """Not every key's row of the queue (the primary key's range of it): the rows whose holds
    name the workflow, found through the holders' index."""
    pool, where = schema
    scans = await _explained(pool, where, filename, name)
    read = {scan["Index Name"] for scan, _ in scans
            if scan.get("Index Name", "").startswith("limits")}
    assert read == {"limits_by_holder"}, f"{name} reads the limits through {read}"
    assert not any(scan.get("Relation Name") == "limits" and scan["Node Type"] == "Seq Scan"
                   for scan, _ in scans)


async def _explained(
    pool: Any, where: str, filename: str, name: str
) -> list[tuple[dict[str, Any], str]]:
    """The generic plan of statement `name`, as `_scans` lists its reads."""
    sql = statements(filename, where)[name]
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    values = {
        "queue": "'q'", "channel": "'c'", "lease": "'30 s'", "budget": "'1 h'",
        "alive": "'30 s'", "n": "20", "lock_wait": "'50ms'", "workflow": "'w1'", "token": "1",
        "receipt": "1", "key": "'k'", "value": "'1'", "state": "'completed'", "detail": "'{}'",
        "within": "'30 s'", "ended_channel": "'e'", "ending_key": "'engine:ended:000000'",
        "ending_value": "'{}'", "held_key": "'k'", "priority": "0", "limit_key": "NULL",
        "limit_at_most": "NULL", "limit_per": "NULL", "when": "now()", "hold": "'1/w1'",
        "asked": "'" + json.dumps([{"workflow": f"w{i}", "token": i, "receipt": i, "key": "k",
                                    "value": "1", "alive_us": 30_000_000, "n": i,
                                    "state": "completed", "detail": "{}",
                                    "ending_key": "engine:ended:000000", "ending_value": "{}",
                                    "held_key": "k", "hold": f"{i}/w{i}"}
                                   for i in range(1, 21)]) + "'",
    }
    async with pool.connection() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        types = ", ".join(TYPES[n] for n in names)
        await conn.execute(f"PREPARE hot ({types}) AS {text}")
        try:
            args = ", ".join(values[n] for n in names)
            cursor = await conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE hot ({args})")
            row = await cursor.fetchone()
        finally:
            await conn.execute("DEALLOCATE hot")
            await conn.execute("RESET plan_cache_mode")
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(_scans(plan[0]["Plan"]))


async def test_the_store_s_connections_plan_by_key_and_an_effect_plans_as_anywhere(
    database_url: str,
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from durability.connect import open_durable
    from durability.postgres import PostgresEffect

    where = conninfo_to_dict(database_url)
    url = f"postgresql://{where['user']}@{where['host']}:{where['port']}/{where['dbname']}"
    async with open_durable(url) as durable:
        async with durable.checkpointer.pool.connection() as conn:  # type: ignore[attr-defined]
            cursor = await conn.execute("SHOW enable_seqscan")
            assert await cursor.fetchone() == ("off",)
            cursor = await conn.execute("SHOW jit")
            assert await cursor.fetchone() == ("off",)
            cursor = await conn.execute("SHOW plan_cache_mode")
            assert await cursor.fetchone() == ("force_generic_plan",)
        async with await psycopg.AsyncConnection.connect(database_url) as plain:
            cursor = await plain.execute(
                "SELECT current_setting('jit') || ' ' || current_setting('plan_cache_mode')"
            )
            server_jit = await cursor.fetchone()
        name = f"plans-effect-{uuid.uuid4().hex[:8]}"
        holder = await durable.checkpointer.claim(name, timedelta(minutes=1), timedelta(minutes=1))
        assert holder is not None
        effect = PostgresEffect(
            "SELECT current_setting('enable_seqscan') || ' ' || current_setting('jit')"
            " || ' ' || current_setting('plan_cache_mode')"
        )
        recorded = await durable.checkpointer.transact(holder, "setting", effect)
        assert server_jit is not None
        assert recorded.value == f"on {server_jit[0]}"


async def test_a_statement_the_planner_cannot_serve_by_index_is_not_compiled(
    schema: tuple[Any, str],
) -> None:
    """A scan the store's connections are told to avoid still costs ten billion, past any
    `jit_above_cost`: were JIT on, the delete of a `result` waiter's row (whose sweep of stale
    rows no index serves) would be compiled on every run, some 100 ms of the server's CPU."""
    pool, where = schema
    sql = re.sub(r"%\((\w+)\)s", "NULL", statements("checkpointer.sql", where)["unwatch"])
    async with pool.connection() as conn:
        cursor = await conn.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        row = await cursor.fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    assert "JIT" not in plan[0], plan[0].get("JIT")
