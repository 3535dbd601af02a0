"""`python -m experiments.harness.agent`: a process that opens one of our backends for the lab.

It speaks `protocol`: `open` a store by URL, then any of `work` (run `work()` with a body from
`bodies`, observed), `submit` (an open-loop schedule of `arrive`s), `preload`, `mark` (CPU, what
the store sent, what the worker saw, whether it still works), `footprint`, `probe` (an
experiment's own in-process measurement, from the module the request names), `arrive`,
`deliver`, `load` (checkpoints), `verify` (the Redis wipe marker), `delete` and `stop`. It
imports only the public API: `durability`, `open_durable`, `work`'s `Event`s and
`durable.traffic`; a backend of someone's own is opened by the opener its `open` names
(`registry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import faulthandler
import importlib
import logging
import signal
import sys
import traceback
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from durability import Completed, Contended, Durable, Event, Inspectable, Measured, Retry, work
from durability.connect import open_durable
from durability.failures import leaves
from experiments.harness import bodies
from experiments.harness.protocol import (
    AgentLoop,
    Message,
    cpu_seconds,
    now_ns,
    open_loop,
    schedule,
    supervised,
)
from experiments.harness.registry import load


def _ms(value: object, default: float | None = None) -> timedelta | None:
    if value is None:
        return None if default is None else timedelta(milliseconds=default)
    return timedelta(milliseconds=float(str(value)))


class Agent:
    def __init__(self, loop: AgentLoop) -> None:
        self.loop = loop
        self.stack = contextlib.AsyncExitStack()
        self.durable: Durable | None = None
        self.worker: asyncio.Task[None] | None = None
        self.started: dict[str, int] = {}
        self.kinds: Counter[str] = Counter()
        self.first_started: int | None = None
        self.last_outcome: int | None = None
        self.live = False
        self.progress_every = 0
        self.emitting: frozenset[str] = frozenset()
        #: Whether `started` keeps each workflow's first start (the experiments that read it
        #: back); the soak turns it off, or this dict would be the growth its RSS shows.
        self.remember = True

    @property
    def store(self) -> Durable:
        if self.durable is None:
            raise RuntimeError("open a store first")
        return self.durable

    async def open(self, request: Message) -> Message:
        lease = _ms(request.get("lease_ms"), 30_000)
        assert lease is not None
        opener: Any = open_durable
        if request.get("opener"):  # a backend of someone's own (experiments.harness.registry)
            opener = load(str(request["opener"]), str(request.get("path") or ""))
        self.durable = await self.stack.enter_async_context(
            opener(
                request["url"],
                lease=lease,
                poll=_ms(request.get("poll_ms")),
                housekeeping=bool(request.get("housekeeping", False)),
            )
        )
        return {"ready": True}

    def observe(self, event: Event) -> None:
        self.kinds[event.kind] += 1
        at = int(event.at * 1e9)
        if event.kind == "started":
            if self.remember and event.workflow not in self.started:
                self.started[event.workflow] = at
            if self.first_started is None:
                self.first_started = at
            if self.live:
                self.loop.emit("started", workflow=event.workflow, at=at)
        elif event.kind == "outcome":
            self.last_outcome = at
            if "completed" in self.emitting and isinstance(event.outcome, Completed):
                self.loop.emit("completed", workflow=event.workflow, at=at)
            every = self.progress_every
            if every and self.kinds["outcome"] % every == 0:
                self.loop.emit("progress", outcomes=self.kinds["outcome"])
        elif event.kind == "failed" and "failed" in self.emitting:
            self.loop.emit("failed", workflow=event.workflow, at=at,
                           error=type(event.error).__name__)
        elif event.kind == "dead" and "dead" in self.emitting:
            self.loop.emit("dead", workflow=event.workflow, at=at)

    async def work(self, request: Message) -> Message:
        body = bodies.BODIES[request.get("body", "one-step")]
        if self.worker is not None:
            raise RuntimeError("already working: stop first")
        self.started, self.kinds = {}, Counter()
        self.first_started = self.last_outcome = None
        self.live = bool(request.get("live", False))
        self.remember = bool(request.get("remember", True))
        self.progress_every = int(request.get("progress_every", 0))
        self.emitting = frozenset(str(kind) for kind in request.get("emit", ()))
        if request.get("quiet"):
            # Under chaos the store's comings and goings are expected: warnings would bury
            # the run's own lines. Errors still show, a step failing on purpose does not.
            for name in ("durability", "psycopg", "redis"):
                logging.getLogger(name).setLevel(logging.ERROR)
            logging.getLogger("durability.worker").addFilter(bodies.on_purpose)
        options: dict[str, Any] = {}
        for name in ("tick", "within", "sweep"):
            value = _ms(request.get(f"{name}_ms"))
            if value is not None:
                options[name] = value
        if request.get("pool"):
            options["pool"] = int(request["pool"])
        if request.get("retry_attempts"):
            options["retry"] = Retry(attempts=int(request["retry_attempts"]),
                                     initial=timedelta(milliseconds=float(
                                         request.get("retry_initial_ms", 50))), jitter=0.2)
        self.worker = asyncio.create_task(work(self.store, body, observer=self.observe, **options))
        return {"working": True, "at": now_ns()}

    async def submit(self, request: Message) -> Message:
        prefix, value = str(request["prefix"]), request.get("value", {})
        offsets = schedule(float(request["rate"]), int(request["count"]), int(request["seed"]))
        submitted, answered = [0] * len(offsets), [0] * len(offsets)
        durable = self.store

        async def one(i: int) -> None:
            await durable.arrive(f"{prefix}-{i}", "order", value)

        await open_loop(one, offsets, submitted, answered)
        return {"submitted": submitted, "answered": answered}

    async def preload(self, request: Message) -> Message:
        prefix, count = str(request["prefix"]), int(request["count"])
        value = request.get("value", {})
        gate = asyncio.Semaphore(int(request.get("concurrency", 32)))
        durable = self.store

        async def one(i: int) -> None:
            async with gate:
                await durable.arrive(f"{prefix}-{i}", "order", value)

        began = now_ns()
        await asyncio.gather(*(one(i) for i in range(count)))
        return {"seconds": (now_ns() - began) / 1e9}

    async def mark(self, request: Message) -> Message:
        sent = self.store.traffic.snapshot() if hasattr(self.store, "traffic") else None
        return {
            "at": now_ns(),
            "cpu": cpu_seconds(),
            "requests": dict(sent.requests) if sent else {},
            "round_trips": sent.round_trips if sent else 0,
            "kinds": dict(self.kinds),
            "outcomes": self.kinds["outcome"],
            "first_started": self.first_started,
            "last_outcome": self.last_outcome,
            "wipes": getattr(self.store.scheduler, "wipes", None),
            "working": self.worker is not None and not self.worker.done(),
            "worker_error": self._worker_error(),
        }

    def _worker_error(self) -> str | None:
        """Why `work()` ended, if it ended on its own (it never should)."""
        if self.worker is None or not self.worker.done() or self.worker.cancelled():
            return None
        error = self.worker.exception()
        if error is None:
            return None
        found = leaves(error)
        said = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in found)
        where = "".join(traceback.format_exception(found[0])[-4:])
        return f"{type(error).__name__} ({said})\n{where}"

    async def trim(self, request: Message) -> Message:
        """Hand the allocator's free memory back to the system (glibc's `malloc_trim`) and say
        this process's RSS before and after, in KiB: growth that goes is free memory the
        allocator kept, not objects something holds. `trimmed` is False off glibc."""
        before = _rss_kib()
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            return {"trimmed": False, "rss_kib_before": before, "rss_kib_after": before}
        libc.malloc_trim(0)
        return {"trimmed": True, "rss_kib_before": before, "rss_kib_after": _rss_kib()}

    async def verify(self, request: Message) -> Message:
        """Ask the scheduler whether the store's data was wiped since it last looked (the
        Redis schedulers' marker; other stores have none: `wiped` is None)."""
        scheduler = self.store.scheduler
        check = getattr(scheduler, "verify", None)
        if check is None:
            return {"wiped": None, "wipes": None}
        wiped = bool(await check())
        return {"wiped": wiped, "wipes": getattr(scheduler, "wipes", None), "at": now_ns()}

    async def deliver(self, request: Message) -> Message:
        """One message into a workflow's inbox (and its wakeup)."""
        entry = await self.store.deliver(str(request["workflow"]), request.get("value"))
        return {"key": entry.key, "at": now_ns()}

    async def status(self, request: Message) -> Message:
        """`durable.status` of one workflow: its state, as the store tells it."""
        store = self.store
        if not isinstance(store, Inspectable):
            raise TypeError(f"{type(store).__name__} offers no status")
        standing = await store.status(str(request["workflow"]))
        return {"state": standing.state, "at": now_ns()}

    async def retry(self, request: Message) -> Message:
        """`durable.retry` of a failed workflow: whether it was failed and is queued again."""
        store = self.store
        if not isinstance(store, Inspectable):
            raise TypeError(f"{type(store).__name__} offers no retry")
        try:
            again = await store.retry(str(request["workflow"]))
        except Contended as error:
            # An error, not "nothing to retry": the claim in the way may be this caller's own
            # retry, cut off halfway (its record and `queued` written, its wakeup not), which
            # only asking again finishes. Answered here since `Contended` is no `Exception`:
            # unanswered, the caller would wait out its whole timeout before asking again.
            return {"error": f"Contended: {error}"}
        return {"retried": again, "at": now_ns()}

    async def load(self, request: Message) -> Message:
        """The checkpoints of the workflows named: their records, key by key."""
        loader = self.store.checkpointer
        found: dict[str, dict[str, object]] = {}
        for workflow in request["workflows"]:
            found[str(workflow)] = dict(await loader.load(str(workflow)))
        return {"checkpoints": found}

    async def footprint(self, request: Message) -> Message:
        scheduler = self.store.scheduler
        if not isinstance(scheduler, Measured):
            return {"parts": {}, "bytes": None}
        found = await scheduler.footprint()
        return {"at": now_ns(), "parts": dict(found.parts), "bytes": found.bytes}

    async def probe(self, request: Message) -> Message:
        module = importlib.import_module(str(request["module"]))
        rows = await module.probe(self.store, request.get("args", {}))
        return {"rows": rows}

    async def arrive(self, request: Message) -> Message:
        """`arrive`, or with `wake` false only `supply` (a value with no wakeup: the control
        that shows a lost wakeup is seen as lost)."""
        workflow, key, value = str(request["workflow"]), str(request["key"]), request.get("value")
        if request.get("wake", True):
            recorded = await self.store.arrive(workflow, key, value)
        else:
            recorded = await self.store.checkpointer.supply(workflow, key, value)
        return {"first": recorded.first, "at": now_ns()}

    async def records(self, request: Message) -> Message:
        return {"keys": list(await self.store.checkpointer.load(str(request["workflow"])))}

    async def delete(self, request: Message) -> Message:
        return {"records": await self.store.delete(str(request["workflow"]))}

    async def stop(self, request: Message) -> Message:
        if self.worker is not None:
            self.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.worker
            self.worker = None
        return {"started": self.started, "kinds": dict(self.kinds)}

    async def close(self, request: Message) -> Message:
        await self.stop(request)
        await self.stack.aclose()
        self.durable = None
        self.loop.stopping.set()
        return {"closed": True}


