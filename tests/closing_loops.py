"""A bound on an event loop's closing in the suite, and a name for what held it up.

`asyncio.Runner.close` (pytest-asyncio closes every test's loop with it) cancels the tasks a
test left behind and waits for all of them with no bound: a task that swallows its cancel
hangs the whole worker, and CI with it, with nothing said of which task it was. Here the wait
is bounded: a task still running `PATIENCE` seconds after its cancel has its stack written to
the run's output (the stream pytest's faulthandler writes to, which capturing leaves alone),
is cancelled again each second for up to `AGAIN` seconds (a cancel one layer swallowed is
often heard by the next), and the names are kept for the run's end, which lists them."""

from __future__ import annotations

import asyncio
import asyncio.runners
import io
import os
import sys
from collections.abc import Callable
from typing import Any

PATIENCE = 10.0
AGAIN = 30
#: Every task that outlived its cancel, as a line for the run's end.
held_up: list[str] = []
_say: Callable[[str], None] = lambda text: sys.__stderr__.write(text)  # noqa: E731


def _stack(task: asyncio.Task[Any]) -> str:
    out = io.StringIO()
    task.print_stack(limit=40, file=out)
    return out.getvalue()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=PATIENCE))
    if pending:
        for task in pending:
            held_up.append(repr(task))
            _say(f"\nclosing_loops: a task outlived its cancel by {PATIENCE:.0f} s: {task!r}\n"
                 f"{_stack(task)}")
        for _ in range(AGAIN):
            for task in pending:
                task.cancel()
            _, pending = loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
            if not pending:
                _say("closing_loops: it ended after another cancel\n")
                break
    # What `asyncio.runners._cancel_all_tasks` does once every task has ended (or, if one
    # never does, where the worker waits as it did before, its stack now on record).
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception during asyncio.run() shutdown",
                "exception": task.exception(), "task": task})


def install(fd: int | None) -> None:
    """Bound every `asyncio.Runner`'s closing from now on; write to `fd` (a copy of the
    original stderr) when one is given."""
    global _say
    if fd is not None:
        stream = os.fdopen(os.dup(fd), "w", buffering=1)
        _say = stream.write
    asyncio.runners._cancel_all_tasks = _cancel_all_tasks  # type: ignore[attr-defined]
