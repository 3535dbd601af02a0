"""`stop_if_cancelled`: a cancellation a driver swallowed, raised again where a loop can see it.

On Python 3.11 `asyncio.wait_for` returns normally when it is cancelled just as what it waits
for finishes. redis-py sends every command through it once `socket_timeout` is set, and
psycopg_pool waits for a connection through it: the cancel is gone, and only the task's
`cancelling()` count says it was asked. A loop that then goes round again never stops, and
whoever cancelled it waits for good. So every loop the library runs calls this after each
store call it awaits (and before it sleeps): a task that was asked to stop, stops.
"""

from __future__ import annotations

import asyncio

__all__ = ["pause", "stop_if_cancelled"]


def stop_if_cancelled() -> None:
    """Raise `CancelledError` if the running task was cancelled and the cancel went missing.

    Inside `asyncio.timeout` that ran out, the raise is what the timeout turns into its
    `TimeoutError`, as it would have the swallowed cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def pause(seconds: float) -> None:
    """`asyncio.sleep(seconds)` in a loop that must stop when cancelled, whatever the store
    calls before it swallowed."""
    stop_if_cancelled()
    await asyncio.sleep(seconds)