async def main() -> None:
    loop = AgentLoop()
    agent = Agent(loop)
    bodies.notify = lambda event, workflow: loop.emit(event, workflow=workflow, at=now_ns())
    for name in ("open", "work", "submit", "preload", "mark", "footprint", "probe", "arrive",
                 "records", "delete", "stop", "close", "verify", "deliver", "load", "retry",
                 "status", "trim"):
        loop.on(name, getattr(agent, name))
    try:
        await loop.run()
    finally:
        with contextlib.suppress(Exception):
            await agent.stop({})
        with contextlib.suppress(Exception):
            await agent.stack.aclose()


def _rss_kib() -> int | None:
    """This process's resident set (`VmRSS`), in KiB; None where /proc has none."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def _not_fenced(record: logging.LogRecord) -> bool:
    """Drop the worker's note that a pass lost its claim: the lab deletes workflows under
    running passes on purpose (a takeover trial ends so), and says so in its own rows."""
    return not (record.name == "durability.worker" and record.msg == "pass of %s stopped: %s")


if __name__ == "__main__":
    supervised()
    # SIGUSR1 prints every thread's stack to stderr: how the lab sees where an agent that
    # stopped answering is (the chaos run sends it to a worker that did not answer `mark`).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="agent %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_fenced)
    asyncio.run(main())
