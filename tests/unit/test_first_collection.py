"""A worker makes its process's first full garbage collection before its first take, so that
collection does not pause the first passes it runs (`durability.worker.collect_first`)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from durability.worker import collect_first

# A new interpreter, so that no full collection has been made yet: what the oldest generation's
# collection count says when the first pass starts, and when the workflow completes.
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


def test_a_new_worker_process_collects_everything_before_its_first_pass() -> None:
    assert fresh()["at_start"] == 1


def test_a_new_process_with_collection_off_is_left_as_it_is() -> None:
    assert fresh("off")["at_start"] == 0


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
    made = gc.get_stats()[2]["collections"]
    assert collect_first() is False
    assert gc.get_stats()[2]["collections"] == made
