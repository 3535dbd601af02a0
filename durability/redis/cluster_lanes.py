"""`NodeLanes`: one shared connection to each primary of a Redis Cluster, so a worker's turn of
script calls reaches each node as one pipeline (batching.py), not one by one through redis-py's
cluster client (a checkout, a route and a timeout task per command).

The decision not to undo: the cluster client stays the authority on where a slot lives and on
what to do when the cluster moves. A call its node answers with a redirect (`MOVED`, `ASK`) or
a refusal to serve now (`TRYAGAIN`, `CLUSTERDOWN`) did not run, so it is sent again through the
cluster client, whose retries handle it as they always did (and learn the new slots); a lane
whose connection was lost fails its calls as a single node's would (they may have run) and
makes the next turn ask the cluster for its slots again.
"""

from __future__ import annotations

from binascii import crc_hqx

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, ConnectionPool
from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    TryAgainError,
)

from durability.redis.bounds import call_bound
from durability.redis.packed_connection import PackedConnection
from durability.redis.shared_connection import SharedConnection

__all__ = ["NodeLanes", "redirected"]

#: What a node's connection keeps of the cluster client's settings for it.
_KEPT = (
    "host", "port", "username", "password", "credential_provider", "client_name", "encoding",
    "encoding_errors", "decode_responses", "socket_connect_timeout", "socket_keepalive",
    "socket_keepalive_options", "socket_read_size",
)


def redirected(reply: object) -> bool:
    """Whether a reply says the command did not run on that node and belongs elsewhere or
    later: `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`."""
    return isinstance(reply, (MovedError, AskError, TryAgainError, ClusterDownError))


class NodeLanes:
    """The lanes to one cluster client's primaries, by node (see the module doc)."""

    __slots__ = ("_by_slot", "_client", "_lanes", "_pools", "_stale")

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        self._lanes: dict[str, SharedConnection] = {}
        # The lane of each slot a call was sent to, as the cluster client knew it then; forgotten
        # whenever the client may know better (`moved`, `lost`), so a call is routed by a
        # lookup, not by asking the client (an encode and three calls a key).
        self._by_slot: dict[int, SharedConnection | None] = {}
        self._pools: list[ConnectionPool] = []
        self._stale = False

    def lane(self, key: str) -> SharedConnection | None:
        """The lane to the primary that holds `key`'s slot, as the cluster client last knew
        it; None when it knows none, or the node's connections are not plain TCP (then the
        call goes through the cluster client)."""
        # The slot as Redis reckons it (redis.crc.key_slot), on the text: a brace is one byte.
        start = key.find("{")
        if start > -1:
            end = key.find("}", start + 1)
            if end > start + 1:
                key = key[start + 1 : end]
        slot = crc_hqx(key.encode("utf-8", "surrogatepass"), 0) % REDIS_CLUSTER_HASH_SLOTS
        try:
            return self._by_slot[slot]
        except KeyError:
            found = self._by_slot[slot] = self._lane_of(slot)
            return found

    def _lane_of(self, slot: int) -> SharedConnection | None:
        try:
            node = self._client.nodes_manager.get_node_from_slot(slot)
        except RedisClusterException:
            return None
        if node is None:
            return None
        found = self._lanes.get(node.name)
        if found is None:
            if node.connection_class is not Connection:  # TLS, or a class of the caller's own
                return None
            kwargs = {name: node.connection_kwargs[name] for name in _KEPT
                      if name in node.connection_kwargs}
            # No socket timeout: the lane bounds each call itself (bounds.py), with the
            # cluster client's own bound.
            pool = ConnectionPool(
                connection_class=PackedConnection, socket_timeout=None,
                call_timeout=call_bound(node.connection_kwargs),
                traffic=getattr(self._client, "traffic", None), **kwargs,
            )
            self._pools.append(pool)
            found = self._lanes[node.name] = SharedConnection(pool)
        return found

    def moved(self) -> None:
        """A node answered that a slot is not (or not yet) its own: route by what the cluster
        client learns from following the redirect."""
        self._by_slot.clear()

    def lost(self) -> None:
        """A lane lost its connection: ask the cluster for its slots before the next turn."""
        self._stale = True
        self._by_slot.clear()

    async def refresh(self) -> None:
        """Learn the cluster's slots again if a lane was lost since the last turn (a failed
        look is left for the next turn: the calls go where the client last knew)."""
        if not self._stale:
            return
        self._stale = False
        try:
            await self._client.nodes_manager.initialize()
        except Exception:
            self._stale = True
        self._by_slot.clear()

    async def close(self) -> None:
        """Stop every lane's reader and close its connections."""
        for lane in self._lanes.values():
            await lane.close()
        for pool in self._pools:
            await pool.aclose()
        self._lanes.clear()
        self._by_slot.clear()
        self._pools.clear()

    def __repr__(self) -> str:  # pragma: no cover - a debugging aid
        return f"NodeLanes({sorted(self._lanes)})"


