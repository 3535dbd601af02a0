"""How the lab talks to the processes it measures: one JSON object per line, both ways.

An *agent* is a process the lab starts (ours: `python -m experiments.harness.agent`; a rival's, from
its own virtualenv) that opens one backend and then does what it is told (`AgentLoop`). Only
the standard library is used here, so a rival's agent, which runs without `durability`
installed, speaks it too. Times are wall-clock nanoseconds (`now_ns`), so that a submission in
one process can be subtracted from a pass start in another.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import random
import resource
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "supervised",
    "AgentLoop",
    "cpu_seconds",
    "die_with_parent",
    "now_ns",
    "schedule",
]

Message = dict[str, Any]
Handler = Callable[[Message], Awaitable[Message | None]]


def now_ns() -> int:
    """The one clock every process of a run shares: wall-clock nanoseconds
    (`time.time_ns()`), which every process on one host reads alike."""
    return time.time_ns()


def cpu_seconds() -> float:
    """This process's CPU time so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so an interrupted or killed lab
    leaves no agent or server behind. A no-op where `prctl` is not there."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before the request landed
        os._exit(1)


def supervised() -> None:
    """What every agent does first: die with the lab (`die_with_parent`), and leave SIGINT to
    it. A terminal's Ctrl-C and a kernel's interrupt go to the whole process group; the lab
    stops its agents itself as it unwinds, so an agent interrupted on its own would only print
    a traceback into the notebook or terminal and drop its reply."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def schedule(rate: float, count: int, seed: int) -> list[float]:
    """Offsets in seconds of `count` Poisson arrivals at `rate` a second, from `seed`.

    Fixed in advance and the same for every backend: an open loop, not one submission per
    completion, so a slow queue meets the same arrivals as a fast one and its queueing delay
    shows. Exponential gaps rather than a fixed one, because a polling worker's beat would lock
    onto a fixed gap's phase and measure wherever that phase happened to fall.
    """
    gaps = random.Random(seed)
    at, offsets = 0.0, []
    for _ in range(count):
        offsets.append(at)
        at += gaps.expovariate(rate)
    return offsets


async def open_loop(
    submit: Callable[[int], Awaitable[None]],
    offsets: list[float],
    submitted: list[int],
    answered: list[int],
) -> None:
    """Call `submit(i)` at each offset (each in a task of its own, so a slow call delays none);
    note the time just before each call in `submitted[i]` and after it in `answered[i]`."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.02
    tasks = []

    async def one(i: int) -> None:
        submitted[i] = now_ns()
        await submit(i)
        answered[i] = now_ns()

    for i, offset in enumerate(offsets):
        delay = start + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


class AgentLoop:
    """Reads requests from stdin, answers each with its handler's reply; `emit` sends a live
    event at any time. An agent's `main` builds one, registers handlers and runs it.

    Requests come down stdin as `{"op": ...}`; answers and live events go up stdout as
    `{"reply": ...}` or `{"event": ...}`. The ops are what the lab asks of an agent: work as a
    worker, submit on an open-loop schedule, report its counters."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self._out = sys.stdout
        self.stopping = asyncio.Event()

    def on(self, op: str, handler: Handler) -> None:
        self.handlers[op] = handler

    def emit(self, event: str, **fields: Any) -> None:
        self._write({"event": event, **fields})

    def _write(self, message: Message) -> None:
        self._out.write(json.dumps(message, separators=(",", ":")) + "\n")
        self._out.flush()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        pending: set[asyncio.Task[None]] = set()
        while not self.stopping.is_set():
            line = await reader.readline()
            if not line:  # the lab went away
                break
            request = json.loads(line)
            task = asyncio.create_task(self._answer(request))
            pending.add(task)
            task.add_done_callback(pending.discard)
        for task in pending:
            task.cancel()

    async def _answer(self, request: Message) -> None:
        op = request.get("op", "")
        handler = self.handlers.get(op)
        try:
            if handler is None:
                raise ValueError(f"this agent has no {op!r}")
            reply = await handler(request) or {}
            self._write({"reply": op, "id": request.get("id"), **reply})
        except Exception as error:  # the lab reports it and fails the experiment
            self._write(
                {"reply": op, "id": request.get("id"), "error": f"{type(error).__name__}: {error}"}
            )
