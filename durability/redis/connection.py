"""`packed`: have a `redis.asyncio` client pack commands with hiredis, as the sync client does.

redis-py's asyncio connection packs every command in Python, one `encode` per argument: about
40 us for a script call on this project's VM, a large share of a worker's CPU per round trip.
With hiredis installed (the `redis` extra brings it) the sync client already packs in C; this
gives the asyncio client's plain TCP connections the same packer. Anything else (TLS, Unix
sockets, an encoding other than UTF-8, no hiredis) is left exactly as redis-py built it.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import Connection
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

__all__ = ["PackedConnection", "packed"]


class PackedConnection(Connection):
    """A TCP connection whose commands are packed by hiredis (str as UTF-8, numbers as their
    text: what redis-py's own encoder sends for them)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def packed(client: Any) -> Any:
    """Switch `client`'s pool to `PackedConnection` when that changes nothing but the packer;
    return the client. Call before the first command (existing connections keep theirs)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or not HIREDIS_AVAILABLE or pool.connection_class is not Connection:
        return client
    if pool.connection_kwargs.get("encoding", "utf-8").lower().replace("_", "-") != "utf-8":
        return client
    pool.connection_class = PackedConnection
    return client
