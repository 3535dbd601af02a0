"""The conformance suite over one backend's opener, as `check.check` runs it (in a pytest of
its own; `LAB_CONFORMANCE` says which backend, and where its places go).

Each test opens stores through the backend's opener, as the lab's agents do, each on a place
of its own (a fresh file, Redis namespace or Postgres queue), and closes them after. The
contracts are `durability.testing.conformance`'s: the scheduler's, the durable's (which holds
`work`, failures, status and listing), the checkpointer's and the bounds'; the last two need
what `kits` makes, and are skipped, saying why, where it cannot be made.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from durability.interfaces import Checkpointer, Durable, Scheduler
from durability.testing.conformance import (
    BoundsContract,
    CheckpointerContract,
    DurableContract,
    EffectKit,
    MakeScheduler,
    SchedulerContract,
)
from experiments.conforming.kits import Missing, effect_kit, offline, relayed
from experiments.harness.backends import Backend, Place
from experiments.harness.registry import load

_SETTINGS = json.loads(os.environ.get("LAB_CONFORMANCE") or "{}")
_SERIAL = itertools.count(1)
#: The durable's lease: long, as a store's own suite builds it (no test outlives it).
LEASE = timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class Opened:
    """A store the backend's opener opened, and the place it is on."""

    durable: Durable
    place: Place


Open = Callable[..., Awaitable[Opened]]


def _backend() -> Backend:
    if not _SETTINGS:
        pytest.skip("run by experiments.conforming.check.check, which says which backend")
    return Backend(name=_SETTINGS["name"], scheduler="", store=_SETTINGS["store"],
                   server=_SETTINGS.get("server"), options=_SETTINGS["options"],
                   opener=_SETTINGS["opener"], path=_SETTINGS["path"])


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Open]:
    """Opens a store of the backend on a place of its own (on `base` if given: the server's
    URL through a relay, say), as often as asked; all closed when the test ends."""
    backend = _backend()
    opener = load(backend.opener, backend.path)
    async with contextlib.AsyncExitStack() as stack:

        async def open_one(lease: timedelta, base: str | None = None) -> Opened:
            place = Place(base or _SETTINGS["base"], f"{_SETTINGS['tag']}{next(_SERIAL)}",
                          str(tmp_path))
            durable: Durable = await stack.enter_async_context(
                opener(backend.url(place), lease=lease))
            return Opened(durable, place)

        yield open_one


def _missing(error: Missing) -> None:
    pytest.skip(f"not run on {_SETTINGS.get('name')}: {error}")


class TestScheduler(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, opened: Open) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            return (await opened(lease)).durable.scheduler

        return make


class TestDurable(DurableContract):
    @pytest.fixture
    async def durable(self, opened: Open) -> Durable:
        return (await opened(LEASE)).durable


class TestCheckpointer(CheckpointerContract):
    @pytest.fixture
    async def store(self, opened: Open) -> Opened:
        return await opened(LEASE)

    @pytest.fixture
    def checkpointer(self, store: Opened) -> Checkpointer:
        return store.durable.checkpointer

    @pytest.fixture
    async def effect_kit(self, store: Opened) -> EffectKit:
        try:
            return await effect_kit(_backend().store, store.durable, store.place.base,
                                    store.place.tag, cluster=_SETTINGS.get("server") == "cluster")
        except Missing as error:
            _missing(error)
            raise


class TestBounds(BoundsContract):
    @pytest.fixture
    async def offline(self, opened: Open) -> AsyncIterator[Durable]:
        backend = _backend()
        try:
            if backend.server is None:
                durable = (await opened(LEASE)).durable
                await offline(backend.store, durable)
                yield durable
                return
            if backend.server == "cluster":
                raise Missing("a cluster's client finds its nodes at their own addresses, "
                              "which a relay in front of one node cannot cut")
            async with relayed(_SETTINGS["base"]) as (base, relay):
                durable = (await opened(LEASE, base)).durable
                await relay.cut()
                yield durable
        except Missing as error:
            _missing(error)
