"""`open_durable`: the one place a store is chosen, by URL (`memory://`, `redis://`,
`postgresql://`, `sqlite:///file.db`). Its docstring has the table of URLs, the options, the
bounds and the errors.

Every setting is checked where it enters, before anything connects, and refused with a
`ValueError` naming it, so a driver that would read it another way is never given the chance.
Each driver is imported inside its own branch, so `import durability` (and `memory://`) needs
none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import AsyncIterator, Collection, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from durability.cancelling import stop_if_cancelled
from durability.checks import positive
from durability.interfaces import Durable
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.split import SplitDurable
from durability.storekit.outage import StoreUnavailable, Unanswered
from durability.storekit.traffic import Traffic

__all__ = [
    "CALL_TIMEOUT",
    "CONNECT_TIMEOUT",
    "SCHEMES",
    "StoreUnavailable",
    "Unanswered",
    "open_durable",
    "unavailable",
]

#: Every scheme `open_durable` accepts.
SCHEMES = ("memory", "redis", "rediss", "postgresql", "postgres", "sqlite")

#: How long `open_durable` waits for a store's first answer by default.
CONNECT_TIMEOUT = timedelta(seconds=10)

#: How long one store call waits for its answer by default (`call_timeout_ms`); a blocking
#: read waits its own block first.
CALL_TIMEOUT = timedelta(seconds=10)

_DIGITS = re.compile(r"[0-9]+")

#: redis-py URL options whose value is plain text (it converts the others, listed in its
#: `URL_QUERY_ARGUMENT_PARSERS`). `encoding` and `decode_responses` are left out on purpose:
#: the stores read back what the codec wrote as UTF-8 text.
_REDIS_TEXT_OPTIONS = frozenset(
    {
        "client_name",
        "username",
        "password",
        "lib_name",
        "lib_version",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_ca_path",
        "ssl_ciphers",
        "ssl_password",
    }
)


def unavailable(error: BaseException) -> bool:
    """Whether `error` says the store is unreachable, gone or too slow (so the same request may
    succeed later), rather than that the request itself was refused.

    A store opened here raises `StoreUnavailable` (`Unanswered` after opening) for all of
    these; the drivers' own errors are judged too, for stores built by hand. Looks only at
    drivers already imported: one that is not loaded cannot have raised it.
    """
    if isinstance(error, ConnectionError | TimeoutError):  # StoreUnavailable among them
        return True
    if "redis" in sys.modules:
        from redis import exceptions as redis_errors

        gone = (
            redis_errors.ConnectionError,  # refused, reset, closed; loading; failed auth
            redis_errors.TimeoutError,
            redis_errors.ReadOnlyError,  # a replica until failover promotes it
            redis_errors.TryAgainError,  # a cluster slot moving
            redis_errors.ClusterDownError,
        )
        if isinstance(error, gone):
            return True
    if "psycopg" in sys.modules:
        import psycopg

        # Connection failures, a terminated backend, a cancelled statement, the pool's
        # timeout: the errors of the server's state rather than of the statement.
        if isinstance(error, psycopg.OperationalError):
            return True
    if "durability.sqlite" in sys.modules:
        import sqlite3

        from durability.sqlite.database import busy

        if isinstance(error, sqlite3.OperationalError) and (
            busy(error) or "unable to open" in str(error)
        ):
            return True
    return False


def _shown(url: str) -> str:
    """`url` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


def _check_text(url: str) -> None:
    """Refuse what the URL parser would silently drop or keep: spaces around the URL (it strips
    them, and tabs and newlines anywhere), other control characters, and a `#` (what follows
    it is a fragment, which no store reads: `sqlite:///a#b.db` would open `/a`)."""
    if not isinstance(url, str):
        raise TypeError(f"a store URL must be a str, not {type(url).__name__}")
    if url != url.strip():
        raise ValueError(
            f"store URL {_shown(url.strip())!r} begins or ends with a space, tab or newline;"
            " remove it"
        )
    for character in url:
        if unicodedata.category(character) == "Cc":
            raise ValueError(
                f"store URL {_shown(url)!r} holds the control character {character!r};"
                " percent-encode it if it is meant"
            )
    if "#" in url:
        raise ValueError(
            f"store URL {_shown(url)!r} holds '#', which would end it there: no store takes a"
            " fragment"
        )


