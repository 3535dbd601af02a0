"""Sending the statements that many passes ask for at once down one connection.

A worker at capacity runs dozens of passes, each three single-statement transactions (take,
record, finish). Sent one by one, every statement waits its turn for a pooled connection and
costs a `send` and a wakeup of its backend; at capacity that overhead, not the statements, is
most of the worker's CPU. `Batcher.one` queues a statement and sends everything queued in the
same turn of the event loop through one connection in pipeline mode, with a Sync after each
statement: each is still its own transaction, committed (or rolled back) on its own, with its
own commit setting, and an error in one leaves the others alone. A lone call is sent as
before, through `one`.

The batch is written with libpq's own calls (psycopg's `pq` layer) rather than through cursors
in psycopg's pipeline: each statement is prepared once per connection and then sent as Bind
and Execute, its parameters dumped and its row loaded by psycopg's own adapters (so every type
converts exactly as through a cursor). psycopg's pipeline machinery costs about 0.16 ms of
client CPU a statement on the machine of `results/`, this path about 0.05 ms, and on a
worker at capacity that CPU is what bounds the passes a second.

What can go wrong is kept exact:

- a statement that fails is sent again alone through `one`, which raises its error where the
  caller expects it (`NotMigrated` included); a failed statement rolled back, so this is
  nothing but a retry of a transaction that did not happen;
- a connection that breaks fails every statement of the batch that had not answered, as it
  would have failed each of them sent alone (whether those committed is unknown, as ever); a
  batch interrupted any other way (cancelled, say) closes its connection, which cannot go back
  to the pool with answers still owed on it;
- a pool whose connections are not in autocommit mode gets no batching (its statements would
  share one transaction), nor does a libpq without pipeline mode (before 14) or a statement
  whose text is not plain `%(name)s` placeholders; each such call goes through `one`.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import weakref
from collections.abc import Mapping
from functools import cache
from typing import Any

import psycopg
from psycopg import abc, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.rows import TupleRow

from durability.postgres.statements import Params, Pool, one
from durability.turns import Queued, TurnBatcher, fail, settle

__all__ = ["Batcher"]

#: The most statements one pipeline carries; a bigger burst is sent as several.
MOST = 64

_Status = pq.ExecStatus
_CAN_PIPELINE = pq.version() >= 140000 and hasattr(pq.PGconn, "enter_pipeline_mode")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%")

_Statement = tuple[str, Params]
_Call = Queued[_Statement, "TupleRow | None"]
#: A statement's text with `$n` placeholders, and the parameter each `$n` takes.
_Compiled = tuple[bytes, tuple[str, ...]]

#: Per connection, the statements prepared on it: (text, parameter types) -> name.
_PREPARED: weakref.WeakKeyDictionary[Any, dict[tuple[bytes, tuple[int, ...]], bytes]] = (
    weakref.WeakKeyDictionary()
)
_NAMES = itertools.count()


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
        if len(calls) == 1 or not _CAN_PIPELINE:
            for call in calls:
                await _alone(self._pool, call)
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
            if not conn.autocommit:
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


@cache
def _compiled(sql: str) -> _Compiled | None:
    """`sql` with `$1, $2, ...` for its `%(name)s` placeholders, or None if it holds any other
    `%` (which psycopg would read as an escape or a positional placeholder)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            raise ValueError(sql)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    try:
        text = _PLACEHOLDER.sub(number, sql)
    except ValueError:
        return None
    return text.encode(), tuple(names)


async def _answer(conn: Any, calls: list[_Call]) -> list[_Call]:
    """Send `calls` down `conn` in one pipeline, a Sync after each, and settle each; return
    the calls to send again alone (those that failed, or that this path cannot send)."""
    pgconn: pq.abc.PGconn = conn.pgconn
    transformer: abc.Transformer = Transformer(conn)
    prepared = _PREPARED.setdefault(conn, {})
    # Each call sent, and the key it prepared its statement under (None: prepared before).
    sent: list[tuple[_Call, tuple[bytes, tuple[int, ...]] | None]] = []
    retry: list[_Call] = []
    answered = 0
    try:
        pgconn.enter_pipeline_mode()
        for call in calls:
            (sql, params), _ = call
            compiled = _compiled(sql)
            if compiled is None or not isinstance(params, Mapping):
                retry.append(call)
                continue
            text, names = compiled
            values = transformer.dump_sequence(
                [params[name] for name in names], [PyFormat.AUTO] * len(names)
            )
            key = (text, tuple(transformer.types or ()))
            name = prepared.get(key)
            fresh = name is None
            if name is None:
                # Counted as prepared at once, so a second call of it in this batch binds it
                # too (the Parse is ahead of it on the wire); forgotten below if it failed.
                name = prepared[key] = f"durability_{next(_NAMES)}".encode()
                pgconn.send_prepare(name, text, param_types=key[1])
            pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
            pgconn.pipeline_sync()
            sent.append((call, key if fresh else None))
        while pgconn.flush():
            await _ready(pgconn.socket, write=True)
        for call, fresh_key in sent:
            results = await _until_sync(pgconn)
            answered += 1
            if not _settled(call, fresh_key, results, prepared, transformer):
                retry.append(call)
        pgconn.exit_pipeline_mode()
    except psycopg.OperationalError:
        pgconn.finish()  # owes answers it will never give: not for the pool
        _PREPARED.pop(conn, None)
        broken = psycopg.OperationalError("the connection broke mid-batch")
        fail([call for call, _ in sent[answered:]], broken)
    except BaseException:
        pgconn.finish()
        _PREPARED.pop(conn, None)
        raise
    return retry


def _settled(
    call: _Call,
    fresh_key: tuple[bytes, tuple[int, ...]] | None,
    results: list[pq.abc.PGresult],
    prepared: dict[tuple[bytes, tuple[int, ...]], bytes],
    transformer: abc.Transformer,
) -> bool:
    """Settle `call` from its results (its Parse's first, if it sent one); False if it failed
    and is to be sent again alone."""
    if fresh_key is not None:
        if not results or results[0].status != _Status.COMMAND_OK:
            prepared.pop(fresh_key, None)
            return False
        results = results[1:]
    result = results[-1] if results else None
    if result is None or result.status not in (_Status.TUPLES_OK, _Status.COMMAND_OK):
        if result is not None and result.error_field(pq.DiagnosticField.SQLSTATE) == b"26000":
            prepared.clear()  # the session lost its prepared statements (DEALLOCATE)
        return False  # it failed and rolled back; alone, it says why
    if result.status == _Status.TUPLES_OK and result.ntuples:
        transformer.set_pgresult(result)
        settle(call[1], transformer.load_row(0, tuple))
    else:
        settle(call[1], None)
    return True


async def _until_sync(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """The results of one statement (and its Parse, if any), up to the Sync after it."""
    results: list[pq.abc.PGresult] = []
    while True:
        if pgconn.is_busy():
            await _ready(pgconn.socket, write=False)
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:  # the end of one command's results
            continue
        if result.status == _Status.PIPELINE_SYNC:
            return results
        results.append(result)


async def _ready(fileno: int, *, write: bool) -> None:
    """Wait until the socket can be read (or written)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if write:
        loop.add_writer(fileno, wake)
    else:
        loop.add_reader(fileno, wake)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fileno)
        else:
            loop.remove_reader(fileno)


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
