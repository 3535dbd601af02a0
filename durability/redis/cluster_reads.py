"""`ClusterReads`: an idle reader's blocking reads on a Redis Cluster, one per shard, each sent
behind a `CLIENT ID` on a node's connection of its own, so that once one answers the others are
ended by `CLIENT UNBLOCK` and what they brought is kept.

The decision not to undo: a read, once sent, is never cancelled. Redis may have answered it by
then, and what it gave would be stranded: a stream entry delivered to this consumer, pending,
seen by nobody until its lease lapses. A wait hands out what the reads that ended gave and ends
the rest; the next collects their answers before it reads again. A read its node redirects (it
did not run) goes again through the cluster client, and ends at its own block.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import SlotNotCoveredError

from durability.redis.cluster_lanes import redirected
from durability.storekit.chores import Chores

__all__ = ["ClusterReads", "Read"]

#: How long past their block a wait gives its reads to end by themselves (an idle reader's
#: usual wait: no `CLIENT UNBLOCK`) before it ends them. Until the server times a read out it
#: may be handed an entry, so a wait never stops at its block alone.
SLACK = timedelta(milliseconds=50)


@dataclass(frozen=True)
class Read:
    """One blocking read: the key whose slot's node serves it, and the command."""

    key: str
    command: tuple[Any, ...]


@dataclass(eq=False)
class _Sent:
    """A read on its way: its connection's client id once known (None: not, or not on a
    connection of its own), and the node it went to."""

    read: Read
    ident: int | None = None
    node: Any = None
    known: asyncio.Event = field(default_factory=asyncio.Event)


class ClusterReads:
    """The blocking reads of one cluster client's reader (see the module doc)."""

    __slots__ = ("_client", "_ending")

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        #: The reads a wait did not wait for, being ended; their answers are the next wait's.
        self._ending: list[asyncio.Future[Any]] = []

    @property
    def leaving(self) -> bool:
        """Whether reads an earlier wait left are being ended (`left` has their answers)."""
        return bool(self._ending)

    async def left(self) -> list[Any]:
        """What the reads an earlier wait left brought (empty answers and failures dropped:
        a read that failed brought nothing), once they have ended."""
        if not self._ending:
            return []
        ending, self._ending = self._ending, []
        return _brought(await asyncio.gather(*ending, return_exceptions=True))

    async def first(self, reads: Sequence[Read], within: timedelta) -> list[Any]:
        """What the reads that ended once one has brought (empty answers dropped), waiting
        at most `within` and `SLACK` (a read ends by itself at its block); or, when the reads
        an earlier wait left brought something, that, without reading again. A read that
        failed is raised only when none brought anything."""
        found = await self.left()
        if found:
            return found
        pairs = [(one, asyncio.ensure_future(self._send(one))) for one in map(_Sent, reads)]
        try:
            await asyncio.wait(
                [task for _, task in pairs], timeout=(within + SLACK).total_seconds(),
                return_when=asyncio.FIRST_COMPLETED,
            )
        except BaseException:  # cancelled: every read's answer is the next wait's
            self._ending += [asyncio.ensure_future(self._end(*pair)) for pair in pairs]
            raise
        self._ending += [
            asyncio.ensure_future(self._end(one, task)) for one, task in pairs if not task.done()
        ]
        ended = [task.exception() or task.result() for _, task in pairs if task.done()]
        found = _brought(ended)
        failed = [one for one in ended if isinstance(one, BaseException)]
        if failed and not found:
            raise failed[0]
        return found

    async def _send(self, one: _Sent) -> Any:
        """`one`'s answer: its read sent on a connection of its own behind `CLIENT ID`, or
        through the cluster client where no node is known for its slot or the node redirects
        it (it did not run there; the client learns where the slot went)."""
        try:
            node = self._client.get_node_from_key(one.read.key)
        except SlotNotCoveredError:
            node = None
        try:
            if node is not None:
                answered, answer = await self._on_node(one, node)
                if answered:
                    return answer
                one.ident = None
        finally:
            one.known.set()
        return await self._client.execute_command(*one.read.command)

    @staticmethod
    async def _on_node(one: _Sent, node: ClusterNode) -> tuple[bool, Any]:
        """Whether `node` answered `one` (not with a redirect), and its answer."""
        connection = node.acquire_connection()
        try:
            commands = [("CLIENT", "ID"), one.read.command]
            await connection.send_packed_command(connection.pack_commands(commands))
            one.ident, one.node = int(await connection.read_response()), node
            one.known.set()
            return True, await node.parse_response(connection, one.read.command[0])
        except Exception as error:
            if redirected(error):
                return False, None
            await connection.disconnect()
            raise
        except BaseException:
            await connection.disconnect()  # cancelled: an answer may still be owed on it
            raise
        finally:
            node.release(connection)

    async def _end(self, one: _Sent, task: asyncio.Future[Any]) -> Any:
        """`one`'s answer, once it is unblocked if it is still waiting."""
        if not task.done():
            await one.known.wait()  # the client id is known, or the read has ended
            if one.ident is not None and not task.done():
                with contextlib.suppress(Exception):  # it ends at its block all the same
                    await one.node.execute_command("CLIENT UNBLOCK", one.ident, "TIMEOUT")
        return await task

    async def close(self) -> None:
        """End the reads left: waited for at most `ENDING`, then cancelled (`Chores.ended`)."""
        ending, self._ending = self._ending, []
        chores = Chores()
        for read in ending:
            chores.hold(read)
        await chores.ended()


def _brought(ended: Sequence[Any]) -> list[Any]:
    """What ended reads brought: their answers, less the empty ones and the failures."""
    return [one for one in ended if one and not isinstance(one, BaseException)]

