"""The workflow bodies the lab runs, by name: each experiment's workload, written once.

A body reads its parameters from the value it was submitted with (`order`), so one worker
process can run every variant an experiment asks for. `notify` is set by the agent that runs
the body, so a body can tell the lab the moment it reached a point worth measuring from (the
takeover experiment kills a worker there).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from durability import Effect, Run, as_dict, as_int, as_text
from durability.failures import FAILURE

__all__ = ["BODIES", "notify"]


def _silent(event: str, workflow: str) -> None:
    return None


#: Called by a body as `notify("holding", workflow)`; the agent replaces it with its own.
notify: Callable[[str, str], None] = _silent


async def one_step(run: Run) -> object:
    """The smallest real workflow: one step that records a small result."""
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


async def waker(run: Run) -> object:
    """Sleeps `wakes` times for `nap_ms` each (one step between naps): a workload whose every
    wakeup goes through the queue again, which is what makes a stream grow."""
    order = await run.awaiting("order", as_dict)
    wakes, nap = int(str(order.get("wakes", 10))), int(str(order.get("nap_ms", 200)))
    for n in range(wakes):
        await run.step(f"work:{n}", functools.partial(int, n), as_int)
        await run.sleep(f"nap:{n}", timedelta(milliseconds=nap))
    return wakes


async def holder(run: Run) -> object:
    """For the takeover experiment: a step that takes `hold_s` seconds. With phase
    `after-write` a quick step is recorded first and the hold is the second step, so the lab
    can kill the worker the moment that write has landed; with `mid-step` the hold is the
    first step, and the lab kills the worker while it runs."""
    order = await run.awaiting("order", as_dict)
    hold = float(str(order.get("hold_s", 30)))
    workflow = run.workflow

    async def holding() -> int:
        notify("holding", workflow)
        await asyncio.sleep(hold)
        return 1

    if order.get("phase") == "after-write":
        await run.step("first", lambda: 1, as_int)
    return await run.step("held", holding, as_int)


async def poked(run: Run) -> object:
    """For the wakeup race: the first pass holds for `hold_ms` in a step, then waits for
    `poke:1`. A poke that lands mid-pass is not in the records the pass was claimed with, so
    the pass blocks, and only the wakeup the poke brought can start the pass that records
    `saw` (a body that takes the same path on every pass, as the determinism guard asks)."""
    order = await run.awaiting("order", as_dict)
    hold = float(str(order.get("hold_ms", 20))) / 1000
    notify("holding", run.workflow)

    async def holding() -> int:
        await asyncio.sleep(hold)
        return 0

    await run.step("held", holding, as_int)
    await run.awaiting("poke:1", as_int)
    return await run.step("saw", lambda: 1, as_int)


class Flaky(RuntimeError):
    """The chaos body's step failing on purpose, to be retried (see `chaos`)."""


def on_purpose(record: logging.LogRecord) -> bool:
    """A logging filter for the chaos run: drops the line of a `Flaky` step (it fails on
    purpose) and of a store that went away (the run cuts and restarts it on purpose)."""
    from durability.connect import unavailable

    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, Flaky) and not (error is not None and unavailable(error))


