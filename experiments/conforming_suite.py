"""The conformance suite over one backend's opener, as `experiments.conforming.check` runs it
(in a pytest of its own; `LAB_CONFORMANCE` says which backend, and where its places go).

Each test opens stores through the backend's opener, as the lab's agents do, each on a place
of its own (a fresh file, Redis namespace or Postgres queue), and closes them after. The
contracts are `durability.testing.conformance`'s: the scheduler's, and the durable's (which
holds `work`, failures, status and listing).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from durability.interfaces import Durable, Scheduler
from durability.testing.conformance import DurableContract, MakeScheduler, SchedulerContract
from experiments.backends import Backend, Place
from experiments.registry import load

_SETTINGS = json.loads(os.environ.get("LAB_CONFORMANCE") or "{}")
_SERIAL = itertools.count(1)
#: The durable's lease: long, as a store's own suite builds it (no test outlives it).
LEASE = timedelta(seconds=30)

Open = Callable[[timedelta], Awaitable[Durable]]


def _backend() -> Backend:
    if not _SETTINGS:
        pytest.skip("run by experiments.conforming.check, which says which backend")
    return Backend(name=_SETTINGS["name"], scheduler="", store=_SETTINGS["store"], server=None,
                   options=_SETTINGS["options"], opener=_SETTINGS["opener"],
                   path=_SETTINGS["path"])


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Open]:
    """Opens a store of the backend on a place of its own, as often as asked; all closed
    when the test ends."""
    backend = _backend()
    opener = load(backend.opener, backend.path)
    async with contextlib.AsyncExitStack() as stack:

        async def open_one(lease: timedelta) -> Durable:
            place = Place(_SETTINGS["base"], f"{_SETTINGS['tag']}{next(_SERIAL)}",
                          str(tmp_path))
            durable: Durable = await stack.enter_async_context(
                opener(backend.url(place), lease=lease))
            return durable

        yield open_one


class TestScheduler(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, opened: Open) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            return (await opened(lease)).scheduler

        return make


class TestDurable(DurableContract):
    @pytest.fixture
    async def durable(self, opened: Open) -> Durable:
        return await opened(LEASE)
