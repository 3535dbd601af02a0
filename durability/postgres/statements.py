"""How this store talks SQL: its named statements, and the boundary every call crosses.

The statements live in `.sql` files beside this module (read by `statements`). Every value is a
bound parameter; nothing is ever interpolated into a statement, workflow ids least of all. The
one exception is the schema the tables live in, which cannot be a bound parameter: it goes into
the text only after `check_schema` has let through nothing but a plain lower-case identifier.

`borrowed`, `one` and `every` are where every call meets the pool, and so the one place a
missing table becomes `NotMigrated` rather than a raw `UndefinedTable`, and where a call is
bounded (`call_bound`) and an outage raises `Unanswered` (or `Lost`) instead of the driver's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from functools import cache
from importlib.resources import files
from typing import Any, TypeAlias, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, errors, pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool

from durability.postgres import libpq_pipeline, traffic
from durability.signals import NotMigrated
from durability.storekit.outage import Unanswered

T = TypeVar("T")

#: The pool a store borrows from. Any row factory works (the store asks for tuples itself);
#: `kwargs={"autocommit": True}` makes each single-statement operation one round trip.
Pool: TypeAlias = "AsyncConnectionPool[Any]"
Params: TypeAlias = Mapping[str, object]

_ROWS = pq.ExecStatus.TUPLES_OK

#: The schema the tables live in unless a store is given another: one schema per application.
DEFAULT_SCHEMA = "durability"
#: What a schema may be: unquoted, so it reads the same everywhere, and short enough that the
#: notification channel named after it (`<schema>_ready`) fits Postgres's 63-byte identifiers.
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,56}")
#: A table (or the receipts sequence) of ours, qualified by the schema in the `.sql` files.
_QUALIFIED = re.compile(
    r"\bdurability\."
    r"(?=(?:records|records_seq_seq|claims|queue|receipts|standings|schedules|limits|queue_by_visibility"
    r"|queue_limited|watchers|watched)\b)"
)
#: Every schema a store of this process was built for: a missing relation in one of them is a
#: missing migration, not a user's mistake (see `_ours_missing`).
_SCHEMAS: set[str] = {DEFAULT_SCHEMA}

_HEADER = re.compile(r"^-- name: (\w+)[ \t]*$", re.MULTILINE)
#: `-- include: <file> <name>`: that statement's text here (a part defined earlier in the same
#: file, or any statement of another file), so two statements that share a part say it once.
_INCLUDE = re.compile(r"^-- include: (\S+) (\w+)[ \t]*$")


def check_schema(schema: str) -> str:
    """Refuse a schema name that is not a plain lower-case identifier of at most 57 characters,
    or that Postgres reserves (`pg_...`)."""
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a str, not {type(schema).__name__}")
    if not _SCHEMA.fullmatch(schema) or schema.startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} must be lower-case letters, digits and '_' (not first a digit, "
            "not starting 'pg_'), at most 57 characters"
        )
    return schema


def channel(schema: str) -> str:
    """The notification channel of a schema's queues: `durability_ready` for the default."""
    return f"{check_schema(schema)}_ready"


def ended_channel(schema: str) -> str:
    """The channel a schema's workflows' endings are told on (the payload is the workflow id):
    `durability_ended` for the default."""
    return f"{check_schema(schema)}_ended"


@cache
def statements(filename: str, schema: str = DEFAULT_SCHEMA) -> Mapping[str, str]:
    """The named statements of one `.sql` file beside this module, over the tables in `schema`
    (with `-- include:` lines replaced by the part they name).

    There is one file per concept (`checkpointer.sql`, `scheduler.sql`, `durable.sql`), each
    statement under a `-- name: <op>` header, so they read and diff as SQL. The files name the
    tables `durability.<table>`; for another schema that prefix is swapped for `schema`, the one
    thing ever put into statement text, and only once `check_schema` has passed it.
    """
    check_schema(schema)
    _SCHEMAS.add(schema)
    named = _named(filename)
    if schema == DEFAULT_SCHEMA:
        return named
    qualified = {name: _QUALIFIED.sub(f"{schema}.", text) for name, text in named.items()}
    traffic.register(filename, qualified)
    return qualified


