"""`latency`: how long from submitting a workflow until a worker starts its first pass.

Open loop: an agent submits on a Poisson schedule fixed in advance (not one submission per
completion), at several rates, while one worker process (pool 16) runs a one-step body; the
latency of a submission is the worker's "started" event minus the moment just before its
`arrive` call, both on the host's wall clock. Polled backends also run at several poll
intervals, since the poll is their floor. Each submission is a row (raw observations kept);
percentiles are computed by whoever reads them (its summary, the notebooks). A short warm-up at
the start of each configuration is submitted under another prefix and discarded.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "latency"
TITLE = "submit → first pass start"

RATES = (5.0, 20.0, 100.0, 500.0)
QUICK_RATES = (20.0,)
POLLS_MS = (5.0, 10.0, 25.0, 50.0, 100.0)
QUICK_POLLS_MS = (10.0,)
SEED = 20
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"seconds": "how long each configuration submits, in seconds"}


def seconds_at(rate: float, quick: bool) -> float:
    """How long each rate runs: 600 submissions at 20/s in a full run (the headline), and a few
    hundred to a thousand at the others."""
    if quick:
        return 1.0
    return {5.0: 12.0, 20.0: 30.0, 100.0: 5.0, 500.0: 2.0}.get(rate, 10.0)


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    rates = QUICK_RATES if quick else RATES
    found: list[dict[str, Any]] = []
    for variant in backend.variants[:1] if quick else backend.variants:
        # A rival's second setting at the headline rate and the highest, where it tells.
        chosen = rates if variant == "default" else (20.0, max(rates))
        for rate in rates:
            if rate in chosen:
                found.append({"rate": rate, "poll_ms": None, "variant": variant})
    if backend.polled:
        for poll in QUICK_POLLS_MS if quick else POLLS_MS:
            found.append({"rate": 20.0, "poll_ms": poll, "variant": "default"})
    return found


def seconds_for(params: dict[str, Any], quick: bool) -> float:
    """A poll sweep runs at 20/s for half the headline's time: the median of a polled
    scheduler sits near half its poll however long it runs. A configuration's `seconds` (an
    override) comes first."""
    if params.get("seconds") is not None:
        return float(params["seconds"])
    if params.get("poll_ms") is not None and not quick:
        return 15.0
    return seconds_at(float(params["rate"]), quick)


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    rate, poll_ms, variant = params["rate"], params["poll_ms"], params["variant"]
    count = max(1, round(rate * seconds_for(params, lab.quick)))
    async with (
        lab.place(backend, keep=True) as (place, _),
        lab.agent(backend, place, poll_ms=poll_ms, variant=variant, keep=True) as worker,
    ):
        if backend.in_process:
            return await _run(worker, worker, rate, count, poll_ms)
        async with lab.agent(backend, place, role="client", housekeeping=False,
                             variant=variant, keep=True) as client:
            return await _run(client, worker, rate, count, poll_ms)


async def _run(client: Any, worker: Any, rate: float, count: int, poll_ms: float | None
               ) -> list[dict[str, Any]]:
    prefix = f"lat{uuid.uuid4().hex[:8]}"
    await worker.request("work", body="one-step")
    # Warm-up: the first passes pay for connections, prepared statements and script loads.
    await client.request("submit", prefix=f"{prefix}w", rate=50.0, count=6, seed=SEED + 1,
                         value={"warm": True})
    await asyncio.sleep(0.15)
    sent = await client.request("submit", prefix=prefix, rate=rate, count=count, seed=SEED,
                                value={"sku": "A-1", "qty": 1}, timeout=900)
    grace = 0.5 + 3 * (poll_ms or 50.0) / 1000
    await asyncio.sleep(grace)
    stopped = await worker.request("stop")
    started: dict[str, int] = stopped["started"]
    rows: list[dict[str, Any]] = []
    never = 0
    for i, (submitted, answered) in enumerate(zip(sent["submitted"], sent["answered"],
                                                  strict=True)):
        begun = started.get(f"{prefix}-{i}")
        rows.append({"submission": i, "metric": "arrive_call",
                     "value": (answered - submitted) / 1e6, "unit": "ms"})
        if begun is None:
            never += 1
            continue
        rows.append({"submission": i, "metric": "submit_to_first_pass",
                     "value": (begun - submitted) / 1e6, "unit": "ms"})
    rows.append({"metric": "never_started", "value": never, "unit": "count"})
    rows.append({"metric": "submissions", "value": count, "unit": "count"})
    return rows
