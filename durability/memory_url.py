"""`open_url`: `memory://` to a fresh `MemoryDurable` over the memory stores, for this process
only (`open_durable`'s memory entry). It takes no host, path or option."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from durability.interfaces import Durable
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.memory_durable import MemoryDurable
from durability.opening import Opening
from durability.storekit.traffic import Traffic

__all__ = ["open_url"]


@contextlib.asynccontextmanager
async def open_url(opening: Opening) -> AsyncIterator[Durable]:
    """Both memory stores, with the lease given, sharing one count of traffic."""
    parts = urlsplit(opening.url)
    if parts.netloc or parts.path.strip("/") or parts.query:
        raise ValueError(f"memory:// takes no host, path or options, got {opening.url!r}")
    traffic = Traffic()
    checkpointer = MemoryCheckpointer(traffic=traffic)
    scheduler = MemoryScheduler(lease=opening.lease, traffic=traffic)
    yield MemoryDurable(checkpointer, scheduler, traffic)
