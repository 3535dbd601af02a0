"""What two store contracts need beyond a store the lab can open, made for a backend where the
lab can make it: an effect kit for `CheckpointerContract` (an effect the store performs as it
records, and the counter it adds to) and an offline store for `BoundsContract` (the store with
nothing behind it, so a call that got past the checks would fail with the driver's error).

Both depend on the kind of store, not on the scheduler: the kit is ours for that store, used
where the checkpointer is ours; a server store goes offline through a `Relay` that is cut.
Where neither can be had, `Missing` says why, and the suite skips those tests saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from durability.interfaces import Durable, Effect
from durability.testing.conformance import EffectKit

__all__ = ["Missing", "Relay", "effect_kit", "offline", "relayed"]

#: The port a server store listens on when its URL names none.
_PORTS = {"redis": 6379, "rediss": 6379, "postgresql": 5432, "postgres": 5432}


class Missing(Exception):
    """What the lab cannot make for this backend, and why (a skip's reason)."""


# -- effect kits: a counter beside the store, added to by an effect the store performs ------


class _MemoryCounters:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def effect(self, workflow: str, value: int) -> Effect:
        from durability.memory import MemoryEffect

        def add() -> object:
            self.counts[workflow] = self.counts.get(workflow, 0) + value
            return self.counts[workflow]

        return MemoryEffect(add)

    async def counter(self, workflow: str) -> int:
        return self.counts.get(workflow, 0)


class _SqliteCounters:
    """A table in the store's own file, through the store's database."""

    def __init__(self, database: Any) -> None:
        self.database = database

    def effect(self, workflow: str, value: int) -> Effect:
        from durability.sqlite import SqliteEffect

        return SqliteEffect(
            "INSERT INTO lab_counters (workflow, n) VALUES (?, ?)"
            " ON CONFLICT (workflow) DO UPDATE SET n = n + excluded.n RETURNING n",
            (workflow, value))

    async def counter(self, workflow: str) -> int:
        rows = await self.database.read(lambda connection: connection.execute(
            "SELECT n FROM lab_counters WHERE workflow = ?", (workflow,)).fetchall())
        return int(rows[0][0]) if rows else 0


class _PostgresCounters:
    """A table in the place's own database, read on a connection of the kit's own."""

    def __init__(self, url: str) -> None:
        self.url = url

    def effect(self, workflow: str, value: int) -> Effect:
        from durability.postgres import PostgresEffect

        return PostgresEffect(
            "INSERT INTO public.lab_counters AS c (workflow, n) VALUES (%s, %s)"
            " ON CONFLICT (workflow) DO UPDATE SET n = c.n + EXCLUDED.n RETURNING n",
            (workflow, value))

    async def counter(self, workflow: str) -> int:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT n FROM public.lab_counters WHERE workflow = %s", (workflow,))
            row = await cursor.fetchone()
        return 0 if row is None else int(row[0])


class _RedisCounters:
    """A key under the place's namespace, on the workflow's own slot (so a cluster runs the
    effect's script where its records are), expiring in ten minutes."""

    def __init__(self, url: str, namespace: str, cluster: bool) -> None:
        self.url, self.namespace, self.cluster = url, namespace, cluster

    def key(self, workflow: str) -> str:
        from durability.redis import workflow_tag

        return f"{self.namespace}:counter:{workflow_tag(workflow)}"

    def effect(self, workflow: str, value: int) -> Effect:
        from durability.redis import LuaEffect

        return LuaEffect("local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
                         "redis.call('PEXPIRE', KEYS[1], 600000) return n",
                         [self.key(workflow)], [value])

    async def counter(self, workflow: str) -> int:
        from redis.asyncio import Redis
        from redis.asyncio.cluster import RedisCluster

        client: Any = (RedisCluster.from_url(self.url) if self.cluster
                       else Redis.from_url(self.url))
        try:
            return int(await client.get(self.key(workflow)) or 0)
        finally:
            await client.aclose()


async def effect_kit(store: str, durable: Durable, base: str, tag: str, *,
                     cluster: bool = False) -> EffectKit:
    """The effect kit for `durable`, a store of kind `store` opened on the place (`base`,
    `tag`) the lab made: ours for that kind, where its checkpointer is ours (an effect is
    something that checkpointer knows how to perform); else `Missing`."""
    checkpointer = durable.checkpointer
    kind = type(checkpointer).__name__
    if store == "memory":
        from durability.memory import MemoryCheckpointer

        if isinstance(checkpointer, MemoryCheckpointer):
            return _MemoryCounters()
    elif store == "sqlite":
        from durability.sqlite import SqliteCheckpointer

        if isinstance(checkpointer, SqliteCheckpointer):
            await checkpointer.database.write(lambda connection: connection.execute(
                "CREATE TABLE IF NOT EXISTS lab_counters (workflow TEXT PRIMARY KEY, n INTEGER)"))
            return _SqliteCounters(checkpointer.database)
    elif store == "postgres":
        from durability.postgres import PostgresCheckpointer

        if isinstance(checkpointer, PostgresCheckpointer):
            import psycopg

            async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
                await conn.execute("CREATE TABLE IF NOT EXISTS public.lab_counters "
                                   "(workflow text PRIMARY KEY, n bigint NOT NULL)")
            return _PostgresCounters(base)
    elif store == "redis":
        from durability.redis import RedisCheckpointer

        if isinstance(checkpointer, RedisCheckpointer):
            return _RedisCounters(base, f"lab-{tag}", cluster)
    raise Missing(f"its checkpointer ({kind}) is not ours for {store}, so the lab has no "
                  "effect it performs: the transact tests need the store's own effect kit")


# -- offline: the store with nothing behind it ----------------------------------------------


class Relay:
    """A TCP relay on a port of its own to `host:port`, until `cut`: then it listens no more
    and every connection through it is closed, as a server that went away does."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.pumps: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                        ) -> None:
        try:
            upstream, sink = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, sink}
        for source, target in ((reader, sink), (upstream, writer)):
            pump = asyncio.get_running_loop().create_task(self._pump(source, target))
            self.pumps.add(pump)
            pump.add_done_callback(self.pumps.discard)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while chunk := await source.read(65536):
                target.write(chunk)
                await target.drain()
        target.close()

    async def cut(self) -> None:
        if self.server is not None:
            self.server.close()
        for pump in list(self.pumps):
            pump.cancel()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*self.pumps, return_exceptions=True)


@contextlib.asynccontextmanager
async def relayed(base: str) -> AsyncIterator[tuple[str, Relay]]:
    """`base` (a server store's URL) through a `Relay` of its own: the URL to open the store
    on, and the relay to cut. A URL with no host to relay is `Missing`."""
    parts = urlsplit(base)
    host, port = parts.hostname, parts.port or _PORTS.get(parts.scheme)
    if not host or port is None:
        raise Missing(f"its URL names no host and port the lab can put a relay in front of "
                      f"({parts.scheme}://...)")
    relay = Relay(host, port)
    mine = await relay.start()
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{mine}" if user else f"127.0.0.1:{mine}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc)), relay
    finally:
        await relay.cut()


def _databases(durable: Durable) -> Iterator[Any]:
    """The SQLite databases under `durable`'s checkpointer and scheduler, each once."""
    from durability.sqlite import SqliteDatabase

    seen: list[Any] = []
    for part in (durable.checkpointer, durable.scheduler):
        database = getattr(part, "database", None)
        if isinstance(database, SqliteDatabase) and all(database is not d for d in seen):
            seen.append(database)
            yield database


async def offline(store: str, durable: Durable) -> None:
    """Take `durable`, a store of kind `store` that is not behind a relay, offline where that
    can be done in place: memory has nothing to take away (it does no I/O, and answers); a
    SQLite store's connections are closed under it, so a statement raises sqlite3's own error.
    Else `Missing`."""
    if store == "memory":
        return
    if store == "sqlite":
        found = list(_databases(durable))
        if not found:
            raise Missing("its parts hold no SQLite database of ours to close under them")
        for database in found:
            await database.writer(lambda connection: connection.close())
            await database.read(lambda connection: connection.close())
        return
    raise Missing(f"a {store} store is taken offline by a relay in front of its server")