@cache
def _named(filename: str) -> Mapping[str, str]:
    text = files(__package__).joinpath(filename).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in named:
            raise ValueError(f"{filename}: statement {name!r} is defined twice")
        lines = []
        for line in body.splitlines():
            included = _INCLUDE.match(line)
            if included:  # a part another statement shares, spliced in where it stands
                source, part = included.groups()
                lines.append((named if source == filename else _named(source))[part])
            elif not line.lstrip().startswith("--"):  # comments are for readers, not the wire
                lines.append(line)
        named[name] = "\n".join(lines).strip()
    traffic.register(filename, named)
    return named


def schema(name: str = DEFAULT_SCHEMA) -> str:
    """The whole of `schema.sql` over the schema `name`, for `migrate`."""
    text = files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")
    check_schema(name)
    _SCHEMAS.add(name)
    create = "CREATE SCHEMA IF NOT EXISTS {};"
    text = text.replace(create.format(DEFAULT_SCHEMA), create.format(name))
    return _QUALIFIED.sub(f"{name}.", text)


def _not_migrated(error: BaseException) -> NotMigrated:
    return NotMigrated(
        "the durability tables do not exist in this database: call "
        "`await durability.postgres.migrate(pool)` once before using the store "
        f"({error})"
    )


def _ours_missing(error: BaseException) -> bool:
    """A missing table or schema of our own: a user's PostgresEffect naming a missing table of its
    own is the user's error, and must not be reported as a missing migration."""
    if not isinstance(error, (errors.UndefinedTable, errors.InvalidSchemaName)):
        return False
    said = str(error)
    return any(f'"{name}.' in said or f'"{name}"' in said for name in _SCHEMAS)


class Lost(psycopg.OperationalError, Unanswered):
    """The connection to PostgreSQL was lost, or none could be had (the cause says how):
    terminated, reset, refused, none to be had from the pool. It is an `Unanswered` too, and
    still the `psycopg.OperationalError` it was."""


def _gone(error: BaseException) -> bool:
    """Whether `error` is the server going away rather than a statement failing: psycopg's
    own connection failures (no SQLSTATE: reset, closed, refused, the pool's timeout), a
    connection exception (class 08), an operator's intervention (57P: terminated, shutting
    down, starting up, the database dropped) or too many connections."""
    if not isinstance(error, psycopg.OperationalError) or isinstance(error, Unanswered):
        return False
    state = error.sqlstate
    return state is None or state.startswith(("08", "57P")) or state == "53300"


def lost(pool: Pool, error: BaseException) -> Lost:
    """The error of a call on `pool` whose connection went away with `error`."""
    said = " ".join(str(error).split())
    return Lost(f"PostgreSQL at {where(pool)} went away: {said}")


def call_bound(pool: Pool) -> float | None:
    """How long one call on `pool` may take, checkout included.

    A call gets the pool's `timeout` (`call_timeout_ms` through `open_durable`; psycopg_pool's
    default is 30 s) to be handed a connection, and with its statements a quarter more in all
    (at most a second), so a checkout that fails says so itself. A call past that is cancelled
    (psycopg then cancels its statement on the server; `libpq_pipeline.give_back` reads the
    answers its own pipeline is owed before the pool has the connection again) and raises
    `Unanswered`.
    """
    bound = getattr(pool, "timeout", None)
    if bound is None:
        return None
    return float(bound) + min(1.0, float(bound) / 4)


def where(pool: Pool) -> str:
    """`host:port/database` of the pool's connections, for messages (never a password)."""
    conninfo = getattr(pool, "conninfo", "")
    try:
        params = conninfo_to_dict(conninfo) if isinstance(conninfo, str) else {}
    except psycopg.Error:
        params = {}
    host = params.get("host") or "the local socket"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or '(default)'}"


def timed_out(pool: Pool, bound: float | None) -> Unanswered:
    """The error of a call on `pool` that got no answer within `bound` seconds."""
    return Unanswered(f"PostgreSQL at {where(pool)} did not answer within {bound:g} s")


