"""Sending the scripts that many passes ask for at once as one pipeline.

A worker at capacity runs dozens of passes, and each pass is three scripts (take, record,
finish). Sent one by one, every script costs a connection checkout, a `send` and a wakeup of
the server; on a virtual machine the wakeup dominates, and the worker's CPU goes to the kernel
rather than to passes. `Batcher.run` queues a script and sends everything queued in the same
turn of the event loop as one pipeline on one connection, so a burst of passes costs one send
and one server wakeup. A lone call (an idle worker, a submission from an API process) is sent
at the next turn of the loop, alone, as it would have been.

Nothing about a script changes: each is still its own atomic `EVALSHA`, its reply or error
goes to the caller that asked for it, and one script's error does not touch another's (the
pipeline is not a transaction). A `NOSCRIPT` reply means that script did not run; it is sent
again on its own, which loads it. A connection that fails fails every call of that pipeline,
as it would have failed each of them sent alone.

Only a single-node client batches; a cluster client's pipeline splits by node and gains
little, so there each call goes straight to the script object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

__all__ = ["Batcher"]

#: The most scripts one pipeline carries; a bigger burst is sent as several.
MOST = 128

_Call = tuple["AsyncScript", list[Any], list[Any], "asyncio.Future[Any]"]


class Batcher:
    """Runs scripts on `client`, each turn's calls as one pipeline (see the module doc)."""

    __slots__ = ("_client", "_enabled", "_queued", "_sending")

    def __init__(self, client: Any) -> None:
        self._client = client
        self._enabled = not isinstance(client, RedisCluster)
        self._queued: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The reply of `script` run with `keys` and `args` (its error, raised)."""
        if not self._enabled:
            return await script(keys=list(keys), args=list(args))
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((script, list(keys), list(args), reply))
        return await reply

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        for start in range(0, len(queued), MOST):
            self._hold(asyncio.ensure_future(self._send(queued[start : start + MOST])))

    def _hold(self, task: asyncio.Task[None]) -> None:
        # Held until done: the loop keeps only weak references to tasks.
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, calls: list[_Call], reloaded: bool = False) -> None:
        try:
            if len(calls) == 1 and not reloaded:
                script, keys, args, reply = calls[0]
                _settle(reply, await script(keys=keys, args=args))  # loads it on NOSCRIPT
                return
            pipe = self._client.pipeline(transaction=False)
            for script, keys, args, _ in calls:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            results = await pipe.execute(raise_on_error=False)
        except BaseException as error:  # every caller of this batch sees what went wrong
            for *_, reply in calls:
                if not reply.done():
                    reply.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        unloaded: list[_Call] = []
        for call, result in zip(calls, results, strict=True):
            reply = call[3]
            if isinstance(result, NoScriptError) and not reloaded:
                unloaded.append(call)  # the server's script cache was emptied: it did not run
            elif isinstance(result, Exception):
                if not reply.done():
                    reply.set_exception(result)
            else:
                _settle(reply, result)
        if unloaded:
            try:
                for text in {call[0].script for call in unloaded}:
                    await self._client.script_load(text)
            except Exception as error:
                for *_, reply in unloaded:
                    if not reply.done():
                        reply.set_exception(error)
                return
            await self._send(unloaded, reloaded=True)


def _settle(reply: asyncio.Future[Any], value: Any) -> None:
    if not reply.done():  # its caller may have been cancelled meanwhile
        reply.set_result(value)

