"""A worker process for the multi-process SQLite tests: `python process.py ROLE FILE DIR ...`.

Each role opens FILE, then waits at a start line (it writes `DIR/ready-<pid>` and waits for
`DIR/go`) so that every process of a test starts its real work at the same moment, and prints
one JSON object on stdout. A role that fails prints nothing and exits non-zero with the error
on stderr, which the test shows.

| role        | does                                                                     |
|-------------|--------------------------------------------------------------------------|
| `migrate`   | opens and migrates a fresh file, then claims, records and queues once     |
| `claim`     | tries to claim each of N workflows once, all at once                      |
| `take`      | takes deliveries from the queue until it stays empty, answering each      |
| `durable`   | the same through `SqliteDurable.take` (take and claim), finishing each    |
| `write`     | supplies, appends and makes ready N times on its own workflows            |
| `die`       | takes a delivery, claims it, records a step, and SIGKILLs itself          |
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from durability.sqlite import (
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteDurable,
    SqliteScheduler,
    migrate,
    open_database,
)

LONG = timedelta(seconds=30)


def start_line(directory: Path) -> None:
    (directory / f"ready-{os.getpid()}").touch()
    give_up = time.monotonic() + 60
    while not (directory / "go").exists():
        if time.monotonic() > give_up:
            raise SystemExit("nobody said go")
        time.sleep(0.001)


async def role_migrate(path: str, directory: Path, label: str) -> object:
    start_line(directory)
    database = await open_database(path)
    try:
        await migrate(database)
        checkpointer = SqliteCheckpointer(database)
        scheduler = SqliteScheduler(database, queue="migrate")
        workflow = f"migrated-{label}"
        holder = await checkpointer.claim(workflow, LONG, LONG)
        assert holder is not None
        await checkpointer.record(holder, "step", label)
        await checkpointer.release(holder)
        await scheduler.make_ready(workflow)
        return {"workflow": workflow}
    finally:
        await database.close()


async def role_claim(path: str, directory: Path, count: str) -> object:
    database = await open_database(path)
    try:
        checkpointer = SqliteCheckpointer(database)
        start_line(directory)
        workflows = [f"contested-{n}" for n in range(int(count))]
        passes = await asyncio.gather(
            *(checkpointer.claim(workflow, LONG, LONG) for workflow in workflows)
        )
        return {"won": [p.workflow for p in passes if p is not None]}
    finally:
        await database.close()


async def role_take(path: str, directory: Path) -> object:
    database = await open_database(path)
    try:
        scheduler = SqliteScheduler(database, lease=LONG, poll=timedelta(milliseconds=5))
        start_line(directory)
        taken: list[str] = []

        async def reader() -> None:
            while (delivery := await scheduler.next_ready(timedelta(milliseconds=300))):
                taken.append(delivery.workflow)
                await scheduler.done(delivery)

        await asyncio.gather(*(reader() for _ in range(4)))
        return {"taken": taken}
    finally:
        await database.close()


async def role_durable(path: str, directory: Path) -> object:
    database = await open_database(path)
    try:
        durable = SqliteDurable(
            SqliteCheckpointer(database),
            SqliteScheduler(database, lease=LONG, poll=timedelta(milliseconds=5)),
        )
        start_line(directory)
        taken: list[str] = []
        unclaimed: list[str] = []

        async def reader() -> None:
            while (found := await durable.take(timedelta(milliseconds=300), LONG, LONG)):
                taken.append(found.delivery.workflow)
                if found.holder is None:
                    unclaimed.append(found.delivery.workflow)
                    await durable.scheduler.done(found.delivery)
                else:
                    await durable.checkpointer.record(found.holder, "by", os.getpid())
                    await durable.finish(found.holder, found.delivery)

        await asyncio.gather(*(reader() for _ in range(4)))
        return {"taken": taken, "unclaimed": unclaimed}
    finally:
        await database.close()


async def role_write(path: str, directory: Path, label: str, count: str) -> object:
    database: SqliteDatabase = await open_database(path)
    try:
        durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))
        start_line(directory)
        for n in range(int(count)):
            workflow = f"{label}-{n % 10}"
            await durable.arrive(workflow, f"key-{n}", n)
            await durable.deliver(workflow, {"n": n})
            await durable.scheduler.make_ready(f"{label}-solo-{n}")
        return {"written": int(count)}
    finally:
        await database.close()


async def role_die(path: str, directory: Path, lease_ms: str) -> object:
    database = await open_database(path)
    lease = timedelta(milliseconds=int(lease_ms))
    scheduler = SqliteScheduler(database, lease=lease)
    checkpointer = SqliteCheckpointer(database)
    delivery = await scheduler.next_ready(timedelta(seconds=5))
    assert delivery is not None
    holder = await checkpointer.claim(delivery.workflow, LONG, lease)
    assert holder is not None
    await checkpointer.record(holder, "charged", True)
    print(json.dumps({"workflow": holder.workflow, "token": holder.token}), flush=True)
    # Mid-pass, with the delivery and the claim both held: no release, no done, no goodbye.
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


ROLES = {
    "migrate": role_migrate,
    "claim": role_claim,
    "take": role_take,
    "durable": role_durable,
    "write": role_write,
    "die": role_die,
}


def main() -> None:
    role, path, directory, *rest = sys.argv[1:]
    result = asyncio.run(ROLES[role](path, Path(directory), *rest))  # type: ignore[operator]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
