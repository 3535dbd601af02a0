"""`StatementBatcher`: the statements many passes ask for at once, sent down one connection.

A worker at capacity runs dozens of passes, each three single-statement transactions (take,
record, finish); sent one by one, every statement waits its turn for a pooled connection and
costs a `send` and a wakeup of its backend. `StatementBatcher.one` queues a statement and sends
everything queued in the same turn of the event loop through one connection in pipeline mode
(`libpq_pipeline.exchange`), a Sync after each: each is still its own transaction, with its own
commit setting, and an error in one leaves the others alone. The exception is a call marked
`together` (the checkpointer's `record`): a turn's such calls share one commit and one WAL flush.
"""

from __future__ import annotations

import asyncio

from psycopg.rows import TupleRow

from durability.postgres import libpq_pipeline
from durability.postgres.statements import Params, Pool, bounded, one
from durability.storekit.coalescing import Coalescer, Queued, fail, settle

__all__ = ["StatementBatcher"]

#: The most statements one pipeline carries; a bigger burst is sent as several.
MOST = 64

#: A statement, its parameters, and whether it may share a transaction (see `StatementBatcher.one`).
_Statement = tuple[str, Params, bool]
_Call = Queued[_Statement, "TupleRow | None"]


class StatementBatcher:
    """Runs single statements on `pool`, each turn's calls down one connection.

    The exception is a call marked `together` (the checkpointer's `record`): those of one turn
    are sent last, as one transaction, so a dozen passes' writes pay for one commit and one WAL
    flush rather than a dozen (flushes spent one after another on the pipeline's connection). Each
    caller still gets its own row or error: if any member fails, or the transaction waits on a lock
    for more than `libpq_pipeline.GROUP_LOCK_WAIT`, it rolls back whole and every member is sent
    again alone, which says why.

    What can go wrong is kept exact:

    - a statement that fails is sent again alone through `one`, which raises its error where the
      caller expects it (`NotMigrated` included); a failed statement rolled back, so this is
      nothing but a retry of a transaction that did not happen;
    - a connection that breaks fails every statement of the batch that had not answered, as it
      would have failed each of them sent alone (whether those committed is unknown, as ever);
      those that answered before it broke keep their answers;
    - a pool whose connections are not in autocommit mode gets no batching (its statements would
      share one transaction); each call goes through `one`.
    """

    __slots__ = ("_pool", "_turns")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._turns: Coalescer[_Statement, TupleRow | None] = Coalescer(self._send, MOST)

    async def one(self, sql: str, params: Params, *, together: bool = False) -> TupleRow | None:
        """What `statements.one(pool, sql, params)` returns, sent with this turn's others.

        `together`: the statement may commit in one transaction with the turn's other such
        statements (`libpq_pipeline.exchange`'s `together`), which then pay for one commit, and one
        WAL flush, between them. Only for statements that commit synchronously, that touch only
        their own workflow's rows, and whose caller needs nothing but their own outcome;
        they are sent in order of `params["workflow"]`, so two workers' transactions lock the
        rows they share in the same order."""
        # The caller's wait is bounded as one call; a send it gave up on still settles (or
        # fails) with the rest of its batch, for no one.
        return await bounded(self._pool, self._turns.queue((sql, params, together)))

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
            if not conn.autocommit:
                retry = calls  # sent one by one below, once this connection is back
            else:
                told: set[int] = set()

                def heard(index: int, outcome: libpq_pipeline.Outcome) -> None:
                    # Each caller hears as soon as its statement has answered, not when the
                    # whole pipeline has (a take need not wait on the group's WAL flush).
                    told.add(index)
                    _answer(calls[index], outcome, retry)

                outcomes = await libpq_pipeline.exchange(
                    conn,
                    [(sql, params) for (sql, params, _), _ in calls],
                    sorted(
                        (i for i, ((_, _, together), _) in enumerate(calls) if together),
                        key=lambda i: str(calls[i][0][1].get("workflow", "")),
                    ),
                    heard,
                )
                for index, outcome in enumerate(outcomes):
                    if index not in told:  # never sent, or unanswered when the line broke
                        _answer(calls[index], outcome, retry)
        except BaseException as error:
            fail(calls, error)
            retry = []  # every caller has its answer: this error
            if not isinstance(error, Exception):
                raise
        finally:
            await libpq_pipeline.give_back(self._pool, conn)
        # Side by side: one of them stuck behind another transaction's lock (the reason a
        # group is retried, often) must not hold back the rest.
        await asyncio.gather(*(_alone(self._pool, call) for call in retry))


def _answer(call: _Call, outcome: libpq_pipeline.Outcome, retry: list[_Call]) -> None:
    """Give `call` what `exchange` says became of it, or put it on `retry`."""
    if outcome is libpq_pipeline.AGAIN:
        retry.append(call)  # failed and rolled back, or never sent; alone, it says why
    elif isinstance(outcome, BaseException):
        fail([call], outcome)
    else:
        settle(call[1], outcome)


async def _alone(pool: Pool, call: _Call) -> None:
    (sql, params, _), reply = call
    try:
        row = await one(pool, sql, params)
    except BaseException as error:
        fail([call], error)
        if not isinstance(error, Exception):
            raise
        return
    settle(reply, row)
