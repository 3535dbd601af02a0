"""`latency`: how long from submitting a workflow until a worker starts its first pass.

Open loop: an agent submits on a Poisson schedule fixed in advance (not one submission per
completion), at several rates, while one worker process (pool 16) runs a one-step body; the
latency of a submission is the worker's "started" event minus the moment just before its
`arrive` call, both on the host's wall clock. Polled backends also run at several poll
intervals, since the poll is their floor. Each submission is a row (raw observations kept);
percentiles are computed by whoever reads them (`report`, the notebooks). A short warm-up at
the start of each configuration is submitted under another prefix and discarded.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from experiments.backends import Backend
from experiments.harness import Lab

NAME = "latency"
TITLE = "submit → first pass start"

RATES = (5.0, 20.0, 100.0, 500.0)
QUICK_RATES = (20.0,)
POLLS_MS = (5.0, 10.0, 25.0, 50.0, 100.0)
QUICK_POLLS_MS = (10.0,)
SEED = 20
#: The percentiles the tables give, each with its interval.
QUANTILES = (0.5, 0.9, 0.99)
#: What a run may set beside the configurations' own parameters (`experiments.overrides`).
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


# -- reading the results ----------------------------------------------------------------------


def summary(frame: Any) -> Any:
    """Per backend, variant, rate and poll: how many submissions started (`n`) of those made
    (`submitted`) over how many `repeats`, p50/p90/p99 each with its 95% interval (`p50_lo`,
    `p50_hi`, ...: a bootstrap over the submissions, and over the repeats first where there
    are several), the max, and p50 as a ratio to memory's at the same rate (the
    in-process floor measured in the same run)."""
    import pandas

    from experiments.uncertainty import nested, quantiles

    rows = frame[frame["metric"] == "submit_to_first_pass"]
    keys = ["backend", "variant", "rate", "poll_ms"]
    rows = rows.assign(poll_ms=rows["poll_ms"].fillna(-1))
    made = frame[frame["metric"] == "submissions"]
    made = made.assign(poll_ms=made["poll_ms"].fillna(-1)).groupby(keys)["value"].sum()
    out = []
    for key, group in rows.groupby(keys, sort=False):
        values = group["value"].to_numpy()
        entry: dict[str, Any] = dict(zip(keys, key, strict=True))
        entry["n"] = len(values)
        entry["submitted"] = made.get(key, float("nan"))
        entry["repeats"] = group["repeat"].nunique() if "repeat" in group else 1
        found_all = (nested([g.to_numpy() for _, g in group.groupby("repeat")["value"]],
                            QUANTILES) if entry["repeats"] > 1 else quantiles(values, QUANTILES))
        for name, found in zip(("p50", "p90", "p99"), found_all, strict=True):
            entry[name], entry[f"{name}_lo"], entry[f"{name}_hi"] = found.estimate, found.lo, \
                found.hi
        entry["max"] = float(values.max())
        out.append(entry)
    table = pandas.DataFrame(out, columns=[*keys, "n", "submitted", "repeats", "p50", "p50_lo",
                                           "p50_hi", "p90", "p90_lo", "p90_hi", "p99",
                                           "p99_lo", "p99_hi", "max"])
    floor = table[table["backend"] == "memory"].set_index("rate")["p50"]
    table["p50_vs_memory"] = [
        p50 / floor[rate] if rate in floor.index and floor[rate] > 0 else float("nan")
        for p50, rate in zip(table["p50"], table["rate"], strict=True)
    ]
    table["poll_ms"] = table["poll_ms"].where(table["poll_ms"] >= 0)
    return table


def samples(frame: Any, backend: str, rate: float = 20.0, variant: str = "default",
            poll_ms: float | None = None) -> list[Any]:
    """One configuration's latencies (ms), one per submission that started, as one array per
    repeat (for `uncertainty.nested_ratio`)."""
    rows = frame[(frame["metric"] == "submit_to_first_pass") & (frame["backend"] == backend)
                 & (frame["rate"] == rate) & (frame["variant"] == variant)]
    rows = rows[rows["poll_ms"].isna()] if poll_ms is None else rows[rows["poll_ms"] == poll_ms]
    if "repeat" not in rows or rows["repeat"].nunique() <= 1:
        return [rows["value"].to_numpy()]
    return [group.to_numpy() for _, group in rows.groupby("repeat")["value"]]


def draw(frame: Any) -> Any:
    from experiments.figures import colour, figure, label

    fig, axes = figure(columns=2, width=6.5, height=4.5)
    cdf, polls = axes[0][0], axes[0][1]
    rows = frame[(frame["metric"] == "submit_to_first_pass") & (frame["rate"] == 20.0)]
    plain = rows[rows["poll_ms"].isna()]
    for (backend, variant), group in plain.groupby(["backend", "variant"], sort=False):
        values = group["value"].sort_values().to_numpy()
        if len(values) == 0:
            continue
        shares = [(i + 1) / len(values) for i in range(len(values))]
        name = backend if variant == "default" else f"{backend} ({variant})"
        cdf.step(values, shares, where="post", label=name, color=colour(str(backend)),
                 linestyle="-" if variant == "default" else "--")
    cdf.set_xscale("log")
    label(cdf, "Submit → first pass at 20/s (open loop)", "latency (ms, log scale)",
          "share of submissions")
    # the CDFs' legend goes below the figure: inside, it would cover the slowest curves
    fig.legend(*cdf.get_legend_handles_labels(), loc="outside lower center", ncol=6)
    swept = rows[rows["poll_ms"].notna()]
    for backend, group in swept.groupby("backend", sort=False):
        table = group.groupby("poll_ms")["value"].quantile(0.5)
        polls.plot(table.index, table.to_numpy(), marker="o", label=f"{backend} p50",
                   color=colour(str(backend)))
        p99 = group.groupby("poll_ms")["value"].quantile(0.99)
        polls.plot(p99.index, p99.to_numpy(), marker=".", linestyle=":",
                   label=f"{backend} p99", color=colour(str(backend)))
    for backend in ("redis-set", "redis-stream", "postgres"):
        pushed = plain[plain["backend"] == backend]["value"]
        if len(pushed):
            polls.axhline(pushed.quantile(0.5), color=colour(backend), linewidth=0.8,
                          linestyle="--", label=f"{backend} p50 (woken, no poll)")
    if len(swept):
        grid = sorted(swept["poll_ms"].unique())
        polls.plot(grid, [g / 2 for g in grid], color="grey", linewidth=0.8,
                   label="half a poll")
    polls.set_xscale("log")
    polls.set_yscale("log")
    label(polls, "Polled schedulers against the poll interval (20/s)", "poll interval (ms)",
          "latency (ms)")
    if polls.get_legend_handles_labels()[0]:  # a run with no polled backend draws none
        polls.legend(loc="upper left", ncol=2)
    return fig
