"""`result` on Postgres: every watcher of a store's endings shares one LISTEN connection, and a
result still arrives when that connection is cut (the listener reconnects; meanwhile `result`
looks now and then). Connections are counted on the server, by the pool's application_name."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from durability.endings import LOOK, completion, ending_key, result
from durability.postgres import PostgresCheckpointer

if TYPE_CHECKING:
    from tests.stores.postgres.conftest import MakePool

WITHIN = timedelta(seconds=30)
PATIENCE = 20.0
LISTENING = """
SELECT pid FROM pg_stat_activity
WHERE application_name = %s AND query LIKE 'LISTEN %%' AND state = 'idle'
"""


async def listening(checkpointer: PostgresCheckpointer, name: str) -> list[int]:
    """The backends of `name` (the pool's application_name) that sit in LISTEN."""
    async with checkpointer.pool.connection() as conn:
        cursor = await conn.execute(LISTENING, (name,))
        return [int(row[0]) for row in await cursor.fetchall()]


async def until_listening(checkpointer: PostgresCheckpointer, name: str, count: int,
                          gone: int | None = None) -> list[int]:
    """Wait for `count` listening backends of `name`, none of them `gone` (a terminated backend
    stays in pg_stat_activity a moment after pg_terminate_backend returns)."""
    async with asyncio.timeout(PATIENCE):
        while True:
            found = await listening(checkpointer, name)
            if len(found) == count and gone not in found:
                return found
            await asyncio.sleep(0.05)


async def ended(checkpointer: PostgresCheckpointer, workflow: str, value: object) -> None:
    await checkpointer.conclude(workflow, ending_key({}), completion(value))


async def test_a_hundred_results_wait_on_one_connection(make_pool: MakePool) -> None:
    name = f"results-{uuid.uuid4().hex[:8]}"
    checkpointer = PostgresCheckpointer(pool=await make_pool(application_name=name))
    workflows = [f"{name}-{n}" for n in range(100)]
    waiting = [asyncio.create_task(result(checkpointer, w, WITHIN)) for w in workflows]
    await until_listening(checkpointer, name, 1)
    most = 1
    for _ in range(20):  # a while of all of them waiting: never a second connection
        await asyncio.sleep(0.05)
        most = max(most, len(await listening(checkpointer, name)))
    assert not any(task.done() for task in waiting)
    assert most == 1

    for n, workflow in enumerate(workflows):
        await ended(checkpointer, workflow, n)
    async with asyncio.timeout(PATIENCE):
        assert await asyncio.gather(*waiting) == list(range(100))
    await until_listening(checkpointer, name, 0)  # nobody waits: the connection goes


async def test_a_result_arrives_when_the_listening_connection_is_cut(
    make_pool: MakePool,
) -> None:
    name = f"results-{uuid.uuid4().hex[:8]}"
    checkpointer = PostgresCheckpointer(pool=await make_pool(application_name=name))
    workflow, other = f"{name}-cut", f"{name}-later"
    waiting = asyncio.create_task(result(checkpointer, workflow, WITHIN))
    later = asyncio.create_task(result(checkpointer, other, WITHIN))
    [cut] = await until_listening(checkpointer, name, 1)

    async with checkpointer.pool.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (cut,))
    await until_listening(checkpointer, name, 1, gone=cut)  # the listener connects again
    await ended(checkpointer, workflow, "after the cut")

    async with asyncio.timeout(PATIENCE):
        assert await waiting == "after the cut"
    await ended(checkpointer, other, "later")
    async with asyncio.timeout(PATIENCE):
        assert await later == "later"


async def test_a_waiter_that_comes_as_the_last_one_leaves_is_woken_by_its_ending(
    make_pool: MakePool,
) -> None:
    # The last waiter's `result` returns without waiting for its listener to close; the next
    # one, coming at once, listens on a connection of its own and is woken by its ending, not
    # by a look `LOOK` later.
    name = f"results-{uuid.uuid4().hex[:8]}"
    checkpointer = PostgresCheckpointer(pool=await make_pool(application_name=name))
    for n in range(3):
        done, pending = f"{name}-{n}-done", f"{name}-{n}-pending"
        await ended(checkpointer, done, n)
        assert await result(checkpointer, done, WITHIN) == n  # its listener closes behind it
        waiting = asyncio.create_task(result(checkpointer, pending, WITHIN))
        await until_listening(checkpointer, name, 1)
        await asyncio.sleep(0.2)  # the watcher's row written, its first look taken
        assert not waiting.done()
        await ended(checkpointer, pending, -n)
        assert await asyncio.wait_for(waiting, LOOK.total_seconds() / 2) == -n
    await until_listening(checkpointer, name, 0)  # nobody waits: the connection goes
