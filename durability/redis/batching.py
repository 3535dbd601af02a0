"""`ScriptBatcher`: the scripts that many passes ask for at once, sent as one pipeline.

A worker at capacity runs dozens of passes, each three scripts (take, record, finish); sent one
by one, every script costs a connection checkout, a `send` and a wakeup of the server.
`ScriptBatcher.run` queues a script and sends everything queued in the same turn of the event
loop as one pipeline on a `SharedConnection` (on a cluster, one per node: `NodeLanes`), so a
burst of passes costs one send and one server wakeup, and a lone call goes at the next turn.

The decision not to undo: nothing about a script changes. Each is still its own atomic
`EVALSHA` with its own reply or error; the pipeline is not a transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from durability.checks import to_ms
from durability.redis.cluster_lanes import NodeLanes, redirected
from durability.redis.replicas import replicated
from durability.redis.shared_connection import SharedConnection, Unsendable
from durability.storekit.coalescing import Coalescer, Queued, fail, settle
from durability.storekit.outage import Unanswered

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from durability.redis.replicas import Acknowledged

__all__ = ["ScriptBatcher", "SharesBatches"]

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

    A cluster client batches per node: the turn's calls are grouped by the primary that holds
    their slot and each group is one pipeline on a lane to that node (`NodeLanes`); a call
    redirected or refused for now goes again through the cluster client, as does a call for a
    node the client knows no lane to. The replies of a turn that reached several nodes are
    handed out together once all have answered (at most `JOIN` after the first), so the passes
    that asked together go on together.

    With `want` (writes that wait for replicas) each pipeline ends with one `WAIT`, which
    counts every write before it on that connection: a turn's writes wait for the replicas
    together, and each call that ran is answered only if they have it (`NotAcknowledged`
    otherwise). Only made so for a single node (`sending.Sender`): a cluster's acknowledged
    writes are each a pipeline of their own.
    """

    __slots__ = ("_client", "_lanes", "_shared", "_turns", "_want")

    def __init__(self, client: Any, want: Acknowledged | None = None) -> None:
        self._client = client
        self._want = want
        self._turns: Coalescer[_Run, Any] = Coalescer(self._send, MOST)
        self._shared: SharedConnection | None = None
        self._lanes: NodeLanes | None = None
        if isinstance(client, RedisCluster):
            self._lanes = NodeLanes(client)
        else:
            self._shared = SharedConnection(client.connection_pool)

    async def close(self) -> None:
        """Let the sends under way end (at most `storekit.chores.ENDING`, then cancelled), then
        stop reading their connections: after this no task of the batcher runs."""
        await self._turns.drained()
        if self._shared is not None:
            await self._shared.close()
        if self._lanes is not None:
            await self._lanes.close()

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The reply of `script` run with `keys` and `args` (its error, raised)."""
        return await self._turns.queue((script, list(keys), list(args)))

    def queue(
        self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]
    ) -> asyncio.Future[Any]:
        """`run`, as the future of its reply, queued for this turn's batch: awaiting it costs
        no frame more (every write of a pass), and a caller with many scripts to run awaits
        their futures together with no task each."""
        return self._turns.queue((script, list(keys), list(args)))

    async def _send(self, calls: list[_Call]) -> None:
        if self._shared is not None:
            await self._send_on(self._shared, calls)
            return
        assert self._lanes is not None
        await self._lanes.refresh()
        groups: dict[SharedConnection | None, list[_Call]] = {}
        for call in calls:
            keys = call[0][1]
            lane = self._lanes.lane(str(keys[0])) if keys else None
            groups.setdefault(lane, []).append(call)
        # A turn's replies are handed out together once every node has answered (or `JOIN`
        # after the first did): the passes that asked in one turn go on in one turn, so their
        # next calls (and the slots they free for the reader) make one batch again, not one
        # wave per node that each fans out to every node anew.
        held = _Held() if len(groups) > 1 else None
        sends = [
            self._send_on(lane, group, held=held) if lane is not None else self._direct(group)
            for lane, group in groups.items()
        ]
        # The first node's send runs in this task, the others' in a task each (a task per node
        # costs a start and its callbacks, and a turn of a busy worker reaches every node).
        others = [asyncio.ensure_future(send) for send in sends[1:]]
        try:
            await sends[0]
            if others:
                await asyncio.gather(*others)
        except BaseException:  # cancelled (the batcher closing): so are the others
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            raise
        finally:
            if held is not None:
                held.release()

    async def _direct(self, calls: list[_Call]) -> None:
        """Each call through the cluster client, which routes it and follows redirects."""

        async def one(call: _Call) -> None:
            (script, keys, args), reply = call
            try:
                settle(reply, await script(keys=keys, args=args))
            except Exception as error:
                fail([call], error)

        await asyncio.gather(*(one(call) for call in calls))

    async def _send_on(
        self,
        shared: SharedConnection,
        calls: list[_Call],
        reloaded: bool = False,
        held: _Held | None = None,
    ) -> None:
        """Send `calls` as one pipeline on `shared` and settle each (through `held`, if given,
        the replies of the calls that ran; an error goes at once)."""
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", script.sha, len(keys), *keys, *args) for (script, keys, args), _ in calls
        ]
        want = self._want
        if want is not None:
            commands.append(("WAIT", want.replicas, to_ms(want.timeout)))
        try:
            results = await shared.execute(
                commands, waits=0.0 if want is None else want.timeout.total_seconds())
        except Unsendable as refused:  # nothing was sent: that call fails, the others go on
            fail([calls[refused.index]], refused)
            rest = calls[: refused.index] + calls[refused.index + 1 :]
            if rest:
                await self._send_on(shared, rest, reloaded, held)
            return
        except BaseException as error:  # every caller of this batch sees what went wrong
            if self._lanes is not None and isinstance(error, (Unanswered, RedisConnectionError)):
                self._lanes.lost()
            fail(calls, error)
            if not isinstance(error, Exception):
                raise
            return
        short = None if want is None else replicated(results.pop(), want)
        unloaded: list[_Call] = []
        moved: list[_Call] = []
        for call, result in zip(calls, results, strict=True):
            if not isinstance(result, Exception):  # the common case, asked first
                if short is None:
                    if held is None:
                        settle(call[1], result)
                    else:
                        held.give(call[1], result)
                else:  # it ran, on the primary alone as far as anyone knows
                    fail([call], short)
            elif isinstance(result, NoScriptError) and not reloaded:
                unloaded.append(call)  # the server's script cache was emptied: it did not run
            elif self._lanes is not None and redirected(result):
                moved.append(call)  # not run on that node: the cluster client sends it on
            else:
                fail([call], result)
        if moved:
            assert self._lanes is not None
            self._lanes.moved()
            await self._direct(moved)
        if unloaded:
            try:
                for text in {script.script for (script, _, _), _ in unloaded}:
                    await self._client.script_load(text)  # on a cluster: on every primary
            except Exception as error:
                fail(unloaded, error)
                return
            await self._send_on(shared, unloaded, True, held)


#: How long a cluster turn's first replies wait for the other nodes' (`_Held`): loopback and
#: a LAN answer well inside it; a node slower than that (frozen, failing over) holds up the
#: others' passes no longer than this a turn.
JOIN = 0.02


class _Held:
    """A cluster turn's replies, held from the first one `give`n until `release` (all nodes
    answered) or `JOIN` after it, whichever comes first; one given after that goes at once."""

    __slots__ = ("_open", "_replies", "_timer")

    def __init__(self) -> None:
        self._replies: list[tuple[asyncio.Future[Any], Any]] = []
        self._open = True
        self._timer: asyncio.TimerHandle | None = None

    def give(self, reply: asyncio.Future[Any], value: Any) -> None:
        if not self._open:
            settle(reply, value)
            return
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(JOIN, self.release)
        self._replies.append((reply, value))

    def release(self) -> None:
        self._open = False
        if self._timer is not None:
            self._timer.cancel()
        replies, self._replies = self._replies, []
        for reply, value in replies:
            settle(reply, value)


class SharesBatches:
    """What a Redis scheduler sends through a durable's batcher: once `share`d one (its
    checkpointer's, on the same client), its per-pass scripts (the take, the wakeup, the
    answers) go in the turn's batches; before that, each goes straight to its script object."""

    _batcher: ScriptBatcher | None

    def share(self, batcher: ScriptBatcher) -> None:
        """Send this queue's per-pass scripts through `batcher` from now on."""
        self._batcher = batcher

    async def _send(self, sent: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        if self._batcher is None:
            return await sent(keys=list(keys), args=list(args))
        return await self._batcher.queue(sent, keys, args)
