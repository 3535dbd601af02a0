"""What a rival's queue holds, counted the way `growth` counts ours: entries by kind, and bytes.

Redis: every key matching the rival's pattern (on the server of its own `growth` gives each
Redis rival, every key), grouped by its name with the queue's name and the ids taken out
(`saq:job:<queue>:<id>` counts as `saq:job`). A collection counts its members (a list's
items, a sorted set's members, a stream's entries), a string or a hash counts one: a job's
record is one entry, a queue of a hundred jobs is a hundred. The bytes are `MEMORY USAGE`.
Postgres: the rows of each of the rival's tables, and their `pg_total_relation_size` (heap,
indexes and TOAST: what the disk holds until a vacuum gives space back).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["postgres", "redis"]

#: A name's part that is an id: a long run of hex digits and dashes, or a number.
_ID = re.compile(r"^(?:(?=.*\d)[0-9a-fA-F-]{8,}|\d+)$")
_COUNTS = {"list": "LLEN", "set": "SCARD", "zset": "ZCARD", "stream": "XLEN"}


def kind_of(key: str, queue: str) -> str:
    """The kind a key is counted under: its name without the queue's name and the ids."""
    kept = []
    for part in key.replace(queue, "").replace("{}", "").split(":"):
        if part and not _ID.match(part):
            kept.append(part)
    return ":".join(kept) or "queue"


async def redis(url: str, queue: str, *matches: str) -> dict[str, Any]:
    """Entries by kind and bytes of the keys matching any of `matches` on the Redis at
    `url`."""
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        found: set[str] = set()
        for match in matches:
            found |= {key.decode() async for key in client.scan_iter(match=match, count=1000)}
        keys = sorted(found)
        parts: dict[str, int] = {}
        total = 0
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            pipe = client.pipeline(transaction=False)
            for key in chunk:
                pipe.type(key)
                pipe.memory_usage(key)
            answers = await pipe.execute()
            kinds = [answer.decode() for answer in answers[0::2]]
            total += sum(int(size or 0) for size in answers[1::2])
            pipe = client.pipeline(transaction=False)
            counted = [(key, kind) for key, kind in zip(chunk, kinds, strict=True)
                       if kind in _COUNTS]
            for key, kind in counted:
                pipe.execute_command(_COUNTS[kind], key)
            lengths = dict(zip((key for key, _ in counted), await pipe.execute(), strict=True))
            for key, kind in zip(chunk, kinds, strict=True):
                if kind == "none":
                    continue  # expired between the scan and the look
                name = kind_of(key, queue)
                parts[name] = parts.get(name, 0) + int(lengths.get(key, 1))
        return {"parts": parts, "bytes": total}
    finally:
        await client.aclose()


async def postgres(dsn: str, tables: tuple[str, ...]) -> dict[str, Any]:
    """Rows of each of `tables` (those that exist) and their total size on disk."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        parts: dict[str, int] = {}
        total = 0
        for table in tables:
            if await conn.fetchval("SELECT to_regclass($1)", table) is None:
                continue
            # The names are the rival's own, from its module: never from outside.
            parts[table] = int(await conn.fetchval(f'SELECT count(*) FROM "{table}"'))
            total += int(await conn.fetchval("SELECT pg_total_relation_size($1::regclass)",
                                             table))
        return {"parts": parts, "bytes": total}
    finally:
        await conn.close()
