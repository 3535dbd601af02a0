"""A separate OS process driving the Postgres store, for tests where "another process" is the
point: racing claims, racing takes, racing migrations, a worker that dies mid-pass.

    python store_process.py claim   URL START WF...      prints one line per WF: token or -
    python store_process.py take    URL START QUEUE      prints each workflow it took
    python store_process.py migrate URL START
    python store_process.py hold    URL QUEUE LEASE_MS   takes one delivery, claims it, prints
                                                         "held WF TOKEN", then hangs until killed

START is a wall-clock time (time.time()) every racer sleeps until after connecting, so the
processes hit the server together rather than one interpreter start-up apart.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from psycopg_pool import AsyncConnectionPool

from durability.postgres import (
    PostgresCheckpointer,
    PostgresScheduler,
    migrate,
)


async def _wait_until(start: float) -> None:
    await asyncio.sleep(max(0.0, start - time.time()))


async def main(command: str, url: str, *args: str) -> None:
    pool = AsyncConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True},
                               open=False)
    await pool.open(wait=True)
    try:
        if command == "claim":
            checkpointer = PostgresCheckpointer(pool=pool)
            start, *workflows = args
            await _wait_until(float(start))
            for workflow in workflows:
                held = await checkpointer.claim(workflow, timedelta(minutes=1),
                                                timedelta(minutes=1))
                print(workflow, "-" if held is None else held.token, flush=True)
        elif command == "take":
            start, queue = args
            scheduler = PostgresScheduler(pool=pool, queue=queue, notify=False)
            await _wait_until(float(start))
            while (delivery := await scheduler.next_ready(timedelta(milliseconds=300))):
                print(delivery.workflow, flush=True)
        elif command == "migrate":
            (start,) = args
            await _wait_until(float(start))
            await migrate(pool)
            print("migrated", flush=True)
        elif command == "hold":
            queue, lease_ms = args
            lease = timedelta(milliseconds=int(lease_ms))
            scheduler = PostgresScheduler(pool=pool, queue=queue, lease=lease, notify=False)
            delivery = await scheduler.next_ready(timedelta(seconds=5))
            assert delivery is not None
            holder = await PostgresCheckpointer(pool=pool).claim(
                delivery.workflow, timedelta(minutes=1), lease
            )
            assert holder is not None
            print("held", delivery.workflow, holder.token, flush=True)
            await asyncio.sleep(3600)  # mid-pass, until the test kills us
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
