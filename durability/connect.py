"""`open_durable`: the one place a store is chosen, by URL (`memory://`, `redis://`,
`postgresql://`, `sqlite:///file.db`): a table from scheme to the module that opens it.

Each store's package reads and checks its own options (its `url` module, from an `Opening`),
so a store or an option is added there and here only a scheme is. Every setting is refused
with a `ValueError` naming it before anything connects. An opener is imported only when its
scheme is asked for, so `import durability` (and `memory://`) needs no driver.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import cast
from urllib.parse import urlsplit

from durability.cancelling import stop_if_cancelled
from durability.checks import positive
from durability.interfaces import Durable
from durability.opening import CALL_TIMEOUT, CONNECT_TIMEOUT, Opener, Opening, check_text, shown
from durability.storekit.outage import StoreUnavailable, Unanswered

__all__ = [
    "CALL_TIMEOUT",
    "CONNECT_TIMEOUT",
    "SCHEMES",
    "StoreUnavailable",
    "Unanswered",
    "open_durable",
    "unavailable",
]

#: Each scheme's opener: the module whose `open_url` opens it (an `Opener`). A store joins
#: `open_durable` with a line here.
_OPENERS = {
    "memory": "durability.memory_url",
    "redis": "durability.redis.url",
    "rediss": "durability.redis.url",
    "postgresql": "durability.postgres.url",
    "postgres": "durability.postgres.url",
    "sqlite": "durability.sqlite.url",
}

#: Every scheme `open_durable` accepts.
SCHEMES = tuple(_OPENERS)


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
    if "durability.redis.replicas" in sys.modules:
        from durability.redis.replicas import NotAcknowledged

        # Written on the primary, not yet on enough replicas (one is being replaced, say): the
        # same first-writer-wins write asked again answers once they have it.
        if isinstance(error, NotAcknowledged):
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

    | URL | Durable (its options: the `url` module of its package) |
    |---|---|
    | `memory://` | `MemoryDurable` (a `SplitDurable` that takes many at once): this process only |
    | `redis://host/db?scheduler=stream` | `RedisDurable` over a `RedisStreamScheduler` |
    | `redis://host/db?scheduler=set` | `RedisDurable` over a `RedisSetScheduler` |
    | `postgresql://user@host:port/db` | `PostgresDurable`, tables created on open (`migrate`) |
    | `sqlite:///path/to/file.db` | `SqliteDurable` over that file, migrated on open |

    `lease` is the scheduler's lease (how soon a dead worker's workflow is taken over); `poll`
    how often a polling scheduler looks again (the store's default when `None`; the stream
    scheduler blocks instead). With `housekeeping`, the store's background upkeep runs while the
    context is open (on Redis: sweeping expired workflows' standings): a worker asks for it, an
    API need not. A worker over a Redis stream trims it itself (`work`'s `trim`; the URL's
    `trim_every_ms`, `off` for never).

    The URL is checked before anything connects, and what a driver would read another way is a
    `ValueError` naming the setting: spaces around it, a control character or a `#` in it, an
    unknown scheme; each store's own (a Redis URL with no host or a database that is not a
    number, a Postgres URL naming neither host nor database, ...). An unknown or repeated query
    option names it and lists the allowed ones, so a typo is never ignored. Every store takes
    `call_timeout_ms`, how long one call waits for its answer (10 s, `CALL_TIMEOUT`).

    A store that cannot be reached fails the open within `connect_timeout` with `StoreUnavailable`
    (a `ConnectionError`) naming where it looked: a refused port, an unknown database, a server
    that does not answer. Once open, every call that is not a blocking read is bounded by
    `call_timeout_ms`, so a frozen server fails it with `Unanswered` (a `StoreUnavailable`)
    rather than holding the caller until it wakes: on Redis each call's wait for a pooled
    connection and each of its replies (`durability.redis.bounds`), on Postgres each call with
    its pool checkout, on SQLite the wait for another connection's lock. A blocking read waits
    its own block, then the bound. A connection lost after opening is `Unanswered` too, with the
    driver's error as its cause. A write that got no answer may still land: `arrive` says so,
    and sending it again with the same workflow and key is safe. `unavailable(error)` tells such
    an error from a refusal of what was asked: the API answers it with 503, a worker waits and
    tries again.

    Every durable opened here counts what it sends into `durable.traffic` (`durability.Traffic`),
    except over a cluster or a `rediss://` / `unix://` connection, which count nothing.
    """
    positive("lease", lease)
    positive("connect_timeout", connect_timeout)
    if poll is not None:
        positive("poll", poll)
    check_text(url)
    scheme = urlsplit(url).scheme.lower()
    where = _OPENERS.get(scheme)
    if where is None:
        named = f"{scheme!r}" if scheme else "no scheme"
        raise ValueError(
            f"unknown store scheme {named} in {shown(url)!r}; use memory://, redis://,"
            " postgresql:// or sqlite:///path"
        )
    opener = cast(Opener, importlib.import_module(where).open_url)
    opening = Opening(url, lease, poll, housekeeping, connect_timeout)
    async with opener(opening) as durable:
        stop_if_cancelled()  # opening may go through a driver that can swallow it
        yield durable
