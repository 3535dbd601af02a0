"""`Coalescer`: gather the calls made in one turn of the event loop and send them together.

Both network stores use it for their hot path (`durability.redis.batching`,
`durability.postgres.batching`): a worker at capacity has dozens of passes asking for a store
call at once, and sending each alone costs a connection, a `send` and a server wakeup apiece.
Each call queues its request with a future and awaits it; the first call of a turn starts one
task, whose first step (next turn) hands the queue, at most `most` requests at a time, to the
store's `send`. `send` settles every future it is given (`settle` / `fail` skip one whose
caller was cancelled meanwhile); a lone request is sent at the next turn, alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, Generic, TypeVar

from durability.storekit.chores import ENDING, Chores

__all__ = ["Queued", "Coalescer", "fail", "settle"]

Q = TypeVar("Q")  # what a call asks for
R = TypeVar("R")  # what it gets back

#: A request and the future its caller awaits.
Queued = tuple[Q, asyncio.Future[R]]


class Coalescer(Generic[Q, R]):
    """Hands each turn's requests to `send` in groups of at most `most` (see the module doc)."""

    __slots__ = ("_most", "_queued", "_send", "_sending")

    def __init__(self, send: Callable[[list[Queued[Q, R]]], Awaitable[None]], most: int) -> None:
        self._send = send
        self._most = most
        self._queued: list[Queued[Q, R]] = []
        self._sending = Chores()  # each turn's sends, held until done

    def queue(self, request: Q) -> asyncio.Future[R]:
        """Queue `request` for this turn's send; the future `send` settles, to await for its
        answer (or the error it fails with). A future, not a coroutine around one: a pass's
        record and finish each come here, and a caller with many requests at once awaits
        their futures together at no task each."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[R] = loop.create_future()
        if not self._queued:
            # The task's first step runs after every call made in this turn has queued.
            self._hold(loop.create_task(self._flush()))
        self._queued.append((request, reply))
        return reply

    async def _flush(self) -> None:
        queued, self._queued = self._queued, []
        most = self._most
        for start in range(most, len(queued), most):
            self._hold(asyncio.ensure_future(self._send(queued[start : start + most])))
        await self._send(queued[:most])

    def _hold(self, task: asyncio.Future[None]) -> None:
        self._sending.hold(task)

    async def drained(self, within: timedelta = ENDING) -> None:
        """Wait, at most `within`, for the sends under way (a closing store's last calls),
        then cancel those left and wait for them."""
        await self._sending.ended(within)


def settle(reply: asyncio.Future[Any], value: object) -> None:
    """Give `reply` its value, unless its caller was cancelled meanwhile."""
    if not reply.done():
        reply.set_result(value)


def fail(queued: Iterable[Queued[Any, Any]], error: BaseException) -> None:
    """Fail every one of `queued` not settled yet with `error`."""
    for _, reply in queued:
        if not reply.done():
            reply.set_exception(error)
