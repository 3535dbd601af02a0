"""`open_url`: a `postgresql://` (or `postgres://`) URL to an open `PostgresDurable`
(`open_durable`'s Postgres entry), its tables created on open (`migrate`). Its options
(`open_url` lists them) are read and checked here, before anything connects; the rest of the
query is libpq's connection parameters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from durability.codec import read_json
from durability.interfaces import Durable
from durability.opening import Opening
from durability.postgres import libpq_pipeline
from durability.postgres.checkpointer import PostgresCheckpointer
from durability.postgres.durable import PostgresDurable
from durability.postgres.migrate import migrate
from durability.postgres.planning import configure
from durability.postgres.scheduler import PostgresScheduler
from durability.postgres.statements import check_schema
from durability.postgres.traffic import attach
from durability.storekit.outage import StoreUnavailable
from durability.storekit.traffic import Traffic

__all__ = ["OPTIONS", "PostgresUrl", "open_url"]

#: The options of a Postgres URL that are ours rather than libpq's.
OPTIONS = ("queue", "notify", "schema", "call_timeout_ms")


@dataclass(frozen=True, slots=True)
class PostgresUrl:
    """A Postgres URL read and checked: what `open_url` builds the store from."""

    queue: str
    schema: str
    notify: bool
    bound: float  # each call's bound, checkout included, in seconds
    conninfo: str  # the URL handed to libpq: its own parameters only
    where: str  # host:port/database, for messages

    @classmethod
    def read(cls, opening: Opening) -> PostgresUrl:
        """Every option of the URL checked, or a `ValueError` naming the one at fault."""
        url = opening.url
        ours, rest = opening.options(OPTIONS, _libpq_options(), "libpq")
        parts = urlsplit(url)
        if not parts.netloc and not parts.path.strip("/") and not rest:
            raise ValueError(
                f"store URL {opening.shown!r} names no host and no database; write"
                " postgresql://user@host:port/database"
            )
        queue = ours.get("queue", "default")
        schema = check_schema(ours.get("schema", "durability"))  # refused before connecting
        notify = opening.switch(ours, "notify", f"notify must be 'on' or 'off': {url!r}")
        bound = opening.call_timeout(ours).total_seconds()
        conninfo = opening.rebuilt(rest)
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as error:  # libpq's own parse: a bad port, a bad value
            raise ValueError(f"store URL {opening.shown!r}: {error}") from None
        where = (
            f"{params.get('host') or 'the local socket'}:{params.get('port') or 5432}"
            f"/{params.get('dbname') or params.get('user') or '(default)'}"
        )
        return cls(queue, schema, notify, bound, conninfo, where)

    async def probe(self, opening: Opening) -> None:
        """Connect once, alone, or raise `StoreUnavailable` saying why: the pool would retry a
        refused port or an unknown database in the background until its own timeout and then
        report only that it timed out."""
        try:
            async with asyncio.timeout(opening.connect_timeout.total_seconds()):
                probe = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            await probe.close()
        except TimeoutError as error:
            raise self.silent(opening) from error
        except psycopg.OperationalError as error:
            said = " ".join(str(error).split())
            raise StoreUnavailable(
                f"could not connect to PostgreSQL at {self.where}: {said}"
            ) from error

    def silent(self, opening: Opening) -> StoreUnavailable:
        """The error of a server that did not answer within the connect timeout."""
        return StoreUnavailable(
            f"PostgreSQL at {self.where} did not answer within {opening.connect_timeout}"
        )

    def pool(self, traffic: Traffic) -> AsyncConnectionPool:
        """The store's pool (not open yet): autocommit connections, each counted into
        `traffic` and configured (`planning.configure`), every call bounded by its timeout."""

        async def counted(conn: Any) -> None:
            attach(conn, traffic)
            set_json_loads(read_json, conn)  # the checkpoint a claim hands back, read in one step
            await configure(conn)

        return AsyncConnectionPool(
            self.conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=8,
            # Every store call, checkout included, is bounded by the pool's timeout
            # (durability.postgres.statements).
            timeout=self.bound,
            open=False,
            configure=counted,
        )


@contextlib.asynccontextmanager
async def open_url(opening: Opening) -> AsyncIterator[Durable]:
    """The `PostgresDurable` a Postgres URL names, its tables migrated and its scheduler
    prepared; closed when the block ends, once the connections a cancelled call left reading
    their answers have settled (at most `libpq_pipeline.SETTLE`).

    | option | meaning |
    |---|---|
    | `queue` | the queue's name (`default`) |
    | `schema` | the schema of the tables, created on open (`durability`): one per application |
    | `notify` | `on` (default): idle workers are woken by LISTEN/NOTIFY; `off` to poll alone |
    | `call_timeout_ms` | how long one call, its pool checkout included, waits (10 s) |

    and libpq's connection parameters.
    """
    read = PostgresUrl.read(opening)
    await read.probe(opening)
    traffic = Traffic()
    pool = read.pool(traffic)
    scheduler: PostgresScheduler | None = None
    try:
        try:
            await pool.open(wait=True, timeout=opening.connect_timeout.total_seconds())
        except PoolTimeout as error:  # went away since the probe
            raise read.silent(opening) from error
        await migrate(pool, read.schema)
        scheduler = PostgresScheduler(
            pool=pool,
            lease=opening.lease,
            poll=opening.poll,
            queue=read.queue,
            schema=read.schema,
            notify=read.notify,
        )
        await scheduler.prepare()
        checkpointer = PostgresCheckpointer(pool=pool, schema=read.schema)
        yield PostgresDurable(checkpointer, scheduler, traffic)
    finally:
        if scheduler is not None:
            await scheduler.close()
        # What a cancelled call left settling goes before the pool does (the scheduler's
        # close did, unless the store failed before it had one).
        await libpq_pipeline.settled(pool)
        await pool.close()


def _libpq_options() -> frozenset[str]:
    """libpq's connection parameters (the keywords of `PQconndefaults`), and `ssl`, the alias
    libpq's URI parser takes for `sslmode=require`."""
    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults()) | {"ssl"}
