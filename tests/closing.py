"""What a store leaves behind when it closes, for the tests that close one mid-call: the tasks
still pending that the test did not start, and what the loop's exception handler and
`warnings` said meanwhile (a task destroyed while pending, an unclosed transport or socket),
a garbage collection included, since that is when such a task or socket is reported."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Aftermath:
    """The tasks that were running when it was made (the test's own), and what was said."""

    def __init__(self) -> None:
        self.ours: set[asyncio.Task[Any]] = set(asyncio.all_tasks())
        self.said: list[str] = []

    def own(self, task: asyncio.Task[Any]) -> None:
        """`task` is the test's, not the store's."""
        self.ours.add(task)

    def pending(self) -> set[asyncio.Task[Any]]:
        """Tasks not done that are neither the test's nor the one asking."""
        current = asyncio.current_task()
        running = asyncio.all_tasks()
        return {task for task in running if task not in self.ours and task is not current}


@contextmanager
def watched() -> Iterator[Aftermath]:
    """An `Aftermath` of the block: its `said` is filled as the block ends. What earlier tests
    in this process left to the garbage collector is collected first, so their leaks are not
    said to be this block's."""
    gc.collect()
    loop = asyncio.get_running_loop()
    aftermath = Aftermath()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(
        lambda _, context: aftermath.said.append(str(context.get("message")))
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield aftermath
            gc.collect()
        aftermath.said += [f"{w.category.__name__}: {w.message}" for w in caught]
    finally:
        loop.set_exception_handler(previous)
