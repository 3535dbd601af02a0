"""A new worker process puts what it holds out of the garbage collector's sight before its first
take, so the first full collection, which would pause the passes it runs, finds only what came
since (`durability.worker.freeze_first`)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from durability.worker import freeze_first

# A new interpreter, so that no full collection has been made yet: when the first pass starts,
# how many objects are frozen, how many the oldest generation holds, and its collection count.
FRESH = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from durability import Run, work
    from durability.connect import open_durable

    async def body(run: Run) -> str:
        return "done"

    async def main() -> None:
        if sys.argv[1:] == ["off"]:
            gc.disable()
        seen = {"before": gc.get_stats()[2]["collections"]}
        ended = asyncio.Event()

        def observe(event):
            if event.kind == "started" and "at_start" not in seen:
                seen["at_start"] = gc.get_stats()[2]["collections"]
                seen["frozen"] = gc.get_freeze_count()
                seen["oldest"] = len(gc.get_objects(2))
            elif event.kind == "outcome":
                ended.set()

        async with open_durable("memory://") as durable:
            await durable.arrive("one", "order", 1)
            worker = asyncio.create_task(work(durable, body, observer=observe))
            await asyncio.wait_for(ended.wait(), 60)
            worker.cancel()
        print(json.dumps(seen))

    asyncio.run(main())
    """
)


def fresh(*args: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", FRESH, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    seen: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == 0, "the interpreter collected everything before work began"
    return seen


def test_a_new_worker_process_freezes_what_it_holds_before_its_first_pass() -> None:
    seen = fresh()
    assert seen["at_start"] == 0, "a full collection, the pause freezing spares"
    # What the start-up made (the modules, the store, the worker) is out of the collector's
    # sight: a first full collection would find the oldest generation nearly empty.
    assert seen["frozen"] > 10_000
    assert seen["oldest"] < seen["frozen"] / 10


def test_a_new_process_with_collection_off_is_left_as_it_is() -> None:
    seen = fresh("off")
    assert (seen["at_start"], seen["frozen"]) == (0, 0)


@pytest.fixture
def enabled() -> Iterator[None]:
    """Collection on during the test, whatever the test run set, and as it was after."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


@pytest.mark.usefixtures("enabled")
def test_a_process_that_has_collected_everything_is_left_as_it_is() -> None:
    gc.collect()
    made, frozen = gc.get_stats()[2]["collections"], gc.get_freeze_count()
    assert freeze_first() is False
    assert (gc.get_stats()[2]["collections"], gc.get_freeze_count()) == (made, frozen)
