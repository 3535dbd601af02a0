"""`throughput`: one-step workflows completed per second at saturation, for 1, 2 and 4
worker processes, with the CPU and the round trips each pass costs.

The workflows are submitted first (the queue is full before any worker starts), then the
worker processes start together; the rate is the workflows completed over the span from the
first pass start to the last pass end, across all processes. CPU per pass is the worker
processes' CPU over that span divided by passes (and the server's, where it can be read);
requests and round trips per pass come from each worker's `durable.traffic` (ours) or the
server's counters (rivals).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from experiments.harness.backends import Backend, Place
from experiments.harness.lab import Agent, Counters, Lab, server_requests

NAME = "throughput"
TITLE = "workflows per second at saturation"

PROCESSES = (1, 2, 4)
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"workflows": "workflows preloaded per configuration"}


def workload(quick: bool) -> int:
    return 400 if quick else 4000


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.in_process:  # one process by construction
        return [{"processes": 1, "variant": "default"}]
    variants = backend.variants[:1] if quick else backend.variants
    processes = (1, 2) if quick else PROCESSES
    return [{"processes": n, "variant": v} for v in variants for n in processes]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    processes, variant = int(params["processes"]), str(params["variant"])
    count = int(params.get("workflows") or workload(lab.quick))
    async with lab.place(backend) as (place, server):
        counters = None
        if server is not None and server.private:
            counters = Counters(server, place.base.rsplit("/", 1)[-1])
        window = await saturate(lab, backend, place, processes, count, variant=variant,
                                probe=counters.read if counters else None)
    rows = window.rows()
    if window.probed is not None and server is not None:
        counts, server_cpu = Counters.delta(*window.probed)
        if server.kind != "cluster":  # one node's counters: not the run's requests
            rows.append({"metric": "server_requests_per_pass",
                         "value": server_requests(counts, server.kind) / window.passes,
                         "unit": "1"})
        if "writes" in counts:  # Postgres: transactions that wrote, each a commit
            rows.append({"metric": "server_commits_per_pass",
                         "value": counts["writes"] / window.passes, "unit": "1"})
        if server_cpu is not None:
            rows.append({"metric": "server_cpu_per_pass",
                         "value": server_cpu / window.passes * 1000, "unit": "ms"})
    return rows


@dataclass(frozen=True, slots=True)
class Window:
    """What the worker processes said before and after the span they worked through a full
    queue (`before`, `after`: one `mark` each), and what `probe` read at the same two moments
    (None without a probe)."""

    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    probed: tuple[Any, Any] | None

    @property
    def passes(self) -> int:
        return sum(a["outcomes"] - b["outcomes"] for a, b in zip(self.after, self.before,
                                                                  strict=True))

    @property
    def span(self) -> float:
        """Seconds from the first pass start to the last pass end, across the processes."""
        starts = [a["first_started"] for a in self.after if a["first_started"]]
        ends = [a["last_outcome"] for a in self.after if a["last_outcome"]]
        return float(max(ends) - min(starts)) / 1e9

    def rows(self) -> list[dict[str, Any]]:
        """The rate, the passes, the span, the workers' CPU per pass and, where the workers
        count them, their requests and round trips per pass."""
        passes, pairs = self.passes, list(zip(self.after, self.before, strict=True))
        cpu = sum(a["cpu"] - b["cpu"] for a, b in pairs)
        rows: list[dict[str, Any]] = [
            {"metric": "passes_per_s", "value": passes / self.span, "unit": "1/s"},
            {"metric": "passes", "value": passes, "unit": "count"},
            {"metric": "span", "value": self.span, "unit": "s"},
            {"metric": "worker_cpu_per_pass", "value": cpu / passes * 1000, "unit": "ms"},
        ]
        requests = sum(sum(a["requests"].values()) - sum(b["requests"].values())
                       for a, b in pairs)
        trips = sum(a["round_trips"] - b["round_trips"] for a, b in pairs)
        if requests:
            rows.append({"metric": "requests_per_pass", "value": requests / passes,
                         "unit": "1"})
            rows.append({"metric": "round_trips_per_pass", "value": trips / passes,
                         "unit": "1"})
            named: dict[str, int] = {}
            for a, b in pairs:
                for name in set(a["requests"]) | set(b["requests"]):
                    sent = a["requests"].get(name, 0) - b["requests"].get(name, 0)
                    named[name] = named.get(name, 0) + sent
            rows += [{"metric": "request_per_pass", "request": name, "value": n / passes,
                      "unit": "1"} for name, n in sorted(named.items()) if n]
        return rows


async def saturate(lab: Lab, backend: Backend, place: Place, processes: int, count: int, *,
                   variant: str = "default", options: str = "",
                   probe: Callable[[], Awaitable[Any]] | None = None) -> Window:
    """`count` one-step workflows preloaded in `place`, then worked off by `processes` worker
    processes started together (`options`: extra URL options for every store opened); `probe`
    (a server's counters, say) read just before the workers start and just after the last
    pass. Every process is stopped before this returns."""
    prefix = f"tp{uuid.uuid4().hex[:6]}"
    async with contextlib.AsyncExitStack() as stack:
        # Started together: each is a process to boot and a store to open, a quarter second
        # apiece that nothing here measures.
        starting = [lab.agent(backend, place, variant=variant, options=options)
                    for _ in range(processes)]
        if not backend.in_process:
            starting.append(lab.agent(backend, place, role="client", housekeeping=False,
                                      variant=variant, options=options))
        # Every start settles before a failure is raised, so the stack stops all that began.
        settled = await asyncio.gather(*(stack.enter_async_context(agent) for agent in starting),
                                       return_exceptions=True)
        for outcome in settled:
            if isinstance(outcome, BaseException):
                raise outcome
        started = [outcome for outcome in settled if isinstance(outcome, Agent)]
        workers = started[:processes]
        loader = started[-1]
        await loader.request("preload", prefix=prefix, count=count, concurrency=64,
                             value={"sku": "A-1"}, timeout=900)
        first = await probe() if probe else None
        before = [await w.request("mark") for w in workers]
        await asyncio.gather(*(w.request("work", body="one-step", pool=32) for w in workers))
        await _until_done(workers, count, patience=600)
        after = [await w.request("mark") for w in workers]
        last = await probe() if probe else None
        for worker in workers:
            await worker.request("stop")
    return Window(before, after, None if probe is None else (first, last))


async def _until_done(workers: list[Agent], count: int, patience: float) -> None:
    """Wait until the workers' passes add up to `count` (asking each every 0.2 s)."""
    async with asyncio.timeout(patience):
        while True:
            marks = await asyncio.gather(*(w.request("mark") for w in workers))
            if sum(m["outcomes"] for m in marks) >= count:
                break
            await asyncio.sleep(0.2)
    await asyncio.sleep(0.2)  # the last passes' finish lands before the counters are read
