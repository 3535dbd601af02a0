"""`scaling`: how each cost grows as the work grows, and where it stays flat.

Two dimensions, measured inside one agent process against the store (no worker running):
*checkpoint size* (a workflow holding ever more records or inbox entries, `RECORDS`: the cost
of the read every pass pays for it) and *queue depth* (ever more workflows queued or sleeping,
`DEPTHS`: the cost of taking one and answering for it, of a timer's `wake_due` with nothing
due, and of `cancel`).

Each size is timed over many repetitions; `summary` gives the median per size and the slope of
log(cost) against log(size): about 0 is flat, about 1 is linear in the size.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from durability import Durable
from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "scaling"
TITLE = "cost against checkpoint size and queue depth"

#: How many records (or inbox entries) a workflow's checkpoint holds, size by size (a full
#: run's; a quick run's are `QUICK_RECORDS`).
RECORDS = (10, 100, 1_000, 10_000)
#: How many workflows are queued (or sleeping), depth by depth (a quick run: `QUICK_DEPTHS`).
DEPTHS = (1_000, 10_000, 100_000)
QUICK_RECORDS = (10, 100, 1_000)
QUICK_DEPTHS = (100, 1_000)
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"repeats": "timed repetitions per size"}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    records = QUICK_RECORDS if quick else RECORDS
    depths = QUICK_DEPTHS if quick else DEPTHS
    found = [{"dimension": d, "size": n} for d in ("records", "inbox") for n in records]
    found += [{"dimension": d, "size": n} for d in ("ready", "sleeping", "cancel")
              for n in depths]
    return found


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    # A checkpoint's size is its own, so the checkpoint dimensions share one store; a queue's
    # depth is the whole queue's, so each depth gets a queue of its own (a stream keeps every
    # entry a deeper run left behind, and cancel reads them all).
    keep = params["dimension"] in ("records", "inbox")
    async with (
        lab.place(backend, keep=keep) as (place, _),
        lab.agent(backend, place, housekeeping=False, keep=keep) as agent,
    ):
        reply = await agent.request(
            "probe", module=__name__, timeout=1800,
            args={**params, "repeats": params.get("repeats") or (20 if lab.quick else 150)},
        )
    rows: list[dict[str, Any]] = reply["rows"]
    return rows


# -- inside the agent --------------------------------------------------------------------------


async def _gather(count: int, make: Any, concurrency: int = 64) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await make(i)

    await asyncio.gather(*(one(i) for i in range(count)))


async def probe(durable: Durable, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Build the workload `args` names in the store, then time its operation."""
    dimension, size, repeats = str(args["dimension"]), int(args["size"]), int(args["repeats"])
    tag = uuid.uuid4().hex[:6]
    if dimension in ("records", "inbox"):
        return await _checkpoint(durable, dimension, size, repeats, tag)
    return await _queue(durable, dimension, size, repeats, tag)


async def _checkpoint(durable: Durable, dimension: str, size: int, repeats: int, tag: str
                      ) -> list[dict[str, Any]]:
    """The read every pass pays for a checkpoint of `size`: `claim` (which brings the
    checkpoint on the stores that can) plus `load` where it did not, plus `release`."""
    checkpointer = durable.checkpointer
    workflow = f"sc{tag}"
    budget, alive = timedelta(minutes=5), timedelta(seconds=30)
    if dimension == "records":
        holder = await checkpointer.claim(workflow, budget, alive)
        assert holder is not None
        await _gather(size, lambda i: checkpointer.record(holder, f"step:{i}", {"n": i}))
        await checkpointer.release(holder)
    else:
        await _gather(size, lambda i: checkpointer.append(workflow, {"message": i}))
    rows = []
    for repeat in range(repeats):
        began = time.perf_counter()
        holder = await checkpointer.claim(workflow, budget, alive)
        assert holder is not None
        records = holder.records
        if records is None:
            records = await checkpointer.load(workflow)
        await checkpointer.release(holder)
        elapsed = (time.perf_counter() - began) * 1000
        if len(records) != size:
            raise AssertionError(f"the checkpoint holds {len(records)} records, not {size}")
        rows.append({"operation": "claim_load_release", "repetition": repeat,
                     "metric": "cost", "value": elapsed, "unit": "ms"})
    await durable.delete(workflow)
    return rows


