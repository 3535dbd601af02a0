"""`open_url`: a `redis://` or `rediss://` URL to an open `RedisDurable` (`open_durable`'s
Redis entry). Its options (`open_url` lists them) are read and checked here, before anything
connects; the rest of the query is redis-py's, checked against what its pool takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from redis.asyncio import Redis
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, ConnectionPool, SSLConnection
from redis.exceptions import RedisError

from durability.interfaces import Durable
from durability.opening import Opening
from durability.redis.bounds import BoundedCluster, BoundedSSLConnection
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.durable import RedisDurable
from durability.redis.namespace import DEFAULT, check_namespace
from durability.redis.packed_connection import PackedConnection
from durability.redis.pooling import MOST, TidyPool
from durability.redis.replicas import Acknowledged
from durability.redis.replicas import read as read_replicas
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.shards import MOST_SHARDS
from durability.redis.stream_scheduler import RedisStreamScheduler
from durability.redis.trimming import sweeping
from durability.storekit.outage import StoreUnavailable
from durability.storekit.traffic import Traffic

__all__ = ["OPTIONS", "RedisUrl", "open_url"]

#: The options of a Redis URL that are ours rather than redis-py's.
OPTIONS = (
    "scheduler", "namespace", "doorbell", "cluster", "trim_every_ms", "call_timeout_ms", "shards",
    "replicas", "replicas_timeout_ms",
)

_DIGITS = re.compile(r"[0-9]+")

#: redis-py URL options whose value is plain text (it converts the others, listed in its
#: `URL_QUERY_ARGUMENT_PARSERS`). `encoding` and `decode_responses` are left out on purpose:
#: the stores read back what the codec wrote as UTF-8 text.
_TEXT_OPTIONS = frozenset(
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


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """A Redis URL read and checked: what `open_url` builds the store from."""

    kind: str  # "stream" or "set"
    tls: bool  # rediss://
    cluster: bool
    doorbell: bool
    trim_every: timedelta | None
    namespace: str
    replicas: Acknowledged | None  # what each acknowledged write waits for
    where: str  # host:port/db, for messages
    bound: float  # each call's bound, in seconds
    target: str  # the URL handed to redis-py: its own options only
    rest: str  # those options, as a query
    shards: int = 1  # the queue's and the standings' shards (shards.py)

    @classmethod
    def read(cls, opening: Opening) -> RedisUrl:
        """Every option of the URL checked, or a `ValueError` naming the one at fault."""
        url = opening.url
        parts = urlsplit(url)
        # Plain TCP only: rediss:// keeps the TLS connection class its scheme picks.
        connection_class = PackedConnection if parts.scheme == "redis" else SSLConnection
        ours, rest = opening.options(OPTIONS, _driver_options(connection_class), "redis-py")
        kind = ours.get("scheduler", "stream")
        if kind not in ("stream", "set"):
            raise ValueError(
                f"redis scheduler must be 'stream' or 'set', got {kind!r} in {url!r}"
            )
        cluster = opening.switch(
            ours, "cluster", f"cluster must be 'on' or 'off': {url!r}", default="off"
        )
        trimming_every = ours.get("trim_every_ms", "1000")
        trim_every = (
            None if trimming_every == "off"
            else opening.milliseconds(trimming_every, "trim_every_ms")
        )
        doorbell = ours.get("doorbell", "on")
        if doorbell not in ("on", "off") or (kind != "set" and "doorbell" in ours):
            raise ValueError(
                f"doorbell must be 'on' or 'off', and only with scheduler=set: {url!r}"
            )
        namespace = check_namespace(ours.get("namespace", DEFAULT))
        replicas = read_replicas(ours, opening.shown)
        where = _where(opening, parts, rest)
        bound = opening.call_timeout(ours).total_seconds()
        tls = parts.scheme == "rediss"
        return cls(
            kind, tls, cluster, doorbell == "on", trim_every, namespace, replicas, where, bound,
            opening.rebuilt(rest), rest, _shards(ours.get("shards", "1"), opening.shown),
        )

    def client(self, traffic: Traffic) -> Any:
        """The client of this URL, every call bounded (`bounds.py`), its pool tidy
        (`pooling.py`); counting into `traffic` over a plain TCP connection."""
        rest, bound, target = self.rest, self.bound, self.target
        # redis-py 8 gives every command a 5 s socket timeout, which it enforces by wrapping
        # each send in a task of its own: a fifth of a worker's CPU per round trip. So the
        # client has none, and its connections keep the bound with a timer instead
        # (bounds.py); a URL that names `socket_timeout` gets redis-py's as well.
        timeouts: dict[str, Any] = {} if "socket_timeout" in rest else {"socket_timeout": None}
        if "socket_connect_timeout" not in rest:
            timeouts["socket_connect_timeout"] = bound
        if self.cluster:
            # A cluster client makes its node connections itself, of redis-py's own class:
            # there the bound is redis-py's socket timeout (each send from a task of its own),
            # and its errors are ours once its retries are spent (bounds.BoundedCluster).
            if "socket_timeout" not in rest:
                timeouts["socket_timeout"] = bound
            cluster = BoundedCluster.from_url(target, decode_responses=True, **timeouts)
            assert isinstance(cluster, BoundedCluster)
            cluster.traffic = traffic  # its commands, and its lanes' (cluster_lanes.py)
            return cluster
        bounded: dict[str, Any] = {"call_timeout": bound}
        if not self.tls:
            bounded |= {"connection_class": PackedConnection, "traffic": traffic}
        else:
            # redis-py's URL parser makes rediss:// pick its own class over any given; the
            # same URL as redis:// with the TLS class named keeps every TLS option.
            target = "redis" + target.removeprefix("rediss")
            bounded |= {"connection_class": BoundedSSLConnection}
        # Bounded, and shrinking back after a fault (pooling.py); a caller waits for a free
        # connection as long as for an answer. A URL's `max_connections` wins over ours.
        pool = TidyPool.from_url(
            target, decode_responses=True, max_connections=MOST, timeout=bound, **timeouts,
            **bounded,
        )
        return Redis.from_pool(pool)

    def scheduler(
        self, client: Any, opening: Opening
    ) -> RedisStreamScheduler | RedisSetScheduler:
        """The scheduler the URL names, on `client`."""
        if self.kind == "stream":
            return RedisStreamScheduler(
                redis=client,
                namespace=self.namespace,
                lease=opening.lease,
                trim_every=self.trim_every,
                shards=self.shards,
            )
        return RedisSetScheduler(
            redis=client,
            namespace=self.namespace,
            lease=opening.lease,
            doorbell=self.doorbell,
            poll=timedelta(milliseconds=50) if opening.poll is None else opening.poll,
            shards=self.shards,
        )


@contextlib.asynccontextmanager
async def open_url(opening: Opening) -> AsyncIterator[Durable]:
    """The `RedisDurable` a Redis URL names (one client for both halves, so arrive, deliver
    and finish are one script each), its scheduler prepared; closed when the block ends.

    | option | meaning |
    |---|---|
    | `scheduler` | `stream` (the default) or `set` |
    | `namespace` | what every key of the queue and the checkpoints starts with (`durability`) |
    | `doorbell` | `on` (default) or `off` to poll alone; only with `scheduler=set` |
    | `cluster` | `on` for a Redis Cluster (the URL names any one node) |
    | `trim_every_ms` | how often a worker reading the stream trims it (1 s; `off`: never) |
    | `call_timeout_ms` | how long one call waits for its answer (10 s) |
    | `shards` | how many hash tags the queue and the standings are split over (1 to 256; 1) |
    | `replicas` | `N` (0 to 16): each checkpoint write, and an arrive's wakeup, waits for N |
    | `replicas_timeout_ms` | how long each of those writes waits for its replicas (1 s) |

    and the options redis-py's `from_url` takes for the connection the scheme picks.
    """
    read = RedisUrl.read(opening)
    traffic = Traffic()
    client = read.client(traffic)
    try:
        scheduler = read.scheduler(client, opening)
        try:
            async with asyncio.timeout(opening.connect_timeout.total_seconds()):
                await client.ping()
                await scheduler.prepare()
        except TimeoutError as error:
            raise StoreUnavailable(
                f"Redis at {read.where} did not answer within {opening.connect_timeout}"
            ) from error
        except (RedisError, OSError) as error:
            # A refused port, a database index the server does not have, a failed login.
            raise StoreUnavailable(
                f"could not connect to Redis at {read.where}: {error}"
            ) from error
        checkpointer = RedisCheckpointer(
            redis=client, namespace=read.namespace, shards=read.shards, durable=read.replicas
        )
        durable = RedisDurable(checkpointer, scheduler, traffic)
        async with contextlib.AsyncExitStack() as upkeep:
            upkeep.push_async_callback(durable.close)  # first in: it runs once the sweeper stops
            if opening.housekeeping:
                # No trimmer here: the workers trim what they answer (`work`'s `trim`).
                await upkeep.enter_async_context(_beside(sweeping(checkpointer)))
            yield durable
    finally:
        await client.aclose()


def _shards(given: str, shown: str) -> int:
    """The `shards` option: a whole number from 1 to `MOST_SHARDS`."""
    if not _DIGITS.fullmatch(given) or not 1 <= int(given) <= MOST_SHARDS:
        raise ValueError(
            f"shards must be a whole number from 1 to {MOST_SHARDS}, got {given!r} in {shown!r}"
        )
    return int(given)


def _driver_options(connection_class: type) -> frozenset[str]:
    """The URL options redis-py's `from_url` hands on to a pool of `connection_class` that the
    pool or the connection takes as a keyword (any other ends in a `TypeError`)."""
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
    return (frozenset(URL_QUERY_ARGUMENT_PARSERS) | _TEXT_OPTIONS) & taken


def _where(opening: Opening, parts: SplitResult, rest: str) -> str:
    """`host:port/db` of a Redis URL, refusing what redis-py would read another way: no host
    (it would go to localhost), a port or a database that is not a number (it reads a path
    such as `/3x` as database 0), and a database given both as the path and as `?db=` (the
    option wins)."""
    shown = opening.shown
    if not parts.hostname:
        raise ValueError(
            f"store URL {shown!r} names no host; write redis://host:port/db"
            " (redis://127.0.0.1:6379/0 for a local server)"
        )
    try:
        port = parts.port or 6379
    except ValueError:
        raise ValueError(f"the port in store URL {shown!r} is not a number") from None
    path = parts.path.removeprefix("/")
    given = dict(parse_qsl(rest, keep_blank_values=True)).get("db")
    for db in (path, given):
        if db is not None and db != "" and not _DIGITS.fullmatch(db):
            raise ValueError(
                f"the database in store URL {shown!r} must be a number"
                f" (redis://host:port/3), got {db!r}"
            )
    if path and given is not None:
        raise ValueError(
            f"the database is given twice in store URL {shown!r} (the path /{path} and"
            f" ?db={given}); give it once"
        )
    return f"{parts.hostname}:{port}/{path or given or '0'}"


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
