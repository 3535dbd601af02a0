"""The worker process: `durability-worker --store URL` (or `python -m integration.worker`).

It opens the store named by `--store`, runs `work` with the order body
(`integration.workflow.OrderWorkflow`) until SIGTERM or SIGINT, then drains: cancelling `work`
hands every running workflow back to the queue at once, so another worker picks it up without
waiting out a lease. Run as many as you like; they share nothing but the store.

`memory://` is refused here, because a memory store lives in one process: run
`durability-api --store memory://`, which runs a worker beside the API.
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

from durability import Blocked, Completed, Durable, Event, Sleeping, work
from durability.connect import open_durable
from integration import cli
from integration.effects import Gateway, Warehouse
from integration.log import configure, fields
from integration.workflow import Effects, OrderWorkflow

log = logging.getLogger("integration.worker")


def effects_from(args: argparse.Namespace) -> Effects:
    journal = Path(args.effects_log) if args.effects_log else None
    return Effects(
        gateway=Gateway(journal=journal, slow=args.capture_delay),
        warehouse=Warehouse(journal=journal),
        settlement=args.settlement,
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
                extra=fields(workflow=event.workflow, error=repr(event.error)),
            )
        case "contended" | "fenced" | "expired":
            log.warning(f"pass {event.kind}", extra=fields(workflow=event.workflow))


async def serve(
    durable: Durable,
    effects: Effects,
    *,
    pool: int = 16,
    tick: timedelta = timedelta(seconds=1),
) -> None:
    """Run the order workflows over `durable` until cancelled (which hands them back)."""
    body = OrderWorkflow(durable.checkpointer, effects)
    await work(durable, body, pool=pool, tick=tick, observer=observe)


async def _until_signalled(task: asyncio.Task[None]) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def run(args: argparse.Namespace) -> None:
    async with open_durable(args.store, lease=args.lease, housekeeping=True) as durable:
        log.info(
            "worker ready",
            extra=fields(store=redacted(args.store), pool=args.pool, lease=args.lease),
        )
        task = asyncio.create_task(
            serve(durable, effects_from(args), pool=args.pool, tick=args.tick)
        )
        await _until_signalled(task)
        log.info("worker drained", extra=fields(store=redacted(args.store)))


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