async def _queue(durable: Durable, dimension: str, size: int, repeats: int, tag: str
                 ) -> list[dict[str, Any]]:
    """At a queue `size` deep: taking one and answering for it (`take` + `finish`, then
    `make_ready` again so the depth holds), a timer's `wake_due` with nothing due, or `cancel`
    (which the stream must find by reading its entries: the documents' "cancelling costs a
    scan")."""
    scheduler = durable.scheduler
    prefix = f"sq{tag}"
    await _gather(size, lambda i: scheduler.make_ready(f"{prefix}-{i}"))
    far = datetime.now(UTC) + timedelta(days=1)
    if dimension == "sleeping":
        async def sleep_one(i: int) -> None:
            delivery = await scheduler.next_ready(timedelta(seconds=5))
            if delivery is not None:
                await scheduler.wake_at(delivery, far + timedelta(seconds=i % 1000))
                await scheduler.done(delivery)

        await _gather(size, sleep_one)
    rows = []
    budget, alive = timedelta(minutes=5), timedelta(seconds=30)
    for repeat in range(repeats):
        began = time.perf_counter()
        if dimension == "ready":
            taken = await durable.take(timedelta(seconds=5), budget, alive)
            assert taken is not None and taken.holder is not None
            await durable.finish(taken.holder, taken.delivery)
            elapsed = (time.perf_counter() - began) * 1000
            await scheduler.make_ready(taken.delivery.workflow)  # the depth holds
            operation = "take_finish"
        elif dimension == "cancel":
            workflow = f"{prefix}-{(repeat * 7919) % size}"
            gone = await scheduler.cancel(workflow)
            elapsed = (time.perf_counter() - began) * 1000
            if gone < 1:
                raise AssertionError(f"cancel found nothing queued for {workflow}")
            await scheduler.make_ready(workflow)  # the depth holds
            operation = "cancel"
        else:
            await scheduler.wake_due(datetime.now(UTC))
            elapsed = (time.perf_counter() - began) * 1000
            operation = "wake_due"
        rows.append({"operation": operation, "repetition": repeat, "metric": "cost",
                     "value": elapsed, "unit": "ms"})
    return rows


# -- reading the results ----------------------------------------------------------------------


def slope(sizes: list[float], costs: list[float]) -> float:
    """The least-squares slope of log(cost) on log(size)."""
    points = [(math.log(s), math.log(c)) for s, c in zip(sizes, costs, strict=True)
              if s > 0 and c > 0]
    if len(points) < 2:
        return math.nan
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else math.nan


def summary(frame: Any) -> Any:
    """Per backend and dimension: the slope with its interval (`slope_lo`, `slope_hi`: a
    bootstrap over the repetitions at each size, the slope refitted to each draw's medians),
    what the slope says (`reads`), and the median cost at each size (`ms@<size>`)."""
    import pandas

    from experiments.readers.uncertainty import bootstrap

    rows = frame[frame["metric"] == "cost"]
    out = []
    for (backend, dimension), part in rows.groupby(["backend", "dimension"], sort=False):
        by_size = part.groupby("size", sort=True)["value"]
        sizes = [float(s) for s in by_size.groups]
        found = bootstrap([g.to_numpy() for _, g in by_size], _slopes(sizes))
        entry: dict[str, Any] = {"backend": backend, "dimension": dimension,
                                 "slope": found.estimate, "slope_lo": found.lo,
                                 "slope_hi": found.hi, "reads": reads(found)}
        for size, group in by_size:
            entry[f"ms@{int(size):,}"] = float(group.median())
        out.append(entry)
    return pandas.DataFrame(out)


def costs(frame: Any) -> Any:
    """Per backend, dimension and size, the median cost (ms) with its interval (`median_lo`,
    `median_hi`: a bootstrap over the repetitions), one row each, for a figure's bands."""
    import pandas

    from experiments.readers.uncertainty import quantile

    rows = frame[frame["metric"] == "cost"]
    out = []
    for (backend, dimension, size), group in rows.groupby(["backend", "dimension", "size"],
                                                          sort=False):
        found = quantile(group["value"].to_numpy(), 0.5)
        out.append({"backend": backend, "dimension": dimension, "size": size,
                    "median": found.estimate, "median_lo": found.lo, "median_hi": found.hi,
                    "n": found.n})
    return pandas.DataFrame(out, columns=["backend", "dimension", "size", "median",
                                          "median_lo", "median_hi", "n"])


