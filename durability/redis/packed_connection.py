"""`PackedConnection`: redis.asyncio's TCP connection, packing commands in C when it can.

redis-py's asyncio connection builds every command's wire form in Python, one `encode` call
per argument, and a worker's scripts carry a dozen arguments each. hiredis has `pack_command`,
which does the same in C; `PackedConnection` uses it whenever the result is certain to be the
same bytes, and redis-py's own packer otherwise. It is also where this store counts what it
sends (`durability.Traffic`). `open_durable` uses it for `redis://` URLs; pass
`connection_class=PackedConnection` to `Redis(...)` to use it elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durability.redis.bounds import Bounded
from durability.redis.lua import command_name
from durability.storekit.traffic import Traffic

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis is optional: without it the connection packs as redis-py does
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is installed wherever the tests run
    _pack = None

__all__ = ["PackedConnection"]


class PackedConnection(Bounded):
    """A `redis.asyncio.connection.Connection` that packs commands with hiredis and counts
    them into `traffic`, each call bounded by `call_timeout` (`bounds.Bounded`).

    hiredis's `pack_command` is used whenever the result is certain to be redis-py's bytes: the
    client encodes text as strict UTF-8, and every argument is `str`, `bytes` or `int` (not
    `bool`, which redis-py refuses). Anything else (a float, a memoryview, another encoding, no
    hiredis) goes through redis-py's own packer, unchanged.

    It is also where this store counts what it sends (`durability.Traffic`): given `traffic=` (a
    connection keyword, so `Redis.from_url(url, connection_class=PackedConnection, traffic=t)`),
    every command it packs is a request, named by the command (a script by its `.lua` file, see
    `lua.command_name`), and every send that waits for replies a round trip.
    """

    def __init__(self, *, traffic: Traffic | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.traffic = traffic

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self.traffic is not None:
            self.traffic.round_trip()
        await super().send_packed_command(command, check_health)

    def pack_command(self, *args: Any) -> list[bytes]:
        if self.traffic is not None:
            self.traffic.request(command_name(args))
        encoder = self.encoder
        if _pack is None or encoder.encoding != "utf-8" or encoder.encoding_errors != "strict":
            return super().pack_command(*args)
        first = args[0]
        if isinstance(first, bytes):
            first = first.decode("ascii")  # a command name
        # "CONFIG GET": a command name given with its subcommand goes as separate arguments.
        if isinstance(first, str) and " " in first:
            args = (*first.split(), *args[1:])
        for arg in args:
            kind = type(arg)
            if kind is not str and kind is not bytes and kind is not int:
                return super().pack_command(*args)
        return [_pack(args)]

