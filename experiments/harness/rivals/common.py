"""What the five rival agents share: the lab's ops answered once, over a rival's few verbs.

A rival module supplies a `Rival` (open its queue, start and stop a worker, enqueue one job,
close) and calls `serve`. Everything the lab reads back — the start time of each job by its
workflow key, the counts, `mark` and `stop` — lives here in a `Ledger`, so the five agents
cannot drift apart in what they measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from experiments.harness.protocol import (
    AgentLoop,
    Message,
    cpu_seconds,
    now_ns,
    open_loop,
    schedule,
    supervised,
)

__all__ = ["JOB", "RESULT", "Ledger", "Opening", "Rival", "serve"]

#: The name every rival registers the lab's job under.
JOB = "lab_job"
#: What the job returns: the same small dict our one-step body records.
RESULT: dict[str, object] = {"charged": True, "cents": 1250}


@dataclass(frozen=True, slots=True)
class Opening:
    """What `open` said: where the rival's server is, a tag no other run uses (to name queues
    with), which variant of its settings to run, and whether this agent works or submits."""

    base: str
    tag: str
    variant: str
    role: str
    #: The lease the experiment runs ours at: the rival's own settings for the same question
    #: are made from it (`takeover=...`).
    lease_s: float = 30.0
    #: What an experiment asks of the rival's settings beyond its variant
    #: (`takeover=<recovery>`, `cleanup=on`): each rival module says what they set.
    options: dict[str, str] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return f"lab-{self.tag}"

    def option(self, name: str) -> str | None:
        return self.options.get(name) or None


class Ledger:
    """One worker run's bookkeeping: when each job started (the first time, by key), how many
    starts and outcomes there were, the first start and the last outcome."""

    def __init__(self, emit: Callable[..., None] | None = None, *, hold_s: float = 0.0,
                 beat_s: float = 1.0) -> None:
        self.started: dict[str, int] = {}
        self.runs: Counter[str] = Counter()  # starts by key: a job run again counts twice
        self.kinds: Counter[str] = Counter({"started": 0, "outcome": 0})
        self.first_started: int | None = None
        self.last_outcome: int | None = None
        self._emit = emit
        self.hold_s = hold_s
        self.beat_s = beat_s
        #: Each job's span, (key, began, ended) in `time.monotonic_ns` (one clock for every
        #: process on Linux), and each scheduled job's firing, (key, its time in wall ns): what
        #: `policies` counts a limit's holders and a cron's firings from.
        self.spans: list[tuple[str, int, int]] = []
        self.fired: list[tuple[str, int]] = []

    async def cron(self, key: str, firing_ns: int) -> dict[str, object]:
        """A job the rival's cron started for its firing at `firing_ns`: noted, then run."""
        self.fired.append((key, firing_ns))
        return await self.job(key)

    async def job(self, key: str, beat: Callable[[], Awaitable[object]] | None = None
                  ) -> dict[str, object]:
        """The job itself: note its start, do the trivial work (or, holding, sleep `hold_s`
        calling `beat` every `beat_s`: the heartbeat a rival leaves to the job), note its
        outcome. Its start is the moment the rival calls it, its outcome the moment it returns
        (before the rival records the job done), as our own agent counts a pass's "started"
        and "outcome"."""
        at, began = now_ns(), time.monotonic_ns()
        self.started.setdefault(key, at)
        self.runs[key] += 1
        self.kinds["started"] += 1  # every start: a job run twice shows as more than keys
        if self.first_started is None:
            self.first_started = at
        if self._emit is not None:
            self._emit("started", workflow=key, at=at)
        if self.hold_s > 0:
            if self._emit is not None:
                self._emit("holding", workflow=key, at=now_ns())
            until = asyncio.get_running_loop().time() + self.hold_s
            while (left := until - asyncio.get_running_loop().time()) > 0:
                await asyncio.sleep(min(left, self.beat_s))
                if beat is not None:
                    await beat()
        result = dict(RESULT)
        self.spans.append((key, began, time.monotonic_ns()))
        self.kinds["outcome"] += 1
        self.last_outcome = now_ns()
        return result


class Rival(Protocol):
    """A rival queue, driven through its public API."""

    async def open(self, opening: Opening) -> dict[str, Any]:
        """Connect (and, for a worker, be ready to work); return the settings this variant
        uses, as plain JSON values."""
        ...

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        """Start a worker in a task of its own, running `ledger.job(key)` for each job;
        `pool` is its concurrency (None: the rival's default)."""
        ...

    async def halt(self) -> None:
        """Stop the worker the rival's documented way, waiting for it to finish."""
        ...

    async def enqueue(self, key: str) -> None:
        """Enqueue one job for workflow `key`."""
        ...

    async def enqueue_once(self, key: str) -> bool:
        """Enqueue a job for workflow `key` under the rival's own way of keeping one job per
        key (a job id, a dedupe key, a lock); False where the rival refused it."""
        ...

    async def close(self) -> None:
        """Close every connection `open` made."""
        ...

    async def footprint(self) -> dict[str, Any]:
        """What the rival's queue holds now: `parts` (entries by kind) and `bytes`
        (`experiments.harness.rivals.footprint`)."""
        ...