def _slopes(sizes: list[float]) -> Any:
    """The slope of log(median cost) on log(size), for a bootstrap draw of each size's
    repetitions (arrays shaped (draws, repetitions), one per size)."""
    import numpy

    x = numpy.log(numpy.asarray(sizes))
    dx = x - x.mean()

    def fitted(*draws: Any) -> Any:
        if len(draws) < 2:
            return numpy.full(draws[0].shape[0], numpy.nan)
        with numpy.errstate(divide="ignore", invalid="ignore"):
            y = numpy.log(numpy.stack([numpy.median(d, axis=1) for d in draws], axis=1))
        return ((y - y.mean(axis=1, keepdims=True)) * dx).sum(axis=1) / (dx * dx).sum()

    return fitted


#: Below this (either way) a slope is read as flat. Each size is one configuration, measured
#: at its own moment, so between sizes the machine moves the medians by more than a slope's
#: interval (over the repetitions within each size) can show.
FLAT = 0.2


def reads(found: Any) -> str:
    """What a slope (an `uncertainty.Interval`) says, in words."""
    slope = found.estimate
    if slope != slope:
        return ""
    if abs(slope) < FLAT or (found.lo == found.lo and found.lo <= 0 <= found.hi):
        return "flat (below 0 is noise)" if slope < 0 else "flat"
    if slope < 0:
        return "falls: no design gets cheaper with size, so look at the run"
    if slope < 0.8:
        return "grows, below linear"
    return "about linear" if slope <= 1.1 else "faster than linear"


TITLES = {"records": "Claim + load + release against checkpoint records",
          "inbox": "... against inbox entries",
          "ready": "Take + finish against workflows queued",
          "sleeping": "wake_due against workflows sleeping",
          "cancel": "cancel against workflows queued"}


def draw(frame: Any) -> Any:
    """A panel per dimension, the median cost against the size on log-log axes, a line a
    backend in its family's look, and around it, shaded, the median's interval at each size
    (`costs`: a bootstrap over the repetitions, which covers the noise within a size's own
    moment, not what moved between sizes); the legend in the spare panel, clear of every line
    (the slopes, with theirs, are in the table, `summary`)."""
    from experiments.readers.figures import (
        bounds,
        figure,
        label,
        look,
        measured_ticks,
        nothing,
        order,
        plain_log,
    )
    from experiments.readers.uncertainty import LEVEL

    fig, axes = figure(columns=3, rows=2, width=5.0, height=3.6)
    table = costs(frame)
    panels = [a for row in axes for a in row]
    backends = order(table["backend"])
    for ax, dimension in zip(panels, TITLES, strict=False):
        part = table[table["dimension"] == dimension]
        ax.set_title(TITLES[dimension])
        if part.empty:
            nothing(ax, "not measured in this run")
            continue
        for backend in backends:
            group = part[part["backend"] == backend].sort_values("size")
            if group.empty:
                continue
            seen = look(backend)
            ax.plot(group["size"], group["median"], **seen.line())
            interval = bounds(group, "median")
            if interval is not None:
                ax.fill_between(group["size"], interval[0], interval[1], color=seen.colour,
                                alpha=0.18, linewidth=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        measured_ticks(ax, [float(s) for s in part["size"].unique()])
        plain_log(ax)
        label(ax, TITLES[dimension], "size (log scale)", "median cost (ms, log scale)")
    spare = panels[len(TITLES):]
    for ax in spare:
        ax.set_axis_off()
    handles = [h for ax in panels[:len(TITLES)] for h in ax.get_legend_handles_labels()[0]]
    unique = {h.get_label(): h for h in handles}
    said = (f"shaded: each median's {LEVEL:.0%} interval,\nover the repetitions at that size"
            if table["median_lo"].notna().any() else "one repetition a size: no interval")
    if spare and unique:
        spare[0].legend(list(unique.values()), list(unique), loc="center", fontsize=9,
                        title=f"backend\n({said})", title_fontsize=8,
                        alignment="center")
    elif unique:
        fig.legend(list(unique.values()), list(unique), loc="outside lower center", ncol=7,
                   title=said.replace("\n", " "), title_fontsize=8)
    return fig
