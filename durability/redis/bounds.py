"""How long a Redis call may wait for its answer, and what it raises when none comes.

A frozen server never closes the connection, so without a bound a caller waits as long as the
server sleeps. redis-py's own bound, `socket_timeout`, sends every command from a task of its
own (a cost a busy worker feels), so `open_durable` builds the client without it and bounds
each call with a timer of its own: a call that runs out closes its connection and raises
`TimedOut`, a lost connection raises `Lost`, and both are `Unanswered`. Which connections are
bounded, and how a cluster is, are in `Bounded`'s docstring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import ClusterDownError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from durability.redis.lua import command_name
from durability.storekit.outage import Unanswered
from durability.storekit.traffic import Traffic

__all__ = [
    "Bounded",
    "BoundedCluster",
    "BoundedSSLConnection",
    "Lost",
    "TimedOut",
    "bound_kept_in",
    "call_bound",
    "lost",
    "timed_out",
    "where",
]

T = TypeVar("T")

#: redis-py applies this read timeout when the client was built without one (redis-py >= 6).
CLIENT_DEFAULT_TIMEOUT = 5.0


class TimedOut(Unanswered):
    """No answer from Redis within the call bound; the connection it waited on is closed."""


class Lost(RedisConnectionError, Unanswered):
    """The connection to Redis was lost, or could not be opened again (the cause says how)."""


def lost(place: str, error: BaseException) -> BaseException:
    """`error` as the caller should see it: a redis-py connection failure or timeout of Redis
    at `place` (`where`) as `Lost`, with `error` as its cause; anything else as it is."""
    if isinstance(error, Unanswered) or not isinstance(
        error, (RedisConnectionError, RedisTimeoutError)
    ):
        return error
    translated = Lost(f"Redis at {place} went away: {error}")
    translated.__cause__ = error
    return translated


def where(connection: Any) -> str:
    """`host:port/db` of a redis-py connection, or of a pool's `connection_kwargs`."""
    if isinstance(connection, Mapping):
        host, port, db = (connection.get(name) for name in ("host", "port", "db"))
    else:
        host, port, db = (getattr(connection, name, None) for name in ("host", "port", "db"))
    return f"{host or 'localhost'}:{port or 6379}/{db or 0}"


def timed_out(place: str, bound: float) -> TimedOut:
    """The error of a call to Redis at `place` (`where`) unanswered after `bound` seconds."""
    return TimedOut(f"Redis at {place} did not answer within {bound:g} s")


def call_bound(kwargs: Mapping[str, Any]) -> float | None:
    """The bound on one reply for connections made with `kwargs` (a pool's
    `connection_kwargs`): redis-py's `socket_timeout` when it enforces one, else our
    `call_timeout`; None for none."""
    timeout = kwargs.get("socket_timeout", CLIENT_DEFAULT_TIMEOUT)
    if timeout is None:
        timeout = kwargs.get("call_timeout")
    return None if timeout is None else float(timeout)


def bound_kept_in(kwargs: Mapping[str, Any]) -> str:
    """Which of `kwargs`' keys keeps `call_bound`'s bound: `socket_timeout`, or `call_timeout`
    where redis-py's own is off (None)."""
    off = kwargs.get("socket_timeout", CLIENT_DEFAULT_TIMEOUT) is None
    return "call_timeout" if off else "socket_timeout"


