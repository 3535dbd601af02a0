"""The worker process: `durability-worker --store URL` (or `python -m integration.worker`).

It opens the store named by `--store` (trying again, with a growing pause, while the store is
not there yet, so the processes of a deployment may start in any order), and runs `work` with
the order body (`integration.workflow.OrderWorkflow`) until SIGTERM or SIGINT. Then it drains:
it takes nothing new, lets the passes running finish for up to `--grace` (so a deploy re-runs
none of their steps), hands back what is left and exits; a second signal hands everything back
at once. Run as many as you like; they share nothing but the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from datetime import timedelta
from pathlib import Path

from durability import Blocked, Completed, Durable, Event, Limit, Sleeping, work
from durability.cancelling import stop_if_cancelled
from durability.connect import open_durable, unavailable
from durability.failures import ONCE, Retry
from durability.schedules import Schedules
from durability.waits import set_within
from durability.worker import GRACE
from integration import cli
from integration.effects import GATEWAY, Gateway, Warehouse
from integration.log import configure, fields
from integration.nightly import NIGHTLY
from integration.workflow import Effects, OrderWorkflow

log = logging.getLogger("integration.worker")

#: The first and the longest pause between two tries to open a store that is not there yet.
FIRST_TRY_AGAIN = timedelta(milliseconds=500)
LONGEST_TRY_AGAIN = timedelta(seconds=30)


def effects_from(args: argparse.Namespace) -> Effects:
    journal = Path(args.effects_log) if args.effects_log else None
    return Effects(
        gateway=Gateway(journal=journal, slow=args.capture_delay, declines=args.declines),
        warehouse=Warehouse(journal=journal),
        settlement=args.settlement,
        gateway_limit=None if args.gateway_limit is None else Limit(GATEWAY, args.gateway_limit),
    )


def observe(event: Event) -> None:
    """Log one lifecycle event of a delivery as a key=value line."""
    match event.kind:
        case "delivered":
            log.debug("delivered", extra=fields(workflow=event.workflow))
        case "started":
            log.info("pass started", extra=fields(workflow=event.workflow))
        case "outcome":
            match event.outcome:
                case Sleeping(key=key, due=due):
                    described = fields(
                        workflow=event.workflow, outcome="sleeping", key=key, due=due
                    )
                case Blocked(waiting=waiting, listening=listening):
                    described = fields(
                        workflow=event.workflow,
                        outcome="blocked",
                        waiting=",".join(sorted(waiting)) or "-",
                        listening=",".join(sorted(listening)) or "-",
                    )
                case Completed():
                    described = fields(workflow=event.workflow, outcome="completed")
                case None:
                    described = fields(workflow=event.workflow, outcome="none")
            log.info("pass ended", extra=described)
        case "failed":
            log.error(
                "pass failed",
                extra=fields(
                    workflow=event.workflow, attempt=event.attempt, error=repr(event.error)
                ),
            )
        case "retrying":
            log.warning(
                "retrying",
                extra=fields(workflow=event.workflow, attempt=event.attempt, due=event.due),
            )
        case "dead":
            log.error(
                "workflow failed",
                extra=fields(workflow=event.workflow, attempt=event.attempt),
            )
        case "contended" | "fenced" | "expired":
            log.warning(f"pass {event.kind}", extra=fields(workflow=event.workflow))
        case "unavailable":
            log.warning(
                "pass handed back: the store did not answer",
                extra=fields(workflow=event.workflow, error=repr(event.error)),
            )


async def serve(
    durable: Durable,
    effects: Effects,
    *,
    pool: int = 16,
    tick: timedelta = timedelta(seconds=1),
    stop: asyncio.Event | None = None,
    grace: timedelta = GRACE,
    retry: Retry = ONCE,
    nightly: str | None = None,
) -> None:
    """Run the order workflows over `durable` until `stop` is set (a drain of up to `grace`)
    or until cancelled (which hands them back at once). A failed pass is tried again as
    `retry` says (by default not at all: the order fails, and `POST /orders/{id}/retry`
    brings it back). `nightly`, a cron expression, keeps the schedule `nightly-report` on it
    (`integration.nightly`): adding it at every start is harmless, since adding a schedule
    unchanged keeps it as it stands."""
    if nightly is not None:
        await Schedules(durable).add(NIGHTLY, NIGHTLY, {}, cron=nightly)
    body = OrderWorkflow(durable.checkpointer, effects)
    await work(
        durable,
        body,
        pool=pool,
        tick=tick,
        observer=observe,
        stop=stop,
        grace=grace,
        retry=retry,
    )


def retry_from(args: argparse.Namespace) -> Retry:
    """The retry policy the worker options ask for."""
    if args.attempts == 1:
        return ONCE
    return Retry(attempts=args.attempts, initial=args.backoff)


async def opened(
    stack: contextlib.AsyncExitStack, url: str, lease: timedelta, stop: asyncio.Event
) -> Durable | None:
    """The store `url` names, opened on `stack`: tried again with a doubling pause (logged)
    while it is unavailable (`durability.connect.unavailable`: not up yet, unreachable, too
    slow), so the worker may start before its store. `None` if `stop` is set first. Any other
    error (a URL no store answers to, say) is raised at once: waiting will not change it."""
    pause = FIRST_TRY_AGAIN
    tries = 0
    while not stop.is_set():
        try:
            return await stack.enter_async_context(
                open_durable(url, lease=lease, housekeeping=True)
            )
        except Exception as error:
            if not unavailable(error):
                raise
            tries += 1
            log.warning(
                "store not ready",
                extra=fields(store=redacted(url), tries=tries, error=repr(error), again_in=pause),
            )
        stop_if_cancelled()
        await set_within(stop, pause.total_seconds())
        pause = min(pause * 2, LONGEST_TRY_AGAIN)
    return None


async def run(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def signalled(signum: signal.Signals) -> None:
        if stop.is_set() and main is not None:
            log.warning("signalled again: handing back at once", extra=fields(signal=signum.name))
            main.cancel()
            return
        log.info("draining", extra=fields(signal=signum.name, grace=args.grace))
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signalled, signum)
    store = redacted(args.store)
    try:
        async with contextlib.AsyncExitStack() as stack:
            durable = await opened(stack, args.store, args.lease, stop)
            if durable is None:
                log.info("worker stopped before its store answered", extra=fields(store=store))
                return
            log.info("worker ready", extra=fields(store=store, pool=args.pool, lease=args.lease))
            await serve(
                durable,
                effects_from(args),
                pool=args.pool,
                tick=args.tick,
                stop=stop,
                grace=args.grace,
                retry=retry_from(args),
                nightly=args.nightly,
            )
            log.info("worker drained", extra=fields(store=store))
    except asyncio.CancelledError:
        log.info("worker stopped", extra=fields(store=store))
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def redacted(url: str) -> str:
    """A store URL without its password, for log lines."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, credentials = head.partition("://")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{tail}" if user else f"{scheme}://{tail}"


def main(argv: list[str] | None = None) -> None:
    made = cli.parser("durability-worker", "Run order workflows from the store's queue.")
    cli.add_worker_options(made)
    args = made.parse_args(argv)
    configure(args.log_level)
    # A memory store lives in one process, so a worker process of its own would serve an empty
    # store: the API runs its worker beside it instead.
    if args.store.startswith("memory:"):
        made.error(
            "memory:// lives in one process; run `durability-api --store memory://`,"
            " which runs a worker beside the API"
        )
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