def effect_log(directory: str, workflow: str, step: str) -> str:
    """Perform the chaos body's external effect: one line appended to this process's log
    (`O_APPEND`, one `write`, so a SIGKILL leaves whole lines; the kernel keeps what was
    written when the process dies). Returns the nonce the execution wrote, its result."""
    nonce = uuid.uuid4().hex[:12]
    line = json.dumps({"workflow": workflow, "step": step, "nonce": nonce, "pid": os.getpid(),
                       "at": time.time_ns()}, separators=(",", ":")) + "\n"
    fd = os.open(os.path.join(directory, f"effects-{os.getpid()}.log"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return nonce


def counting(store: str, counters: str, workflow: str) -> Effect:
    """The chaos body's `transact` effect: add one to the workflow's counter in the store
    itself (`counters` names the Redis key prefix, or the SQL table), returning the new count."""
    if store == "redis":
        from durability.redis import LuaEffect, workflow_tag

        return LuaEffect("return redis.call('INCR', KEYS[1])",
                         [f"{counters}:{workflow_tag(workflow)}"])
    if store == "postgres":
        from durability.postgres import PostgresEffect

        return PostgresEffect(f"INSERT INTO {counters} AS c (workflow, n) VALUES (%s, 1) ON "
                         "CONFLICT (workflow) DO UPDATE SET n = c.n + 1 RETURNING n",
                         (workflow,))
    if store == "sqlite":
        from durability.sqlite import SqliteEffect

        return SqliteEffect(f"INSERT INTO {counters} (workflow, n) VALUES (?, 1) ON CONFLICT "
                            f"(workflow) DO UPDATE SET n = n + 1 RETURNING n", (workflow,))
    raise ValueError(f"no counter effect for store {store!r}")


async def chaos(run: Run) -> object:
    """The chaos run's workload, shaped by its order:

    - `segments` times: a step with an external effect (`effect_log`, then `hold_ms` before
      its answer), a `transact` that counts in the store, a sleep of `naps_ms[i]` (none: 0);
    - an approval if `approval`; `messages` inbox messages, read as they come;
    - a step that fails (`Flaky`) its first `fails` attempts: the workers' retry policy tries
      it again after a backoff, and each failed attempt leaves its record in the checkpoint,
      which is how the step counts them (so a different worker continues the count);
    - a last step `done` recording every value the passes saw, so the audit can check each
      was the one recorded.
    """
    order = await run.awaiting("order", as_dict)
    workflow, log = run.workflow, str(order["log"])
    store, counters = str(order["store"]), str(order["counters"])
    seen: list[str] = []
    listed = order.get("naps_ms", [])
    naps = [int(str(n)) for n in listed] if isinstance(listed, list) else []
    hold = float(str(order.get("hold_ms", 0))) / 1000

    async def performed(step: str) -> str:
        nonce = effect_log(log, workflow, step)
        await asyncio.sleep(hold)  # the effect's answer takes a while, as a real one does
        return nonce

    for i in range(int(str(order.get("segments", 1)))):
        seen.append(await run.step(f"step:{i}", functools.partial(performed, f"step:{i}"),
                                   as_text))
        seen.append(str(await run.transact(f"count:{i}", counting(store, counters, workflow),
                                           as_int)))
        if i < len(naps) and naps[i] > 0:
            await run.sleep(f"nap:{i}", timedelta(milliseconds=naps[i]))
    if order.get("approval"):
        seen.append(await run.awaiting("approved", as_text))
    cursor: str | None = None
    read, wanted = 0, int(str(order.get("messages", 0)))
    while read < wanted:
        entries = await run.receive(f"read:{read}", after=cursor)
        cursor = entries[-1].key
        read += len(entries)
        seen.extend(str(entry.value) for entry in entries)
    fails = int(str(order.get("fails", 0)))
    if fails:
        retries = sum(1 for key in run.records if key.startswith(FAILURE))

        def flaky() -> str:
            nonce = effect_log(log, workflow, "flaky")
            if retries < fails:
                raise Flaky(f"{workflow}: failing on purpose ({retries} of {fails} retries)")
            return nonce

        seen.append(await run.step("flaky", flaky, as_text))
    return await run.step("done", lambda: "|".join(seen), as_text)


async def soak(run: Run) -> object:
    """The soak's small workflow: a step, a sleep of `nap_ms` (so each workflow goes through
    the queue twice: once submitted, once woken), and a second step."""
    order = await run.awaiting("order", as_dict)
    first = await run.step("first", lambda: 1, as_int)
    nap = int(str(order.get("nap_ms", 100)))
    if nap > 0:
        await run.sleep("nap", timedelta(milliseconds=nap))
    return await run.step("second", functools.partial(int, first + 1), as_int)


BODIES: dict[str, Callable[[Run], Awaitable[object]]] = {
    "chaos": chaos,
    "soak": soak,
    "one-step": one_step,
    "waker": waker,
    "holder": holder,
    "poked": poked,
}
