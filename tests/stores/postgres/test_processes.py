"""The Postgres store across OS processes: racing claims, racing takes, racing migrations, and a
worker that dies mid-pass. Each racer is `store_process.py`, started with `sys.executable`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from durability.postgres import PostgresCheckpointer, PostgresScheduler
from durability.values import Reclaimed

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

SCRIPT = Path(__file__).with_name("store_process.py")


def _racers(count: int, *args: str) -> list[str]:
    """Run `count` copies of the script at once; return each one's stdout."""
    racers = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = []
    for racer in racers:
        out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
        outputs.append(out)
    return outputs


def _start() -> str:
    # Far enough ahead that every interpreter has started and connected before it.
    return str(time.time() + 2.5)


async def test_two_processes_claiming_at_once_admit_exactly_one(database_url: str) -> None:
    workflows = [f"pg-race-{uuid.uuid4().hex}" for _ in range(20)]
    outputs = await asyncio.to_thread(_racers, 2, "claim", database_url, _start(), *workflows)
    winners: Counter[str] = Counter()
    for out in outputs:
        lines = out.split()
        for workflow, token in zip(lines[::2], lines[1::2], strict=True):
            if token != "-":
                winners[workflow] += 1
    assert winners == Counter({workflow: 1 for workflow in workflows})


@pytest.mark.slow
async def test_two_processes_taking_from_one_queue_take_each_workflow_once(
    database_url: str, pool: Pool
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    scheduler = PostgresScheduler(pool=pool, queue=queue, notify=False)
    workflows = [f"pg-take-{uuid.uuid4().hex}" for _ in range(60)]
    for workflow in workflows:
        await scheduler.make_ready(workflow)
    outputs = await asyncio.to_thread(_racers, 2, "take", database_url, _start(), queue)
    taken = [line for out in outputs for line in out.split()]
    assert sorted(taken) == sorted(workflows)


@pytest.mark.slow
async def test_migrating_from_several_processes_at_once_succeeds_everywhere(
    scratch_database: Callable[[], str], make_pool: Callable[..., Awaitable[Pool]]
) -> None:
    url = scratch_database()
    outputs = await asyncio.to_thread(_racers, 4, "migrate", url, _start())
    assert [out.strip() for out in outputs] == ["migrated"] * 4
    pool = await make_pool(url)
    checkpointer = PostgresCheckpointer(pool=pool)
    assert await checkpointer.supply("pg-after-migrate", "k", 1)
    assert await checkpointer.load("pg-after-migrate") == {"k": 1}


async def test_a_worker_killed_mid_pass_loses_its_workflow_after_the_lease(
    database_url: str, pool: Pool
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    workflow = f"pg-dead-{uuid.uuid4().hex}"
    lease = timedelta(milliseconds=600)
    scheduler = PostgresScheduler(pool=pool, queue=queue, lease=lease, notify=False)
    await scheduler.make_ready(workflow)
    dying = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "hold", database_url, queue, "600",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert dying.stdout is not None
        line = (await dying.stdout.readline()).decode()
        held, held_workflow, token = line.split()
        assert (held, held_workflow) == ("held", workflow)
        # Mid-pass: the workflow is neither deliverable nor claimable while the holder lives.
        assert await scheduler.next_ready(timedelta(milliseconds=100)) is None
        claimed = await PostgresCheckpointer(pool=pool).claim(workflow, lease, lease)
        assert claimed is None
    finally:
        dying.kill()
        await dying.wait()
    # Visibility does the reclaimer's job: nothing to take over, nothing to wait for.
    assert await scheduler.reclaiming(lease) == Reclaimed(None, None)
    delivery = await scheduler.next_ready(timedelta(seconds=5))
    assert delivery is not None and delivery.workflow == workflow
    checkpointer = PostgresCheckpointer(pool=pool)
    holder = None
    for _ in range(30):  # the dead pass's claim lapses one `alive` after its last sign of life
        holder = await checkpointer.claim(workflow, timedelta(minutes=1), lease)
        if holder is not None:
            break
        await asyncio.sleep(0.1)
    assert holder is not None
    assert holder.token > int(token)
    await scheduler.done(delivery)
