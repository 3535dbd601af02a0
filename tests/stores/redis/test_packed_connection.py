"""`PackedConnection`: the same bytes on the wire as redis-py's own packer, or redis-py's packer."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from durability.connect import open_durable
from durability.redis import RedisDurable
from durability.redis.packed_connection import PackedConnection

SAMPLES: list[tuple[Any, ...]] = [
    ("EVALSHA", "c2a6c628", 3, "workflow:{wf}", "workflow:{wf}:pass", "k", 30000, '{"a": 1}'),
    ("SET", "ключ", "значение ✓"),  # text beyond ASCII
    ("SET", b"raw", b"\x00\xff bytes"),
    ("CLIENT SETNAME", "worker"),  # a command name with its subcommand
    (b"CONFIG GET", "maxmemory"),
    ("ZADD", "z", 1.5, "member"),  # a float: redis-py's own packer
    ("SET", "k", memoryview(b"view")),  # a memoryview: redis-py's own packer
    ("INCRBY", "n", -12345678901234567890),
    ("SET", "empty", ""),
]


@pytest.mark.parametrize("args", SAMPLES, ids=lambda a: str(a[0]))
def test_packs_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours = PackedConnection(host="127.0.0.1")
    theirs = Connection(host="127.0.0.1")
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(Exception) as ours:
        PackedConnection(host="127.0.0.1").pack_command("SET", "k", True)
    with pytest.raises(Exception) as theirs:
        Connection(host="127.0.0.1").pack_command("SET", "k", True)
    assert type(ours.value) is type(theirs.value)


def test_another_encoding_goes_through_redis_py() -> None:
    ours = PackedConnection(host="127.0.0.1", encoding="latin-1")
    theirs = Connection(host="127.0.0.1", encoding="latin-1")
    args = ("SET", "k", "café")
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))
    assert b"caf\xe9" in b"".join(ours.pack_command(*args))


async def test_open_durable_talks_to_redis_through_it(redis: Redis, namespace: str) -> None:
    url = f"redis://127.0.0.1:6379/0?namespace={namespace}"
    async with open_durable(url) as durable:
        assert isinstance(durable, RedisDurable)
        client = durable.checkpointer.redis  # type: ignore[attr-defined]
        assert client.connection_pool.connection_class is PackedConnection
        workflow = f"{namespace}-{uuid.uuid4().hex[:6]}"
        await durable.arrive(workflow, "ключ", {"текст": "✓", "n": 3})
        assert await durable.checkpointer.load(workflow) == {"ключ": {"текст": "✓", "n": 3}}