async def bounded(pool: Pool, call: Awaitable[T]) -> T:
    """What `call` (one store call on `pool`) returns, or `Unanswered` past `call_bound`."""
    bound = call_bound(pool)
    limit = asyncio.timeout(bound)
    try:
        async with limit:
            return await call
    except (TimeoutError, psycopg.OperationalError) as error:
        translated = _outage(pool, bound, limit, error)
        if translated is None:
            raise
        raise translated from error


def _outage(
    pool: Pool, bound: float | None, limit: asyncio.Timeout, error: Exception
) -> Exception | None:
    """The library's error for what a bounded call raised (its bound ran out, or the server
    went away), or None for an error of another kind, to be raised as it is."""
    if isinstance(error, TimeoutError):
        return timed_out(pool, bound) if limit.expired() else None
    if isinstance(error, psycopg.OperationalError) and _gone(error):
        return lost(pool, error)
    return None


@asynccontextmanager
async def borrowed(pool: Pool) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection; commits on success, rolls back on error (the pool's own rule).
    The block, checkout included, is bounded as one call (see `call_bound`)."""
    bound = call_bound(pool)
    limit = asyncio.timeout(bound)
    try:
        async with limit, pool.connection() as conn:
            yield conn
    except (errors.UndefinedTable, errors.InvalidSchemaName) as error:
        if not _ours_missing(error):
            raise
        raise _not_migrated(error) from error
    except (TimeoutError, psycopg.OperationalError) as error:
        translated = _outage(pool, bound, limit, error)
        if translated is None:
            raise
        raise translated from error


async def run(conn: AsyncConnection[Any], sql: str, params: Params) -> AsyncCursor[TupleRow]:
    """Execute one statement and return its cursor, with tuple rows whatever the pool says."""
    _count(conn, sql)
    cursor = conn.cursor(row_factory=tuple_row)
    await cursor.execute(sql, params)
    return cursor


def _count(conn: AsyncConnection[Any], sql: str) -> None:
    """Count one statement sent through a cursor, one round trip of its own."""
    counting = traffic.of(conn)
    if counting is not None:
        counting.request(traffic.name(sql))
        counting.round_trip()


async def one(pool: Pool, sql: str, params: Params) -> TupleRow | None:
    """Run a single statement on its own (one round trip on an autocommit pool); first row.
    Bounded as one call (see `call_bound`)."""
    return await bounded(pool, _one(pool, sql, params))


async def _one(pool: Pool, sql: str, params: Params) -> TupleRow | None:
    """`one`, unbounded.

    Every store operation runs through here (a worker's take, record and finish through
    `batching.StatementBatcher`, which sends the calls of one loop turn together and a lone or
    failed one through here), so it borrows with `getconn`/`putconn` rather than `borrowed` (two
    context managers and an empty commit cost client CPU on every statement), and on an
    autocommit connection sends the statement with libpq's own calls (`libpq_pipeline.exchange`, far
    less CPU than a cursor), keeping what a cursor does: a statement that failed, or that
    `exchange` leaves to a cursor, goes through one, which raises its error (a missing table
    as `NotMigrated`), and a non-autocommit connection is committed or rolled back."""
    conn = await pool.getconn()
    try:
        if conn.autocommit:
            (outcome,) = await libpq_pipeline.exchange(conn, [(sql, params)])
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is not libpq_pipeline.AGAIN:
                return outcome  # type: ignore[return-value]
        _count(conn, sql)
        cursor = conn.cursor(row_factory=tuple_row)
        await cursor.execute(sql, params)
        # The result's status, not `description`, which builds a Column per field to say it.
        result = cursor.pgresult
        row = await cursor.fetchone() if result is not None and result.status == _ROWS else None
        if not conn.autocommit:
            await conn.commit()
        return row
    except BaseException as error:
        if not conn.autocommit and not conn.closed:
            with contextlib.suppress(Exception):
                await conn.rollback()
        if _ours_missing(error):
            raise _not_migrated(error) from error
        raise
    finally:
        await libpq_pipeline.give_back(pool, conn)


async def every(pool: Pool, sql: str, params: Params) -> list[TupleRow]:
    """Run a single read on its own; every row (bounded as one call, by `borrowed`)."""
    async with borrowed(pool) as conn:
        cursor = await run(conn, sql, params)
        return await cursor.fetchall()
