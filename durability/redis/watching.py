"""Waking whoever waits for a workflow's ending (`result`) on Redis: the script that writes an
ending PUBLISHes on the workflow's own channel (`<records key>:ended`), and a watcher
SUBSCRIBEs to it before its first look, on a connection of its own for as long as it waits (a
cluster's pub/sub reaches every node). A connection that fails raises from the bell, and
`result` looks now and then instead."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

__all__ = ["RedisBell", "channel_of", "watch"]


def channel_of(records_key: str) -> str:
    """The channel a workflow's ending is published on, from its records key."""
    return f"{records_key}:ended"


class RedisBell:
    """One watcher's bell over its subscription (`Watching`)."""

    __slots__ = ("_pubsub",)

    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    async def wait(self, within: timedelta) -> bool:
        message = await self._pubsub.get_message(
            ignore_subscribe_messages=True, timeout=within.total_seconds()
        )
        return message is not None


@contextlib.asynccontextmanager
async def watch(redis: Any, channel: str) -> AsyncIterator[RedisBell]:
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe(channel)
        yield RedisBell(pubsub)
    finally:
        await pubsub.aclose()
