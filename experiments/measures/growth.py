"""`growth`: how big each queue gets under a steady workload whose workflows wake many times.

Workflows are submitted at a steady rate; each sleeps briefly many times (`bodies.waker`), so
every wakeup goes through the queue again. The queue's own `footprint()` (its entries, and the
bytes the store says they take) is sampled while the work runs and for a while after it ends;
the stream scheduler runs with its worker's trimming and without. Rows are the samples; its
summary gives the peak and final size per configuration. A rival, which has no durable sleep,
is given as many one-step jobs as our workflows wake, at its defaults and with its own cleanup
setting (`catalogue.CLEANUP`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from experiments.catalogue import CLEANUP
from experiments.harness.backends import Backend
from experiments.harness.lab import Agent, Lab

NAME = "growth"
TITLE = "queue size under repeated wakeups"
#: How many backends a quick run measures at once (its figures are queue sizes, which a slower
#: machine changes little); a full run takes one at a time.
SIDE_BY_SIDE = 2
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"rate": "submissions a second", "seconds": "how long it submits",
            "wakes": "how many times each workflow sleeps and wakes",
            "nap_ms": "how long each sleep is, in ms"}


def plan(quick: bool) -> dict[str, float]:
    if quick:
        return {"rate": 10.0, "seconds": 1.5, "wakes": 5, "nap_ms": 50, "tail": 1.0,
                "sample": 0.2, "trim_every_ms": 400}
    return {"rate": 10.0, "seconds": 25.0, "wakes": 20, "nap_ms": 200, "tail": 8.0,
            "sample": 0.5, "trim_every_ms": 5_000}


#: How long a rival that fell behind the submissions may take to finish them before the
#: last samples (some run a few hundred jobs a second here, where ours are given 200 a second).
DRAIN_S = 240.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.rival is not None:
        cleanup = CLEANUP[backend.rival][1] is not None
        return [{"trimming": False}, *([{"trimming": True}] if cleanup else [])]
    if backend.scheduler == "RedisStreamScheduler":
        # With the worker's own trimming (`XTRIM ... ACKED` on 8.2, a safe `MINID` trim below
        # 8.2) and without, on Redis 7 and 8.2.
        return [{"trimming": True}, {"trimming": False}]
    return [{"trimming": None}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    p = {**plan(lab.quick), **{k: params[k] for k in SETTINGS if params.get(k) is not None}}
    if backend.rival is not None:
        if backend.store == "redis" and backend.server is not None:
            # A server of its own: arq does not name its keys after the queue.
            with lab.servers.fresh(backend.server) as server:
                return await _rival(lab, backend, p, bool(params["trimming"]), server)
        return await _rival(lab, backend, p, bool(params["trimming"]), None)
    trimming = params["trimming"]
    # The stream's worker trims by default: `off` is what leaves it untrimmed.
    options = ("" if trimming is None else
               f"trim_every_ms={p['trim_every_ms']:g}" if trimming else "trim_every_ms=off")
    count = round(p["rate"] * p["seconds"])
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place, housekeeping=bool(trimming), options=options) as worker,
        _client(lab, backend, place, worker if backend.in_process else None) as client,
    ):
        prefix = f"gr{uuid.uuid4().hex[:6]}"
        await worker.request("work", body="waker", pool=64)
        end = p["seconds"] + p["wakes"] * p["nap_ms"] / 1000 + p["tail"]
        samples = await _sampled(client, p, end, client.request(
            "submit", prefix=prefix, rate=p["rate"], count=count, seed=7,
            value={"wakes": p["wakes"], "nap_ms": p["nap_ms"]}, timeout=900))
        done = await worker.request("mark")
        await worker.request("stop")
    rows = _rows(samples)
    rows.append({"metric": "workflows", "value": count, "unit": "count"})
    rows.append({"metric": "wakeups", "value": count * p["wakes"], "unit": "count"})
    rows.append({"metric": "completed", "value": done["kinds"].get("outcome", 0),
                 "unit": "passes"})
    return rows


async def _rival(lab: Lab, backend: Backend, p: dict[str, float], cleanup: bool, server: Any
                 ) -> list[dict[str, Any]]:
    """As many jobs as our workflows' wakeups, at the same rate, into a rival's queue.

    A rival has no durable sleep: each of our wakeups is a pass through the queue, so a rival
    is given as many one-step jobs as our workflows wake, and its queue counted the same way
    (`experiments.harness.rivals.footprint`) until it has run them all, with its defaults
    (`trimming` False) and with its own cleanup setting (True; `catalogue.CLEANUP` says what
    each is)."""
    count = round(p["rate"] * p["seconds"] * p["wakes"])
    options = "cleanup=on" if cleanup else ""
    async with (
        lab.place(backend, server) as (place, _),
        lab.agent(backend, place, options=options) as worker,
        lab.agent(backend, place, role="client", housekeeping=False, options=options) as client,
    ):
        await worker.request("work", body="one-step", pool=64)

        async def finished() -> bool:
            return int((await worker.request("mark"))["outcomes"]) >= count

        samples = await _sampled(client, p, p["seconds"] + p["tail"], client.request(
            "submit", prefix=f"gr{uuid.uuid4().hex[:6]}", rate=count / p["seconds"],
            count=count, seed=7, timeout=900), finished)
        done = await worker.request("mark")
        await worker.request("stop")
    return [*_rows(samples),
            {"metric": "jobs", "value": count, "unit": "count"},
            {"metric": "wakeups", "value": count, "unit": "count"},
            {"metric": "completed", "value": done["kinds"].get("outcome", 0), "unit": "jobs"}]


async def _sampled(client: Agent, p: dict[str, float], end: float, submitting: Any,
                   finished: Callable[[], Awaitable[bool]] | None = None
                   ) -> list[dict[str, Any]]:
    """The queue's footprint (stream entries and sleepers, sorted-set members, rows; and the
    bytes the store says they take) every `sample` seconds from now until `end`, while the
    submission `submitting` runs (awaited before returning); with `finished`, on until it
    says every job is done (at most `DRAIN_S` more) and `tail` after that, so the last sample
    is the queue after every job, not one still working through a backlog."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    running = asyncio.ensure_future(submitting)
    samples: list[dict[str, Any]] = []

    async def sample() -> None:
        found = await client.request("footprint")
        samples.append({"t": loop.time() - began, **found})
        await asyncio.sleep(p["sample"])

    try:
        while loop.time() - began < end:
            await sample()
        await running
        if finished is not None:
            drained = loop.time() + DRAIN_S
            while loop.time() < drained and not await finished():
                await sample()
            tail = loop.time() + p["tail"]
            while loop.time() < tail:
                await sample()
    finally:
        running.cancel()
    return samples


def _rows(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples as rows, each at `t_s`, seconds since the first submission."""
    rows: list[dict[str, Any]] = []
    for sample in samples:
        entries = sum(sample["parts"].values())
        rows.append({"t_s": sample["t"], "metric": "entries", "value": entries, "unit": "count"})
        if sample.get("bytes") is not None:
            rows.append({"t_s": sample["t"], "metric": "bytes", "value": sample["bytes"],
                         "unit": "B"})
        for part, value in sample["parts"].items():
            rows.append({"t_s": sample["t"], "metric": "part", "part": part, "value": value,
                         "unit": "count"})
    return rows


def _client(lab: Lab, backend: Backend, place: Any, given: Any) -> Any:
    """The worker itself for an in-process store, else an agent of its own (an API)."""
    if given is not None:
        class Same:
            async def __aenter__(self) -> Any:
                return given

            async def __aexit__(self, *_: object) -> None:
                return None

        return Same()
    return lab.agent(backend, place, role="client", housekeeping=False)
