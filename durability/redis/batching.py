"""`ScriptBatcher`: the scripts that many passes ask for at once, sent as one pipeline.

A worker at capacity runs dozens of passes, each three scripts (take, record, finish); sent one
by one, every script costs a connection checkout, a `send` and a wakeup of the server.
`ScriptBatcher.run` queues a script and sends everything queued in the same turn of the event
loop as one pipeline on a `SharedConnection`, so a burst of passes costs one send and one
server wakeup, and a lone call goes at the next turn, alone, as it would have.

The decision not to undo: nothing about a script changes. Each is still its own atomic
`EVALSHA` with its own reply or error; the pipeline is not a transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from durability.checks import to_ms
from durability.redis.replicas import replicated
from durability.redis.shared_connection import SharedConnection, Unsendable
from durability.storekit.coalescing import Coalescer, Queued, fail, settle

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from durability.redis.replicas import Acknowledged

__all__ = ["ScriptBatcher"]

#: The most scripts one pipeline carries; a bigger burst is sent as several.
MOST = 128

_Run = tuple["AsyncScript", list[Any], list[Any]]  # a script, its keys, its args
_Call = Queued[_Run, Any]


class ScriptBatcher:
    """Runs scripts on `client`, each turn's calls as one pipeline (see the module doc).

    Nothing about a script changes: each is still its own atomic `EVALSHA`, its reply or error
    goes to the caller that asked for it, and one script's error does not touch another's (the
    pipeline is not a transaction). A `NOSCRIPT` reply means that script did not run; it is sent
    again on its own, which loads it. A connection that fails fails every call of that pipeline,
    as it would have failed each of them sent alone. A call whose arguments cannot be packed
    fails alone with `Unsendable`, before anything is sent, and the rest go without it.

    Only a single-node client batches; a cluster client's pipeline splits by node and gains
    little, so there each call goes straight to the script object.

    With `want` (writes that wait for replicas) each pipeline ends with one `WAIT`, which
    counts every write before it on that connection: a turn's writes wait for the replicas
    together, and each call that ran is answered only if they have it (`NotAcknowledged`
    otherwise). Only on a single node (a cluster client's writes do not come here waited).
    """

    __slots__ = ("_client", "_shared", "_turns", "_want")

    def __init__(self, client: Any, want: Acknowledged | None = None) -> None:
        self._client = client
        self._want = want
        self._turns: Coalescer[_Run, Any] | None = None
        self._shared: SharedConnection | None = None
        if not isinstance(client, RedisCluster):
            self._turns = Coalescer(self._send, MOST)
            self._shared = SharedConnection(client.connection_pool)

    async def close(self) -> None:
        """Let the sends under way end (at most `storekit.chores.ENDING`, then cancelled), then
        stop reading their connection: after this no task of the batcher runs."""
        if self._turns is not None:
            await self._turns.drained()
        if self._shared is not None:
            await self._shared.close()

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The reply of `script` run with `keys` and `args` (its error, raised)."""
        if self._turns is None:
            return await script(keys=list(keys), args=list(args))
        return await self._turns.call((script, list(keys), list(args)))

    async def _send(self, calls: list[_Call], reloaded: bool = False) -> None:
        assert self._shared is not None  # batching only where there is a shared connection
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", script.sha, len(keys), *keys, *args) for (script, keys, args), _ in calls
        ]
        want = self._want
        if want is not None:
            commands.append(("WAIT", want.replicas, to_ms(want.timeout)))
        try:
            results = await self._shared.execute(
                commands, waits=0.0 if want is None else want.timeout.total_seconds())
        except Unsendable as refused:  # nothing was sent: that call fails, the others go on
            fail([calls[refused.index]], refused)
            rest = calls[: refused.index] + calls[refused.index + 1 :]
            if rest:
                await self._send(rest, reloaded)
            return
        except BaseException as error:  # every caller of this batch sees what went wrong
            fail(calls, error)
            if not isinstance(error, Exception):
                raise
            return
        short = None if want is None else replicated(results.pop(), want)
        unloaded: list[_Call] = []
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, NoScriptError) and not reloaded:
                unloaded.append(call)  # the server's script cache was emptied: it did not run
            elif isinstance(result, Exception):
                fail([call], result)
            elif short is not None:  # it ran, on the primary alone as far as anyone knows
                fail([call], short)
            else:
                settle(call[1], result)
        if unloaded:
            try:
                for text in {script.script for (script, _, _), _ in unloaded}:
                    await self._client.script_load(text)
            except Exception as error:
                fail(unloaded, error)
                return
            await self._send(unloaded, reloaded=True)