def _rebuilt(url: str, query: str) -> str:
    """`url` with `query` as its query, keeping the `//` of an empty host (`urlunsplit` drops
    it, and libpq cannot read `postgresql:/db`)."""
    parts = urlsplit(url)
    text = f"{parts.scheme}://{parts.netloc}{parts.path}"
    return f"{text}?{query}" if query else text


def _options(
    url: str, ours: tuple[str, ...], driver: Collection[str] = (), whose: str = ""
) -> tuple[dict[str, str], str]:
    """Split the query of `url` into our options and the query left for the driver.

    Raises `ValueError` for an option given twice (drivers silently keep one of them) and for
    one that is neither ours nor in `driver` (a typo would otherwise be ignored, or surface as
    a driver's `TypeError`, or as a connection that never succeeds).
    """
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    counts = Counter(name for name, _ in pairs)
    repeated = sorted(name for name, count in counts.items() if count > 1)
    if repeated:
        raise ValueError(
            f"option(s) {repeated} given more than once in store URL {_shown(url)!r};"
            " give each option once"
        )
    unknown = sorted(name for name in counts if name not in ours and name not in driver)
    if unknown:
        allowed = f"{', '.join(ours)}"
        if driver:
            allowed += f"; and {whose}'s: {', '.join(sorted(driver))}"
        raise ValueError(
            f"unknown option(s) {unknown} in store URL {_shown(url)!r}; allowed: {allowed}"
        )
    mine = {name: value for name, value in pairs if name in ours}
    return mine, urlencode([(name, value) for name, value in pairs if name not in ours])


