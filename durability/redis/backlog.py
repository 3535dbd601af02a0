"""`backlog`: how many wakeups wait on a Redis queue and since when, in one script per queue
kind (`stream_backlog.lua`, `set_backlog.lua`), on the server's clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durability.redis.lua import script
from durability.values import Backlog

__all__ = ["MOST_COUNTED", "backlog"]

#: The most undelivered stream entries the script counts one by one, when the server cannot
#: say the group's lag (a deletion inside the undelivered range).
MOST_COUNTED = 100_000


async def backlog(redis: Any, name: str, keys: list[str], args: list[Any]) -> Backlog:
    """Run the backlog script `name` and read its `{count, age ms or false}` reply."""
    ready, age = await script(redis, name)(keys=keys, args=args)
    oldest = None if age is None or age is False else timedelta(milliseconds=int(age))
    return Backlog(int(ready), oldest)
