"""`SharedConnection`: one connection many callers pipeline commands on, replies matched by order.

redis-py's client checks a connection out of its pool for every command or pipeline, records
metrics about it and gives it back, bookkeeping that costs more than the round trip itself on a
busy worker and on a submission after the process sat idle. A `SharedConnection` keeps one
connection of the client's pool for itself and writes each caller's commands onto it as they
come. Redis answers a connection's commands in order, so the replies go back to the callers in
the order their commands were written; one task reads them, only while a reply is outstanding.
`SharedConnection` says what each caller gets when a command, a caller or the connection fails.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from durability.cancelling import stop_if_cancelled
from durability.redis.bounds import call_bound, lost, timed_out, where
from durability.redis.pooling import PUSHED, reply_reader, streams, usable

__all__ = ["SharedConnection", "Unsendable", "streams"]

#: The least `max_connections` of a pool whose connection a lane keeps between bursts.
KEEP_FROM = 8

#: How many commands a caller wrote, the replies read for it so far, and where they go.
_Waiting = tuple[int, list[Any], "asyncio.Future[list[Any]]"]


class Unsendable(ValueError):
    """A call's commands could not be put into wire form; nothing of the call was sent.

    `index` is the first command of the call that failed (the others may have packed fine);
    the packer's own error is the `__cause__`."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(f"command {index} of the call cannot be sent to Redis: {error}")
        self.index = index