@contextlib.asynccontextmanager
async def open_durable(
    url: str,
    *,
    lease: timedelta = timedelta(seconds=30),
    poll: timedelta | None = None,
    housekeeping: bool = False,
    connect_timeout: timedelta = CONNECT_TIMEOUT,
) -> AsyncIterator[Durable]:
    """Open the store `url` names and yield its `Durable`; close it on exit.

    | URL | Durable |
    |---|---|
    | `memory://` | `SplitDurable(MemoryCheckpointer, MemoryScheduler)`: this process only |
    | `redis://host/db?scheduler=stream` | `RedisDurable(RedisCheckpointer, RedisStreamScheduler)` |
    | `redis://host/db?scheduler=set` | `RedisDurable(RedisCheckpointer, RedisSetScheduler)` |
    | `postgresql://user@host:port/db` | `PostgresDurable`, tables created on open (`migrate`) |
    | `sqlite:///path/to/file.db` | `SqliteDurable` over that file, migrated on open |

    `lease` is the scheduler's lease (how soon a dead worker's workflow is taken over); `poll`
    how often a polling scheduler looks again (the store's default when `None`; the stream
    scheduler blocks instead). With `housekeeping`, the store's background upkeep runs while the
    context is open (on Redis: sweeping expired workflows' standings): a worker asks for it, an
    API need not.

    Trimming is on by default and needs no `housekeeping`: a worker (`work`) over a Redis
    stream trims it itself, once as it starts and then every `trim_every_ms` (1 s) while its
    passes end, so neither an idle worker nor a short workload leaves a growing stream. To
    turn it off, name `trim_every_ms=off` in the URL, or pass `work(..., trim=False)`.

    Raises `ValueError` for a URL no store answers to, naming the scheme or the option at fault,
    before connecting; `StoreUnavailable` if the store does not answer within
    `connect_timeout`, or refuses the connection (below).

    The URL is checked before anything connects, and what a driver would read another way is a
    `ValueError` naming the setting: spaces around it, a control character or a `#` in it; on
    Redis no host (not localhost), a port or database that is not a number (`/3x`, which redis-py
    reads as database 0), a database both in the path and in `?db=`, a namespace that could not
    start a key (`durability.redis.check_namespace`); on Postgres a URL naming neither host nor
    database (`postgresql://`). An unknown or repeated query option names it and lists the allowed
    ones, so a typo is never ignored:

    - Every store: `call_timeout_ms`, how long one call waits for its answer (10 s by default,
      `CALL_TIMEOUT`; see below).
    - Redis: `scheduler` (`stream`, the default, or `set`), `namespace` (what every key of the
      queue and of the checkpoints starts with, default `durability`), for the set `doorbell`
      (`on`, the default, or `off` to poll alone), `cluster=on` for a Redis Cluster (the URL
      names any one node) and, for the stream, `trim_every_ms` (how often a worker reading it
      trims it while passes end, 1 s by default; `off`: never, say for a stream something else
      trims); and the options redis-py's `from_url` takes for the connection the scheme picks.
    - Postgres: `queue` (the queue's name, default `default`), `schema` (the schema the tables
      live in, created on open, default `durability`: one per application sharing a database),
      `notify` (`on`, the default: idle workers are woken by LISTEN/NOTIFY; `off` to poll
      alone), and libpq's connection parameters.
    - SQLite: `queue`, and `doorbell` (`on`, the default: the processes on the file wake each
      other's idle readers, `durability.sqlite.doorbell`; `off` to poll alone); the file is the
      application's own (the namespace).

    A store that cannot be reached fails the open within `connect_timeout` with `StoreUnavailable`
    (a `ConnectionError`) naming where it looked: a refused port, an unknown database, a server that
    does not answer. Once open, every call that is not a blocking read is bounded by
    `call_timeout_ms`, so a frozen server (stopped, a stalled machine, a lock held by another
    session) fails it with `Unanswered` (a `StoreUnavailable`) rather than holding the caller until
    it wakes: on Redis each call's wait for a connection of the pool (at most `max_connections`,
    32 by default, `durability.redis.pooling`) and each of its replies (`durability.redis.bounds`),
    on Postgres each call with
    its pool checkout (the pool's `timeout` for the checkout, a quarter more, at most a second, for
    the whole call), on SQLite the wait for another connection's lock (the busy timeout). A blocking
    read waits its own block, then the bound. A connection lost after opening (the server killed or
    restarted, a backend terminated, the SQLite file removed) is `Unanswered` too, on every store
    and every call, with the driver's error as its cause. A write that got no answer may still land
    (the server may run it as it wakes): `arrive` says so, and sending it again with the same
    workflow and key is safe. `unavailable(error)` tells such an error from a refusal of what was
    asked: the API answers it with 503, a worker waits and tries again.

    Every durable opened here counts what it sends into `durable.traffic` (`durability.Traffic`),
    except over a cluster or a `rediss://` / `unix://` connection, which count nothing.

    `sqlite:///path` names an absolute path; `sqlite://relative/file.db` a path relative to the
    working directory. Each driver is imported inside its own branch, so `import durability` (and
    `memory://`) needs none of them.
    """
    positive("lease", lease)
    positive("connect_timeout", connect_timeout)
    if poll is not None:
        positive("poll", poll)
    _check_text(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path.strip("/") or parts.query:
            raise ValueError(f"memory:// takes no host, path or options, got {url!r}")
        traffic = Traffic()
        checkpointer = MemoryCheckpointer(traffic=traffic)
        yield SplitDurable(checkpointer, MemoryScheduler(lease=lease, traffic=traffic), traffic)
    elif scheme in ("redis", "rediss"):
        async with _redis(url, lease, poll, housekeeping, connect_timeout) as durable:
            stop_if_cancelled()  # opening went through a driver that can swallow it
            yield durable
    elif scheme in ("postgresql", "postgres"):
        async with _postgres(url, lease, poll, connect_timeout) as durable:
            stop_if_cancelled()  # opening went through a driver that can swallow it
            yield durable
    elif scheme == "sqlite":
        async with _sqlite(url, lease, poll) as durable:
            stop_if_cancelled()  # opening went through a driver that can swallow it
            yield durable
    else:
        shown = f"{scheme!r}" if scheme else "no scheme"
        raise ValueError(
            f"unknown store scheme {shown} in {_shown(url)!r}; use memory://, redis://,"
            " postgresql:// or sqlite:///path"
        )


def _redis_driver_options(connection_class: type) -> frozenset[str]:
    """The URL options redis-py's `from_url` hands on to a pool of `connection_class` that the
    pool or the connection takes as a keyword (any other ends in a `TypeError`)."""
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, ConnectionPool

    taken: set[str] = set()
    for cls in (ConnectionPool, *connection_class.__mro__):
        init = vars(cls).get("__init__")
        if init is None:
            continue
        taken.update(
            name
            for name, parameter in inspect.signature(init).parameters.items()
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        )
    return (frozenset(URL_QUERY_ARGUMENT_PARSERS) | _REDIS_TEXT_OPTIONS) & taken


@contextlib.asynccontextmanager
async def _redis(
    url: str,
    lease: timedelta,
    poll: timedelta | None,
    housekeeping: bool,
    connect_timeout: timedelta,
) -> AsyncIterator[Durable]:
    from redis.asyncio import Redis
    from redis.asyncio.connection import SSLConnection
    from redis.exceptions import RedisError

    from durability.redis import (
        RedisCheckpointer,
        RedisDurable,
        RedisSetScheduler,
        RedisStreamScheduler,
        sweeping,
    )
    from durability.redis.bounds import BoundedCluster, BoundedSSLConnection
    from durability.redis.namespace import DEFAULT as DEFAULT_NAMESPACE
    from durability.redis.namespace import check_namespace
    from durability.redis.packed_connection import PackedConnection
    from durability.redis.pooling import MOST, TidyPool

    parts = urlsplit(url)
    # Plain TCP only: rediss:// keeps the TLS connection class its scheme picks.
    connection_class = PackedConnection if parts.scheme == "redis" else SSLConnection
    ours, rest = _options(
        url,
        ("scheduler", "namespace", "doorbell", "cluster", "trim_every_ms", "call_timeout_ms"),
        _redis_driver_options(connection_class),
        "redis-py",
    )
    kind = ours.get("scheduler", "stream")
    if kind not in ("stream", "set"):
        raise ValueError(f"redis scheduler must be 'stream' or 'set', got {kind!r} in {url!r}")
    cluster = ours.get("cluster", "off")
    if cluster not in ("on", "off"):
        raise ValueError(f"cluster must be 'on' or 'off': {url!r}")
    trimming_every = ours.get("trim_every_ms", "1000")
    trim_every = (
        None if trimming_every == "off" else _milliseconds(trimming_every, "trim_every_ms", url)
    )
    doorbell = ours.get("doorbell", "on")
    if doorbell not in ("on", "off") or (kind != "set" and "doorbell" in ours):
        raise ValueError(f"doorbell must be 'on' or 'off', and only with scheduler=set: {url!r}")
    namespace = check_namespace(ours.get("namespace", DEFAULT_NAMESPACE))
    where = _redis_where(url, parts, rest)
    bound = _call_timeout(ours, url).total_seconds()
    # redis-py 8 gives every command a 5 s socket timeout, which it enforces by wrapping each
    # send in a task of its own: a fifth of a worker's CPU per round trip. So the client has
    # none, and its connections keep `call_timeout` with a timer instead (bounds.py); a URL
    # that names `socket_timeout` gets redis-py's as well.
    timeouts: dict[str, Any] = {} if "socket_timeout" in rest else {"socket_timeout": None}
    if "socket_connect_timeout" not in rest:
        timeouts["socket_connect_timeout"] = bound
    traffic = Traffic()
    target = _rebuilt(url, rest)
    client: Any
    if cluster == "on":
        # A cluster client makes its node connections itself, of redis-py's own class: there
        # the bound is redis-py's socket timeout (each send from a task of its own), and its
        # errors are ours once its retries are spent (bounds.BoundedCluster).
        if "socket_timeout" not in rest:
            timeouts["socket_timeout"] = bound
        client = BoundedCluster.from_url(target, decode_responses=True, **timeouts)
    else:
        bounded: dict[str, Any] = {"call_timeout": bound}
        if parts.scheme == "redis":
            bounded |= {"connection_class": PackedConnection, "traffic": traffic}
        else:
            # redis-py's URL parser makes rediss:// pick its own class over any given; the
            # same URL as redis:// with the TLS class named keeps every TLS option.
            target = "redis" + target.removeprefix("rediss")
            bounded |= {"connection_class": BoundedSSLConnection}
        # Bounded, and shrinking back after a fault (pooling.py); a caller waits for a free
        # connection as long as for an answer. A URL's `max_connections` wins over ours.
        pool = TidyPool.from_url(
            target,
            decode_responses=True,
            max_connections=MOST,
            timeout=bound,
            **timeouts,
            **bounded,
        )
        client = Redis.from_pool(pool)
    try:
        scheduler: RedisStreamScheduler | RedisSetScheduler
        if kind == "stream":
            scheduler = RedisStreamScheduler(
                redis=client, namespace=namespace, lease=lease, trim_every=trim_every
            )
        else:
            scheduler = RedisSetScheduler(
                redis=client,
                namespace=namespace,
                lease=lease,
                doorbell=doorbell == "on",
                **({} if poll is None else {"poll": poll}),
            )
        try:
            async with asyncio.timeout(connect_timeout.total_seconds()):
                await client.ping()
                await scheduler.prepare()
        except TimeoutError as error:
            raise StoreUnavailable(
                f"Redis at {where} did not answer within {connect_timeout}"
            ) from error
        except (RedisError, OSError) as error:
            # A refused port, a database index the server does not have, a failed login.
            raise StoreUnavailable(f"could not connect to Redis at {where}: {error}") from error
        # One client for both halves, so arrive, deliver and finish are one script each.
        checkpointer = RedisCheckpointer(redis=client, namespace=namespace)
        durable = RedisDurable(checkpointer, scheduler, traffic)
        async with contextlib.AsyncExitStack() as upkeep:
            if housekeeping:
                # No trimmer here: the workers trim what they answer (`work`'s `trim`).
                await upkeep.enter_async_context(_beside(sweeping(checkpointer)))
            yield durable
    finally:
        await client.aclose()


def _redis_where(url: str, parts: SplitResult, rest: str) -> str:
    """`host:port/db` of a Redis URL, refusing what redis-py would read another way: no host
    (it would go to localhost), a port or a database that is not a number (it reads a path
    such as `/3x` as database 0), and a database given both as the path and as `?db=` (the
    option wins)."""
    if not parts.hostname:
        raise ValueError(
            f"store URL {_shown(url)!r} names no host; write redis://host:port/db"
            " (redis://127.0.0.1:6379/0 for a local server)"
        )
    try:
        port = parts.port or 6379
    except ValueError:
        raise ValueError(f"the port in store URL {_shown(url)!r} is not a number") from None
    path = parts.path.removeprefix("/")
    given = dict(parse_qsl(rest, keep_blank_values=True)).get("db")
    for db in (path, given):
        if db is not None and db != "" and not _DIGITS.fullmatch(db):
            raise ValueError(
                f"the database in store URL {_shown(url)!r} must be a number"
                f" (redis://host:port/3), got {db!r}"
            )
    if path and given is not None:
        raise ValueError(
            f"the database is given twice in store URL {_shown(url)!r} (the path /{path} and"
            f" ?db={given}); give it once"
        )
    return f"{parts.hostname}:{port}/{path or given or '0'}"


def _call_timeout(ours: dict[str, str], url: str) -> timedelta:
    """`call_timeout_ms` of a URL, or `CALL_TIMEOUT`."""
    given = ours.get("call_timeout_ms")
    return CALL_TIMEOUT if given is None else _milliseconds(given, "call_timeout_ms", url)


def _milliseconds(text: str, name: str, url: str) -> timedelta:
    """A URL option that is a positive number of milliseconds, or a `ValueError` naming it."""
    try:
        value = timedelta(milliseconds=float(text))
    except (ValueError, OverflowError):
        raise ValueError(f"{name} must be a number of milliseconds, got {text!r} in {url!r}"
                         ) from None
    return positive(name, value)


@contextlib.asynccontextmanager
async def _beside(upkeep: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run `upkeep` as a task while the block runs; cancel it after."""
    task = asyncio.create_task(upkeep)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _libpq_options() -> frozenset[str]:
    """libpq's connection parameters (the keywords of `PQconndefaults`), and `ssl`, the alias
    libpq's URI parser takes for `sslmode=require`."""
    from psycopg import pq

    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults()) | {"ssl"}


@contextlib.asynccontextmanager
async def _postgres(
    url: str, lease: timedelta, poll: timedelta | None, connect_timeout: timedelta
) -> AsyncIterator[Durable]:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

    from durability.postgres import (
        PostgresCheckpointer,
        PostgresDurable,
        PostgresScheduler,
        configure,
        migrate,
    )
    from durability.postgres.statements import check_schema
    from durability.postgres.traffic import attach

    ours, rest = _options(
        url, ("queue", "notify", "schema", "call_timeout_ms"), _libpq_options(), "libpq"
    )
    parts = urlsplit(url)
    if not parts.netloc and not parts.path.strip("/") and not rest:
        raise ValueError(
            f"store URL {_shown(url)!r} names no host and no database; write"
            " postgresql://user@host:port/database"
        )
    queue = ours.get("queue", "default")
    schema = check_schema(ours.get("schema", "durability"))  # refused before connecting
    notify = ours.get("notify", "on")
    if notify not in ("on", "off"):
        raise ValueError(f"notify must be 'on' or 'off': {url!r}")
    bound = _call_timeout(ours, url).total_seconds()
    conninfo = _rebuilt(url, rest)
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:  # libpq's own parse: a bad port, a bad value
        raise ValueError(f"store URL {_shown(url)!r}: {error}") from None
    where = (
        f"{params.get('host') or 'the local socket'}:{params.get('port') or 5432}"
        f"/{params.get('dbname') or params.get('user') or '(default)'}"
    )
    seconds = connect_timeout.total_seconds()
    # One connection first, alone: the pool would retry a refused port or an unknown database
    # in the background until its own timeout and then report only that it timed out.
    try:
        async with asyncio.timeout(seconds):
            probe = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        await probe.close()
    except TimeoutError as error:
        raise StoreUnavailable(
            f"PostgreSQL at {where} did not answer within {connect_timeout}"
        ) from error
    except psycopg.OperationalError as error:
        said = " ".join(str(error).split())
        raise StoreUnavailable(f"could not connect to PostgreSQL at {where}: {said}") from error
    traffic = Traffic()

    async def counted(conn: Any) -> None:
        attach(conn, traffic)
        await configure(conn)

    pool: AsyncConnectionPool = AsyncConnectionPool(
        conninfo,
        kwargs={"autocommit": True},
        min_size=1,
        max_size=8,
        # Every store call, checkout included, is bounded by the pool's timeout
        # (durability.postgres.statements).
        timeout=bound,
        open=False,
        configure=counted,
    )
    scheduler: PostgresScheduler | None = None
    try:
        try:
            await pool.open(wait=True, timeout=seconds)
        except PoolTimeout as error:  # went away since the probe
            raise StoreUnavailable(
                f"PostgreSQL at {where} did not answer within {connect_timeout}"
            ) from error
        await migrate(pool, schema)
        scheduler = PostgresScheduler(
            pool=pool, lease=lease, poll=poll, queue=queue, schema=schema, notify=notify == "on"
        )
        await scheduler.prepare()
        checkpointer = PostgresCheckpointer(pool=pool, schema=schema)
        yield PostgresDurable(checkpointer, scheduler, traffic)
    finally:
        if scheduler is not None:
            await scheduler.close()
        await pool.close()


@contextlib.asynccontextmanager
async def _sqlite(url: str, lease: timedelta, poll: timedelta | None) -> AsyncIterator[Durable]:
    import sqlite3

    from durability.sqlite import (
        SqliteCheckpointer,
        SqliteDurable,
        SqliteScheduler,
        migrate,
        open_database,
    )

    parts = urlsplit(url)
    ours, _ = _options(url, ("queue", "call_timeout_ms", "doorbell"))
    doorbell = ours.get("doorbell", "on")
    if doorbell not in ("on", "off"):
        raise ValueError(f"doorbell must be 'on' or 'off': {_shown(url)!r}")
    path = parts.netloc + parts.path
    if not path or path == "/":
        raise ValueError(f"sqlite:// needs a file path (sqlite:///path/to/file.db), got {url!r}")
    queue = ours.get("queue", "default")
    # SQLite waits on nothing but another connection's lock: the call bound is that wait.
    busy_timeout = _call_timeout(ours, url)
    # Checked here because SQLite would only say "unable to open database file" (and aiosqlite
    # leaves the thread of a connection that failed to open to finish on its own).
    folder = Path(path).parent
    if not folder.is_dir():
        raise StoreUnavailable(f"the directory of the SQLite file {path!r} does not exist")
    try:
        database = await open_database(
            path, busy_timeout=busy_timeout, doorbell=doorbell == "on"
        )
    except sqlite3.OperationalError as error:  # not allowed to create or open it, say
        raise StoreUnavailable(f"could not open the SQLite file {path!r}: {error}") from error
    try:
        await migrate(database)
        extra = {} if poll is None else {"poll": poll}
        scheduler = SqliteScheduler(database, lease=lease, queue=queue, **extra)
        await scheduler.prepare()
        yield SqliteDurable(SqliteCheckpointer(database), scheduler)
    finally:
        await database.close()