class Bounded(Connection):
    """A redis.asyncio TCP connection whose every send, and every reply read for it (when
    redis-py has no `socket_timeout` of its own), is bounded by `call_timeout` seconds.

    A frozen server (stopped, a stalled VM, a partition that leaves the socket open) never closes
    the connection, so without a bound a caller waits for as long as the server sleeps. redis-py's
    own bound, `socket_timeout`, sends every command from a task of its own (a cost a busy worker
    feels), so `open_durable` builds the client without it and gives each call a `call_timeout`
    instead, kept by a timer:

    - `Bounded` connections bound each reply redis-py reads for them, and each send;
    - a `SharedConnection` bounds each call it pipelines, plus the `BLOCK` a waiting read asks
      the server for (`waits`), so a blocking read keeps its own bound: its block, and the
      call's after it.

    A call that runs out closes its connection (a late reply must not be read as the next
    command's) and raises `TimedOut`, an `Unanswered`. redis-py does not send it again (it is
    none of redis-py's errors), so the bound is the call's, not one per retry.

    A connection that is lost (reset, closed, refused when opened again) raises `Lost` from these
    connections and from a `SharedConnection`: an `Unanswered` too, the driver's error its cause,
    and still a `redis.exceptions.ConnectionError`, so redis-py goes on reconnecting and retrying
    as it does for its own.

    A client built by hand gets the same with `Redis(..., connection_class=PackedConnection,
    call_timeout=seconds)` (or `Bounded`); with redis-py's own connections only a
    `SharedConnection`'s calls are bounded (by `socket_timeout`) and translated.

    A cluster client makes its node connections itself, of redis-py's own class, so there the
    bound is redis-py's `socket_timeout` and `BoundedCluster` turns what its commands raise, once
    its own retries and failovers are spent, into the same `Lost` and `TimedOut`.
    """

    def __init__(self, *, call_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.call_timeout = call_timeout

    def _bound(self) -> float | None:
        return self.call_timeout if self.socket_timeout is None else None

    async def connect(self) -> None:
        try:
            await super().connect()  # type: ignore[no-untyped-call]
        except Unanswered:
            raise
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise Lost(f"Redis at {where(self)} went away: {error}") from error

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await self._answered(super().send_packed_command(command, check_health), self._bound())

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        # An explicit timeout is a caller's own (a pub/sub poll, a SharedConnection's `math.inf`).
        if kwargs.get("timeout") is not None or len(args) > 1 or self._bound() is None:
            # A SharedConnection's every reply: no timer, no coroutine more than the read's own.
            try:
                return await super().read_response(*args, **kwargs)
            except Unanswered:
                raise
            except (RedisConnectionError, RedisTimeoutError) as error:
                raise Lost(f"Redis at {where(self)} went away: {error}") from error
        return await self._answered(super().read_response(*args, **kwargs), self._bound())

    async def _answered(self, step: Awaitable[T], bound: float | None) -> T:
        """`await step` within `bound` seconds (None: no timer, a SharedConnection's every read),
        its connection failures as `Lost` and its running out as `TimedOut`."""
        try:
            if bound is None:
                return await step
            limit = asyncio.timeout(bound)
            try:
                async with limit:
                    return await step
            except TimeoutError as error:
                if not limit.expired():
                    raise
                # redis-py closed the connection as the timer cancelled it.
                raise timed_out(where(self), bound) from error
        except Unanswered:
            raise
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise Lost(f"Redis at {where(self)} went away: {error}") from error


class BoundedSSLConnection(Bounded, SSLConnection):
    """`Bounded` over TLS (`rediss://`)."""


class BoundedCluster(RedisCluster):
    """A `RedisCluster` whose commands fail with `Lost` or `TimedOut` (see the module doc).

    With `traffic` set it counts what it sends there: each command a request and a round trip
    (a redirect it follows is not counted again); the lanes to its nodes (`NodeLanes`) count
    into the same `traffic`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.place = f"{kwargs.get('host') or 'localhost'}:{kwargs.get('port') or 6379}"
        self.traffic: Traffic | None = None

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        traffic = self.traffic
        if traffic is not None:
            traffic.request(command_name(args))
            traffic.round_trip()
        try:
            return await super().execute_command(*args, **kwargs)
        except Unanswered:
            raise
        except RedisTimeoutError as error:
            raise TimedOut(
                f"the Redis cluster at {self.place} did not answer in time: {error}"
            ) from error
        except (RedisConnectionError, ClusterDownError) as error:
            raise Lost(f"the Redis cluster at {self.place} went away: {error}") from error
        except RedisClusterException as error:
            # Finding the nodes again failed: gone if it failed for want of an answer.
            if not isinstance(error.__cause__, (RedisConnectionError, RedisTimeoutError)):
                raise
            raise Lost(f"the Redis cluster at {self.place} went away: {error}") from error