class SharedConnection:
    """Pipelines every caller's commands on one connection of `pool` (see the module doc).

    - An error reply (a script that raised, `NOSCRIPT`) is that command's reply: its caller gets
      the `ResponseError` in its place, the other commands and callers are untouched.
    - A call whose commands cannot be packed (text that is not valid Unicode cannot be encoded)
      raises `Unsendable` having queued and written nothing: its reply slot is never taken, so no
      other caller is handed a reply that was not its own.
    - A caller cancelled while its replies are outstanding leaves the connection as it is: its
      replies are read and dropped. With `drop_on_cancel` the connection is closed instead, which
      ends a blocking read on the server before it can hand anything to a caller who has gone.
    - A connection that fails (reset, closed) fails every caller with a reply outstanding on it
      (`bounds.Lost`): a command written and not answered may or may not have run, so it is
      never sent again. A connection the server closed while it sat idle is noticed
      before anything is written on it, and opened again.
    - Each call is bounded (`bounds.call_bound` of the pool: the client's `call_timeout`, or its
      `socket_timeout`), plus the `waits` it declares for a command the server holds on purpose
      (a `BLOCK`): past that the connection is closed, failing the calls behind it too, and the
      call raises `bounds.TimedOut`. The replies themselves are read with no timeout of their
      own, so a reply that takes its `BLOCK` is never cut short, and a timer per read is saved.
    - The connection is checked out of the client's pool, so closing the client closes it. A
      pool with room (`KEEP_FROM` connections or more: redis-py's default has no bound) lends it
      for the object's life. A tighter one gets it back whenever no reply is outstanding, so it
      never starves the client's other commands of the pool's last connections.
    """

    __slots__ = (
        "_bound", "_connection", "_keep", "_opening", "_pool", "_reading", "_waiting", "_where"
    )

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        kwargs = getattr(pool, "connection_kwargs", {})
        self._bound = call_bound(kwargs)
        self._where = where(kwargs)
        self._keep = getattr(pool, "max_connections", KEEP_FROM) >= KEEP_FROM
        self._connection: AbstractConnection | None = None
        self._opening = asyncio.Lock()
        self._waiting: deque[_Waiting] = deque()
        self._reading: asyncio.Task[None] | None = None

    async def execute(
        self,
        commands: Sequence[Sequence[Any]],
        *,
        drop_on_cancel: bool = False,
        waits: float = 0.0,
    ) -> list[Any]:
        """The replies to `commands`, in order; an error reply is its `ResponseError`.

        `waits` is how long (seconds) the server may hold them on purpose (a `BLOCK`): the
        call's bound starts after it."""
        bound = self._bound
        limit = asyncio.timeout(None if bound is None else bound + waits)
        try:
            async with limit:
                return await self._execute(commands, drop_on_cancel)
        except TimeoutError as error:
            if bound is None or not limit.expired():
                raise
            connection = self._connection
            if connection is not None:
                # Replies that come later must not be read as the next call's; the reader,
                # its socket closed, fails the calls behind this one.
                await connection.disconnect(nowait=True)
            raise timed_out(self._where, bound) from error
        except (ConnectionError, RedisTimeoutError) as error:  # opening it again, say
            translated = lost(self._where, error)
            if translated is error:
                raise
            raise translated from error

    async def _execute(
        self, commands: Sequence[Sequence[Any]], drop_on_cancel: bool
    ) -> list[Any]:
        connection = self._connection
        # While the connection opens, its socket is up before its handshake is answered: a
        # command written then would have its reply read by the handshake, and the
        # handshake's replies handed to this caller. So a call waits for the opening to end.
        if connection is None or self._opening.locked() or not usable(connection):
            connection = await self._open()
            # Opening sends the handshake through redis-py, which can swallow a cancel: a
            # blocking read sent now would then wait out its whole block.
            stop_if_cancelled()
        try:
            packed = connection.pack_commands(commands)
        except Exception as error:
            # Packed before the reply slot is queued: a slot queued for a call that then sent
            # nothing would take the next call's reply, and every reply after it would shift.
            await self._unused(connection)
            raise Unsendable(_culprit(connection, commands), error) from error
        loop = asyncio.get_running_loop()
        replies: asyncio.Future[list[Any]] = loop.create_future()
        # Queued and written in one step, so the queue's order is the wire's order. (Not through
        # `send_packed_command`: with a socket timeout it writes from a task of its own, a turn
        # of the loop later, and it would open a new connection under a closed one.)
        self._waiting.append((len(commands), [], replies))
        _, writer = streams(connection)  # the streams `_usable` checked
        assert writer is not None
        writer.writelines(packed)
        traffic = getattr(connection, "traffic", None)  # a PackedConnection counts its sends
        if traffic is not None:
            traffic.round_trip()
        if self._reading is None:
            self._reading = loop.create_task(self._read(connection, self._waiting))
        try:
            if writer.transport.get_write_buffer_size():  # the kernel took less than all of it
                try:
                    await writer.drain()
                except OSError as error:  # the reader fails the other callers
                    replies.cancel()
                    await connection.disconnect(nowait=True)
                    failed = ConnectionError(f"writing to Redis failed: {error!r}")
                    failed.__cause__ = error
                    raise lost(self._where, failed) from failed
            return await replies
        except asyncio.CancelledError:
            if drop_on_cancel and (replies.cancelled() or not replies.done()):
                await connection.disconnect(nowait=True)
            raise

    async def close(self) -> None:
        """Stop the reader, if one runs: a caller still waiting fails as a lost connection
        fails it, and no task of this object is left. (The connection is the client's pool's:
        closing the client closes it.)"""
        reading = self._reading
        if reading is not None:
            self._abandon()
            await asyncio.wait([reading])

    async def _open(self) -> AbstractConnection:
        async with self._opening:
            connection = self._connection
            if connection is None:
                connection = self._connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            if not usable(connection):
                # The server closed it (or it broke): whatever is outstanding on it will never
                # be answered. Its callers fail now, and its reader goes with the old socket
                # *before* the connection opens again: a reader left running would read the
                # new socket's first replies (the handshake's, or the next caller's) as
                # replies to the old commands, shifting every reply after them.
                self._abandon()
                await connection.disconnect(nowait=True)
                try:
                    await connection.connect()
                except BaseException:
                    # Cut short mid-handshake (by the call's bound, say), the socket may be up
                    # with the handshake's replies still to come: never write on it.
                    await connection.disconnect(nowait=True)
                    raise
            if not usable(connection):
                raise TypeError(
                    f"{type(connection).__name__} has no open stream a SharedConnection writes on"
                )
            return connection

    def _abandon(self) -> None:
        """Fail every caller outstanding on the current connection with a `ConnectionError`
        and stop its reader; the next commands get a queue (and a reader) of their own."""
        waiting, self._waiting = self._waiting, deque()
        reading, self._reading = self._reading, None
        closed = lost(
            self._where, ConnectionError("Redis closed the connection with replies outstanding")
        )
        while waiting:
            _, _, future = waiting.popleft()
            if not future.done():
                future.set_exception(closed)
        if reading is not None:
            reading.cancel()

    async def _unused(self, connection: AbstractConnection) -> None:
        """A tight pool gets back a connection no reply is outstanding on (as `_read` does)."""
        if not self._keep and self._reading is None and self._connection is connection:
            self._connection = None
            await self._pool.release(connection)

    async def _read(self, connection: AbstractConnection, waiting: deque[_Waiting]) -> None:
        # Every reply the socket has brought is parsed at once (`reply_reader`), not each
        # through redis-py's read (a dozen calls a reply); None: through redis-py.
        parser = reply_reader(connection)
        stream, _ = streams(connection)
        # A connection lent for the object's life keeps its reader between bursts, parked on
        # the socket: a busy lane's every burst would otherwise start a task and end it.
        linger = self._keep and parser is not None and stream is not None
        try:
            while waiting or linger:
                if not waiting:
                    assert parser is not None and stream is not None
                    parser.feed(await _received(stream))  # idle: the next call's replies
                    if not waiting:
                        raise ConnectionError("Redis sent a reply no call asked for")
                    continue
                count, replies, future = waiting[0]
                if parser is None or stream is None:
                    try:
                        # No timeout per reply (see the module doc): `execute` bounds each call.
                        reply = await connection.read_response(timeout=math.inf)
                    except ResponseError as error:
                        reply = error
                else:
                    reply = parser.gets()
                    while reply is False:  # not all there yet
                        parser.feed(await _received(stream))
                        reply = parser.gets()
                    if isinstance(reply, ConnectionError):  # LOADING, say: as redis-py raises
                        raise reply
                    if PUSHED is not None and isinstance(reply, PUSHED):
                        continue  # a RESP3 push (none is asked for here): no command's reply
                replies.append(reply)
                if len(replies) == count:
                    waiting.popleft()
                    if not future.done():
                        future.set_result(replies)
        except BaseException as error:
            # The connection is closed (read_response closes it; ours, as it would): nothing
            # outstanding will be answered.
            if parser is not None and self._reading is asyncio.current_task():
                # (An abandoned reader leaves the connection to whoever abandoned it: `_open`
                # is opening it again.)
                await connection.disconnect(nowait=True)
            while waiting:
                _, _, future = waiting.popleft()
                if future.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(lost(self._where, error))
            if not isinstance(error, Exception):
                raise
        finally:
            # An abandoned reader (`_abandon`) leaves the lane to the one that replaced it.
            if self._reading is asyncio.current_task():
                self._reading = None
                if not self._keep and self._connection is connection:
                    # Nothing is outstanding (the loop ran dry, or failed them all): a tight
                    # pool gets its connection back until the next call.
                    self._connection = None
                    await self._pool.release(connection)


async def _received(stream: asyncio.StreamReader) -> bytes:
    """What the socket has brought, at most `_READ_SIZE` bytes; a closed or broken connection
    raises `ConnectionError`, as redis-py's read does."""
    try:
        data = await stream.read(_READ_SIZE)
    except OSError as error:
        raise ConnectionError(f"Error while reading from the socket: {error!r}") from error
    if not data:
        raise ConnectionError("Connection closed by server.")
    return data


#: The most bytes one read takes from the socket (redis-py's own `socket_read_size`).
_READ_SIZE = 65536


def _culprit(connection: AbstractConnection, commands: Sequence[Sequence[Any]]) -> int:
    """The first of `commands` that does not pack on its own (only looked for once packing
    them all failed)."""
    for index, command in enumerate(commands):
        try:
            connection.pack_command(*command)
        except Exception:
            return index
    return 0  # none fails alone: the failure was the packing of them together