class Agent:
    """The lab's ops over one `Rival` (see `experiments.harness.agent` for the same ops on ours)."""

    def __init__(self, loop: AgentLoop, rival: Rival) -> None:
        self.loop = loop
        self.rival = rival
        self.ledger = Ledger()
        self.working = False
        self.opened = False

    async def open(self, request: Message) -> Message:
        opening = Opening(base=str(request["base"]), tag=str(request["tag"]),
                          variant=str(request.get("variant") or "default"),
                          role=str(request.get("role") or "worker"),
                          lease_s=float(request.get("lease_ms") or 30_000) / 1000,
                          options=dict(parse_qsl(str(request.get("options") or ""))))
        if opening.variant not in ("default", "tuned"):
            raise ValueError(f"no variant {opening.variant!r}: default or tuned")
        settings = await self.rival.open(opening)
        self.opened = True
        return {"ready": True, "settings": settings}

    async def work(self, request: Message) -> Message:
        if self.working:
            raise RuntimeError("already working: stop first")
        live = bool(request.get("live", False))
        # A worker told `body="holder"` holds each job (the takeover experiment kills it
        # there), beating the rival's heartbeat if it has one.
        holding = request.get("body") == "holder"
        self.ledger = Ledger(self.loop.emit if live else None,
                             hold_s=float(request.get("hold_ms") or 60_000) / 1000 if holding
                             else 0.0,
                             beat_s=float(request.get("tick_ms") or 1000) / 1000)
        pool = int(request["pool"]) if request.get("pool") else None
        await self.rival.start(pool, self.ledger)
        self.working = True
        return {"working": True, "at": now_ns()}

    async def submit(self, request: Message) -> Message:
        prefix = str(request["prefix"])
        offsets = schedule(float(request["rate"]), int(request["count"]), int(request["seed"]))
        submitted, answered = [0] * len(offsets), [0] * len(offsets)

        async def one(i: int) -> None:
            await self.rival.enqueue(f"{prefix}-{i}")

        await open_loop(one, offsets, submitted, answered)
        return {"submitted": submitted, "answered": answered}

    async def preload(self, request: Message) -> Message:
        prefix, count = str(request["prefix"]), int(request["count"])
        gate = asyncio.Semaphore(int(request.get("concurrency", 32)))

        async def one(i: int) -> None:
            async with gate:
                await self.rival.enqueue(f"{prefix}-{i}")

        began = now_ns()
        await asyncio.gather(*(one(i) for i in range(count)))
        return {"seconds": (now_ns() - began) / 1e9}

    async def enqueue(self, request: Message) -> Message:
        """One job for `workflow`: with `once`, under the rival's key for it."""
        key = str(request["workflow"])
        if request.get("once"):
            accepted = await self.rival.enqueue_once(key)
        else:
            await self.rival.enqueue(key)
            accepted = True
        return {"accepted": accepted, "at": now_ns()}

    async def mark(self, request: Message) -> Message:
        ledger = self.ledger
        return {
            "at": now_ns(),
            "cpu": cpu_seconds(),
            "requests": {},  # a rival's requests are counted by its server (`Counters`)
            "round_trips": 0,
            "kinds": dict(ledger.kinds),
            "runs": dict(ledger.runs),
            "outcomes": ledger.kinds["outcome"],
            "first_started": ledger.first_started,
            "last_outcome": ledger.last_outcome,
        }

    async def footprint(self, request: Message) -> Message:
        found = await self.rival.footprint()
        return {"at": now_ns(), "parts": found["parts"], "bytes": found["bytes"]}

    async def stop(self, request: Message) -> Message:
        if self.working:
            self.working = False
            await self.rival.halt()
        return {"started": dict(self.ledger.started), "kinds": dict(self.ledger.kinds),
                "runs": dict(self.ledger.runs), "spans": self.ledger.spans,
                "fired": self.ledger.fired}

    async def close(self, request: Message) -> Message:
        await self.shut()
        self.loop.stopping.set()
        return {"closed": True}

    async def shut(self) -> None:
        await self.stop({})
        if self.opened:
            self.opened = False
            await self.rival.close()


OPS = ("open", "work", "submit", "preload", "enqueue", "mark", "footprint", "stop", "close")


async def _main(rival: Rival) -> None:
    loop = AgentLoop()
    agent = Agent(loop, rival)
    for name in OPS:
        loop.on(name, getattr(agent, name))
    try:
        await loop.run()
    finally:
        with contextlib.suppress(Exception):
            await agent.shut()


def serve(make: Callable[[], Rival], quiet: tuple[str, ...] = ()) -> None:
    """Run an agent for the rival `make()` builds until the lab closes it or goes away;
    `quiet` names the rival's loggers whose info (one line per job) would flood the lab."""
    supervised()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="rival %(levelname)s %(name)s: %(message)s")
    for name in quiet:
        logging.getLogger(name).setLevel(logging.ERROR)
    asyncio.run(_main(make()))
