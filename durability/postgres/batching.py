"""Sending the statements that many passes ask for at once down one connection.

A worker at capacity runs dozens of passes, each three single-statement transactions (take,
record, finish). Sent one by one, every statement waits its turn for a pooled connection and
costs a `send` and a wakeup of its backend; at capacity that overhead, not the statements, is
most of the worker's CPU. `Batcher.one` queues a statement and sends everything queued in the
same turn of the event loop through one connection in pipeline mode, with a Sync after each
statement: each is still its own transaction, committed (or rolled back) on its own, with its
own commit setting, and an error in one leaves the others alone. A lone call is sent as
before, through `one`.

What can go wrong is kept exact:

- a statement that fails is sent again alone through `one`, which raises its error where the
  caller expects it (`NotMigrated` included); a failed statement rolled back, so this is
  nothing but a retry of a transaction that did not happen;
- a connection that breaks fails every statement of the batch that had not answered, as it
  would have failed each of them sent alone (whether those committed is unknown, as ever);
- a pool whose connections are not in autocommit mode gets no batching (its statements would
  share one transaction), nor does a psycopg without the call that queues a Sync; each call
  goes through `one`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import AsyncCursor, AsyncPipeline, pq
from psycopg.rows import TupleRow, tuple_row

from durability.postgres.statements import Params, Pool, one
from durability.turns import Queued, TurnBatcher, fail, settle

__all__ = ["Batcher"]

#: The most statements one pipeline carries; a bigger burst is sent as several.
MOST = 64

_ROWS = pq.ExecStatus.TUPLES_OK

#: The psycopg call `_pipelined` relies on; a psycopg without it gets no batching.
_CAN_SYNC = hasattr(AsyncPipeline, "_enqueue_sync")

_Statement = tuple[str, Params]
_Call = Queued[_Statement, "TupleRow | None"]


class Batcher:
    """Runs single statements on `pool`, each turn's calls down one connection."""

    __slots__ = ("_pool", "_turns")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._turns: TurnBatcher[_Statement, TupleRow | None] = TurnBatcher(self._send, MOST)

    async def one(self, sql: str, params: Params) -> TupleRow | None:
        """What `statements.one(pool, sql, params)` returns, sent with this turn's others."""
        return await self._turns.call((sql, params))

    async def _send(self, calls: list[_Call]) -> None:
        if len(calls) == 1:
            await _alone(self._pool, calls[0])
            return
        try:
            conn = await self._pool.getconn()
        except BaseException as error:
            fail(calls, error)
            if not isinstance(error, Exception):
                raise
            return
        retry: list[_Call] = []
        try:
            if not conn.autocommit or not _CAN_SYNC:
                retry = calls  # sent one by one below, once this connection is back
            else:
                retry = await _answer(conn, calls)
        except BaseException as error:
            fail(calls, error)
            if not isinstance(error, Exception):
                raise
        finally:
            await self._pool.putconn(conn)
        for call in retry:
            await _alone(self._pool, call)


async def _answer(conn: Any, calls: list[_Call]) -> list[_Call]:
    """Send `calls` down `conn` and settle each; the calls that failed, to send again alone."""
    cursors = await _pipelined(conn, calls)
    broken = conn.closed or conn.pgconn.status == pq.ConnStatus.BAD
    retry: list[_Call] = []
    for call, cursor in zip(calls, cursors, strict=True):
        result = cursor.pgresult
        if result is None:
            if broken:  # it may or may not have committed: the caller hears of the break
                fail([call], psycopg.OperationalError("the connection broke mid-batch"))
            else:
                retry.append(call)  # it failed and rolled back; alone, it says why
        elif result.status == _ROWS:
            settle(call[1], await cursor.fetchone())
        else:
            settle(call[1], None)
    return retry


async def _pipelined(conn: Any, calls: list[_Call]) -> list[AsyncCursor[TupleRow]]:
    """Send every call, a Sync after each, then read every answer; the cursors that hold one
    (a statement that failed leaves its cursor without a result)."""
    cursors: list[AsyncCursor[TupleRow]] = []
    async with conn.pipeline() as pipeline:
        for (sql, params), _ in calls:
            cursor = conn.cursor(row_factory=tuple_row)
            # An error raised here may be an earlier statement's; each is checked below.
            with contextlib.suppress(Exception):
                await cursor.execute(sql, params)
            # A Sync after each statement ends its transaction there: committed alone, and an
            # error aborts nothing after it. (psycopg has no public call that queues a Sync
            # without waiting for it; this is the one its own `sync()` uses.)
            pipeline._enqueue_sync()
            cursors.append(cursor)
        with contextlib.suppress(Exception):  # which failed is read from each cursor
            await pipeline.sync()
    return cursors


async def _alone(pool: Pool, call: _Call) -> None:
    (sql, params), reply = call
    try:
        row = await one(pool, sql, params)
    except BaseException as error:
        fail([call], error)
        if not isinstance(error, Exception):
            raise
        return
    settle(reply, row)
