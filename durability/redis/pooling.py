"""`TidyPool`: the connection pool `open_durable` gives a Redis client: bounded, and letting go
of what it no longer needs.

redis-py's own pool keeps every connection it ever made. After a fault many calls reconnect at
once (each pass's `wake_at` goes straight through the client), so it holds that high-water
mark from then on, and the connections the server closed lie in it, their sockets half-closed
(CLOSE_WAIT), until a caller happens to take them. This pool is bounded and drops those
connections as it goes (see `TidyPool`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse

from durability.redis.bounds import TimedOut, where
from durability.storekit.outage import Unanswered

__all__ = ["IDLE", "MOST", "PUSHED", "TidyPool", "reply_reader", "streams", "usable"]

_hiredis: Any
try:
    import hiredis as _hiredis
except ImportError:  # pragma: no cover - hiredis is a dependency of the redis extra
    _hiredis = None

#: What hiredis makes of a RESP3 push message (None before hiredis 3.2, which has none).
PUSHED: Any = getattr(_hiredis, "PushNotification", None)

#: The most connections a pool of `open_durable` makes, unless its URL names
#: `max_connections`: a worker's 16 passes (the default `pool`), its readers, its two lanes
#: and its upkeep, with room to spare.
MOST = 32

#: How long a spare connection stays idle in the pool before it is closed.
IDLE = timedelta(seconds=30)
#: How often, at most, the idle connections are all looked at for spares grown old (seconds);
#: a closed one about to be handed out is looked for on every checkout (see `_tidy`).
SWEEP_EVERY = 1.0


def streams(
    connection: AbstractConnection,
) -> tuple[asyncio.StreamReader | None, asyncio.StreamWriter | None]:
    """The asyncio streams under a redis-py connection (`None` each while it is not open).

    redis-py keeps them as the private `_reader` and `_writer` and has no public way to reach
    them; this is the one place the library does, so a redis-py that renames them breaks
    here, not wherever a connection is written on or checked."""
    reader: asyncio.StreamReader | None = getattr(connection, "_reader", None)
    writer: asyncio.StreamWriter | None = getattr(connection, "_writer", None)
    return reader, writer


def reply_reader(connection: AbstractConnection) -> Any | None:
    """A `hiredis.Reader` that parses `connection`'s replies as its own parser does (its text
    decoding, each error reply as the exception class redis-py names for it, handed back, not
    raised), for a reader of many replies at once; None where that cannot be made the same (no
    hiredis, a parser without redis-py's error classes): then each reply is read through
    redis-py. Reaches into redis-py's private `_parser`, here alone."""
    if _hiredis is None:
        return None
    parse_error = getattr(type(getattr(connection, "_parser", None)), "parse_error", None)
    if parse_error is None:
        return None
    kwargs: dict[str, Any] = {"protocolError": InvalidResponse, "replyError": parse_error}
    encoder = getattr(connection, "encoder", None)
    if encoder is not None and encoder.decode_responses:
        kwargs |= {"encoding": encoder.encoding, "errors": encoder.encoding_errors}
    return _hiredis.Reader(**kwargs)


def usable(connection: AbstractConnection) -> bool:
    """Whether `connection` is open and the server has not closed its end.

    Closed means the end of the stream was *received*, even with replies still buffered
    before it (`at_eof()` is false until they are read): a command written now would never be
    answered. A reset, or a transport closing, is closed too."""
    reader, writer = streams(connection)
    if reader is None or writer is None:
        return False
    ended = getattr(reader, "_eof", False) or reader.at_eof()
    return not ended and reader.exception() is None and not writer.transport.is_closing()


class TidyPool(BlockingConnectionPool):
    """A `BlockingConnectionPool` that closes the idle connections the server closed or that sat
    unused past `idle`; `clock` is for tests. It:

    - makes at most `max_connections` (`MOST` unless the URL says); a caller past that waits
      for one to come back, up to its `timeout` (`open_durable`: the call bound), then
      `TimedOut`;
    - as connections are taken and given back, drops the idle ones the server has closed, and
      those idle longer than `idle` (all but the last one given back), so after a fault it
      shrinks to what the calls use again: at once when the next to be handed out is closed,
      else at most every `SWEEP_EVERY`.

    Idle connections are handed out last in, first out, as redis-py does: the ones in use stay
    warm and the spare ones sink to the bottom, where they age out.
    """

    def __init__(
        self,
        *,
        idle: timedelta = IDLE,
        clock: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if idle <= timedelta(0):
            raise ValueError(f"idle must be positive, got {idle}")
        self.idle = idle.total_seconds()
        self._clock = clock
        self._since: dict[AbstractConnection, float] = {}  # an idle connection: given back when
        self._swept = float("-inf")  # when the idle connections were last all looked at

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        await self._tidy()
        try:
            connection: AbstractConnection = await super().get_connection()  # type: ignore[no-untyped-call]
        except RedisConnectionError as error:
            # Every connection stayed out for `timeout` (the pool raises its own error from
            # the timer's): the calls on them went unanswered, or too many calls at once.
            if isinstance(error, Unanswered) or not isinstance(error.__cause__, TimeoutError):
                raise
            raise TimedOut(
                f"no connection to Redis at {where(self.connection_kwargs)} came free within "
                f"{self.timeout:g} s (all {self.max_connections} in use)"
            ) from error
        self._since.pop(connection, None)
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        self._since[connection] = self._now()
        await self._tidy()

    def reset(self) -> None:
        super().reset()  # type: ignore[no-untyped-call]
        self._since = {}

    async def _tidy(self) -> None:
        """Drop the idle connections the server closed and the spares grown old. Looking at
        every one costs a few microseconds each, on every checkout and give-back of a busy
        worker, so they are all looked at only when the next one to be handed out (the last
        given back) is closed, the mark a cut or a restart leaves, and otherwise at most every
        `SWEEP_EVERY`, which is all an age measured in tens of seconds needs."""
        idle = self._available_connections
        if not idle:
            return
        now = self._now()
        top = idle[-1]
        if not (top.is_connected and not usable(top)) and now - self._swept < SWEEP_EVERY:
            return
        self._swept = now
        # Given back in order, so the oldest are first; the last one given back always stays.
        stale = now - self.idle
        dropped = [
            connection
            for n, connection in enumerate(idle)
            # (One closed on this side holds no socket: it is opened again when taken.)
            if (connection.is_connected and not usable(connection))
            or (n < len(idle) - 1 and self._since.get(connection, stale) < stale)
        ]
        if not dropped:
            return
        for connection in dropped:
            idle.remove(connection)
            self._since.pop(connection, None)
        for connection in dropped:
            await connection.disconnect(nowait=True)
