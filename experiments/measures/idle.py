"""`idle`: what one idle worker costs its server, per second, with nothing to do.

One worker process with `work()`'s defaults and an empty queue. After a settling pause (the
start-up's statements must not count), a window is measured three ways: what the worker says
it sent (`durable.traffic`: requests by name, round trips; for SQLite this is the only count
there is), what the server counted (Redis `INFO commandstats` on a server started for this
measurement alone; Postgres `pg_stat_statements` for the run's own database where it is
loaded, else its transactions in `pg_stat_database`, read after the worker exits because a
backend reports its counts lazily), and CPU seconds per second of the worker and the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from experiments.harness.backends import Backend
from experiments.harness.lab import Counters, Lab, server_requests

NAME = "idle"
TITLE = "idle worker: requests and CPU per second"
#: How many backends a quick run measures at once (its figures are counts over a window, and CPU
#: time, which other work beside it does not change); a full run takes one at a time.
SIDE_BY_SIDE = 4
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"settle_s": "seconds the worker runs before the window",
            "window_s": "seconds measured"}


def window(quick: bool) -> tuple[float, float]:
    """(settle, measure) seconds."""
    return (0.5, 1.0) if quick else (11.0, 15.0)


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    variants = backend.variants[:1] if quick else backend.variants
    return [{"variant": variant} for variant in variants]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    # Redis counts every client's commands in one place: a server of its own, or the counts
    # are somebody else's too. A Postgres database's counts are its own already.
    if backend.store == "redis" and backend.server is not None:
        with lab.servers.fresh(backend.server) as server:
            return await _measure(lab, backend, params, server)
    return await _measure(lab, backend, params, None)


async def _measure(lab: Lab, backend: Backend, params: dict[str, Any], server: Any
                   ) -> list[dict[str, Any]]:
    settle, seconds = window(lab.quick)
    settle = float(params.get("settle_s") or settle)
    seconds = float(params.get("window_s") or seconds)
    async with lab.place(backend, server) as (place, used):
        counters = None if used is None else Counters(used, place.base.rsplit("/", 1)[-1])
        async with lab.agent(backend, place, variant=params["variant"]) as worker:
            await worker.request("work", body="one-step")
            await asyncio.sleep(settle)
            server_before = await counters.read() if counters else None
            before = await worker.request("mark")
            await asyncio.sleep(seconds)
            after = await worker.request("mark")
            postgres = used is not None and used.kind == "postgres"
            # Redis counts at once: read it before the worker's shutdown sends anything.
            server_after = await counters.read() if counters and not postgres else None
            await worker.request("stop")
        if counters is not None and server_after is None:
            await asyncio.sleep(0.5)  # the worker's backends report their counts as they exit
            server_after = await counters.read()
    span = (after["at"] - before["at"]) / 1e9
    rows: list[dict[str, Any]] = [
        {"metric": "window", "value": span, "unit": "s"},
        {"metric": "worker_cpu", "value": (after["cpu"] - before["cpu"]) / span, "unit": "s/s"},
    ]
    if after["requests"] or backend.rival is None:
        names = set(after["requests"]) | set(before["requests"])
        sent = {n: after["requests"].get(n, 0) - before["requests"].get(n, 0) for n in names}
        rows.append({"metric": "worker_requests", "value": sum(sent.values()) / span,
                     "unit": "1/s"})
        rows.append({"metric": "worker_round_trips",
                     "value": (after["round_trips"] - before["round_trips"]) / span,
                     "unit": "1/s"})
        rows += [{"metric": "worker_request", "request": n, "value": v / span, "unit": "1/s"}
                 for n, v in sorted(sent.items()) if v]
    if server_before is not None and server_after is not None and used is not None:
        counts, cpu = Counters.delta(server_before, server_after)
        rows.append({"metric": "server_requests", "value": server_requests(counts, used.kind)
                     / span, "unit": "1/s"})
        rows += [{"metric": "server_request", "request": n, "value": v / span, "unit": "1/s"}
                 for n, v in counts.items()]
        if cpu is not None:
            rows.append({"metric": "server_cpu", "value": cpu / span, "unit": "s/s"})
    return rows
