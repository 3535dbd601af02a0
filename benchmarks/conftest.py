"""Fixtures for the per-operation benchmarks: every store, opened through the lab's backends.

`pytest benchmarks --benchmark-only` times one store operation per test on every backend the
lab can find here; `--benchmark-save=NAME` (or `-autosave`) saves a run in `results/benchmarks/`.

pytest-benchmark times synchronous calls, so each backend's store lives on an event loop of
its own and an operation is timed as one `run_until_complete` of it: the loop's own overhead
is in every figure, the same for every store (see `Opened`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from durability import Durable
from durability.connect import open_durable
from experiments.commands.runner import skip_reason
from experiments.harness.backends import BACKENDS
from experiments.harness.lab import Lab
from experiments.harness.servers import Servers

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
#: One backend per store (their schedulers differ; the checkpointer is each store's own).
STORES = ("memory", "redis-stream", "redis-set", "postgres", "sqlite")


def pytest_configure(config: pytest.Config) -> None:
    """Save runs under `results/benchmarks/` unless `--benchmark-storage` names another place."""
    storage = getattr(config.option, "benchmark_storage", None)
    if storage in (None, "file://./.benchmarks", "./.benchmarks"):
        config.option.benchmark_storage = f"file://{ROOT / 'results' / 'benchmarks'}"


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The lab, finding each backend as `experiments.harness.servers` does: an explicit URL, the
    default port, a container, a local binary, in that order."""
    servers = Servers()
    try:
        yield Lab(servers, quick=True)
    finally:
        servers.close()


class Opened:
    """A store open on a loop of its own; `run(op)` runs one coroutine there, as one
    `run_until_complete`, whose own overhead (a few microseconds) is in every timing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, durable: Durable, tag: str) -> None:
        self.loop = loop
        self.durable = durable
        self.tag = tag

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def once() -> T:
            return await make()

        return self.loop.run_until_complete(once())


@contextlib.contextmanager
def opened(lab: Lab, name: str) -> Iterator[Opened]:
    """`name`'s store open in a place of its own (its own namespace, database or file, as lab
    runs do) on a loop of its own; a backend that cannot be had here is skipped with the lab's
    reason."""
    backend = BACKENDS[name]
    reason = skip_reason(lab, backend)
    if reason is not None:
        pytest.skip(reason)
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()

    async def open_() -> tuple[Durable, str]:
        place, _ = await stack.enter_async_context(lab.place(backend))
        durable: Any = await stack.enter_async_context(open_durable(backend.url(place)))
        return durable, place.tag

    try:
        durable, tag = loop.run_until_complete(open_())
        yield Opened(loop, durable, tag)
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, lab: Lab) -> Iterator[Opened]:
    with opened(lab, request.param) as made:
        yield made


@pytest.fixture(scope="module", params=STORES)
def kept_store(request: pytest.FixtureRequest, lab: Lab) -> Iterator[Opened]:
    """`store`, shared by a module's tests (for a workload that is slow to build)."""
    with opened(lab, request.param) as made:
        yield made
