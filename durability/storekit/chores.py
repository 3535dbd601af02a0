"""`Chores`: the tasks a store starts that outlive the call that started them (a turn's batch
on its way, a connection reading the answers a cancelled call was owed), held until done (the
loop keeps only weak references to tasks) and ended when the store closes: waited for, at most
`ENDING`, then cancelled and waited for again, so none is left pending to be destroyed with the
loop.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

__all__ = ["ENDING", "Chores"]

#: How long a closing store waits for what it started before cancelling it.
ENDING = timedelta(seconds=5)


class Chores:
    """A store's tasks that run on their own (see the module doc)."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def hold(self, task: asyncio.Future[Any]) -> None:
        """Keep `task` until it is done."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._tasks)

    async def ended(self, within: timedelta = ENDING) -> None:
        """Wait for every task held, at most `within`; then cancel those left and wait for
        them (each ends as its own cancel handling says). If this wait is itself cancelled,
        the tasks left are cancelled all the same."""
        tasks = set(self._tasks)
        if not tasks:
            return
        late: set[asyncio.Future[Any]] = tasks
        try:
            _, late = await asyncio.wait(tasks, timeout=within.total_seconds())
        finally:
            for task in late:
                task.cancel()
        if late:
            await asyncio.wait(late)
