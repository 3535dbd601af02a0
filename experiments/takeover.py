"""`takeover`: a worker process is SIGKILLed holding a workflow; how long until another
worker process starts a pass on it?

Two worker processes share the queue (tick = lease / 4, at most a second, so renewal keeps
up with short leases). A workflow is submitted whose step holds the pass (`bodies.holder`),
and whichever worker starts it is killed: `mid-step` a tick and a half into the step (after
the claim and the delivery were renewed), or `after-write` the moment an earlier step's
record has landed (a write is a sign of life, so the claim was fresh). The time from the
kill to the other worker's "started" event is the takeover; the design's bound is about
lease + tick. Each trial's victim is replaced by a fresh worker, the workflow is deleted, and
the workers sit idle for a moment before the next submission, so every trial meets survivors
waiting for work, as a real takeover does.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from experiments.backends import Backend, Place
from experiments.harness import Agent, Lab

NAME = "takeover"
TITLE = "takeover of a killed worker's workflow"
#: How many backends a quick run measures at once (its figures are lease-bound waits of a second or
#: less, which other work beside it moves by milliseconds); a full run takes one at a time.
SIDE_BY_SIDE = 3

LEASES_S = (0.5, 1.0, 2.0, 5.0)
#: How long the workers wait, idle, before each trial's submission.
SETTLE_S = 0.7
PHASES = ("mid-step", "after-write")
#: What a run may set beside the configurations' own parameters (`experiments.overrides`).
SETTINGS = {"trials": "kills per configuration"}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    leases = (0.5,) if quick else LEASES_S
    return [{"lease_s": lease, "phase": phase} for lease in leases for phase in PHASES]


def trials(quick: bool) -> int:
    return 1 if quick else 5


def tick_for(lease_s: float) -> float:
    return min(1.0, lease_s / 4)


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    lease, phase = float(params["lease_s"]), str(params["phase"])
    tick = tick_for(lease)
    rows: list[dict[str, Any]] = []
    async with lab.place(backend, keep=True) as (place, _), contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            lab.agent(backend, place, role="client", housekeeping=False,
                      lease_ms=lease * 1000))
        workers = [await _worker(lab, backend, place, lease, tick, stack) for _ in range(2)]
        await asyncio.sleep(SETTLE_S)
        for trial in range(int(params.get("trials") or trials(lab.quick))):
            workflow = f"to{uuid.uuid4().hex[:8]}"
            await client.request("submit", prefix=workflow, rate=1000.0, count=1, seed=trial,
                                 value={"phase": phase, "hold_s": lease * 4 + 10})
            victim = await _first_holding(workers, f"{workflow}-0", patience=30 + lease * 3)
            if phase == "mid-step":
                await asyncio.sleep(1.5 * tick)
            killed = victim.kill()
            survivor = next(w for w in workers if w is not victim)
            started = await survivor.event("started", f"{workflow}-0", timeout=lease * 6 + 20)
            rows.append({"trial": trial, "tick_s": tick, "metric": "takeover",
                         "value": (started["at"] - killed) / 1e9, "unit": "s"})
            # Each trial starts from a quiet queue, as a real takeover does: the survivor's
            # pass of this workflow is refused at its next write, its queue entry is gone,
            # and the workers have settled into waiting before the next submission.
            await client.request("delete", workflow=f"{workflow}-0")
            workers = [survivor, await _worker(lab, backend, place, lease, tick, stack)]
            await asyncio.sleep(SETTLE_S)
        rows.append({"tick_s": tick, "metric": "lease_plus_tick", "value": lease + tick,
                     "unit": "s"})
    return rows


async def _worker(lab: Lab, backend: Backend, place: Place, lease: float, tick: float,
                  stack: contextlib.AsyncExitStack) -> Agent:
    agent: Agent = await stack.enter_async_context(
        lab.agent(backend, place, lease_ms=lease * 1000))
    await agent.request("work", body="holder", live=True, tick_ms=tick * 1000)
    return agent


async def _first_holding(workers: list[Agent], workflow: str, patience: float) -> Agent:
    """The worker that starts holding `workflow` first."""
    waits = {asyncio.create_task(w.event("holding", workflow, patience)): w for w in workers}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(BaseException):
            await task
    winner = next(iter(done))
    winner.result()  # raises if it timed out
    return waits[winner]


def summary(frame: Any) -> Any:
    """Per backend, lease and phase: the kills (`n`), their median with its interval
    (`median_lo`, `median_hi`: bootstrap over the kills), min, max, the bound lease + tick and
    the median as a share of it."""
    from experiments.uncertainty import quantile

    rows = frame[frame["metric"] == "takeover"]
    keys = ["backend", "lease_s", "phase"]
    groups = rows.groupby(keys, sort=False)["value"]
    table = groups.agg(n="count", median="median", min="min", max="max").reset_index()
    found = [quantile(group.to_numpy(), 0.5) for _, group in groups]
    table.insert(table.columns.get_loc("median") + 1, "median_lo", [i.lo for i in found])
    table.insert(table.columns.get_loc("median_lo") + 1, "median_hi", [i.hi for i in found])
    bound = frame[frame["metric"] == "lease_plus_tick"].groupby(keys)["value"].first()
    table["lease_plus_tick"] = [bound.get((b, lease, p), float("nan")) for b, lease, p in
                                zip(table["backend"], table["lease_s"], table["phase"],
                                    strict=True)]
    table["median_vs_bound"] = table["median"] / table["lease_plus_tick"]
    return table


#: The one takeover figure quoted beside the other measures (the overview, the design
#: documents' table), named so wherever it is shown: a kill can land at any moment of a pass,
#: so both phases' kills count.
TYPICAL = "median of all kills, both phases"


def typical(frame: Any, backend: str, lease_s: float) -> Any:
    """`TYPICAL` for one backend at one lease, as an `uncertainty.Interval` over the kills."""
    from experiments.uncertainty import quantile

    rows = frame[(frame["metric"] == "takeover") & (frame["backend"] == backend)
                 & (frame["lease_s"] == lease_s)]
    return quantile(rows["value"].to_numpy(), 0.5)


def draw(frame: Any) -> Any:
    """Per phase, the median takeover against the lease (whiskers min to max; a thicker bar
    for the median's interval where the summary has one), beside the lease + tick bound; a row
    of panels per family where one axis would hold too many backends."""
    from experiments.figures import bounds, figure, label, look, nothing, panels

    table = summary(frame)
    if "variant" not in table:  # ours have one setting; a rival's row may name its own
        table = table.assign(variant="default")
    series = list(table.groupby(["backend", "variant"], sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series)) or [("", [])]
    fig, axes = figure(columns=2, rows=len(groups), width=6.5,
                       height=4.5 if len(groups) == 1 else 3.8 if len(groups) <= 3 else 3.0)
    leases = sorted(table["lease_s"].unique())
    for row, (title, chosen) in zip(axes, groups, strict=True):
        for ax, phase in zip(row, PHASES, strict=True):
            part = table[(table["phase"] == phase) & table["backend"].isin(chosen)]
            ax.set_title(f"{title}: {phase}" if title else phase)
            if part.empty:
                nothing(ax, f"no {phase} takeovers measured for these backends")
                continue
            drawn = list(part.groupby(["backend", "variant"], sort=False))
            for k, ((backend, variant), group) in enumerate(drawn):
                group = group.sort_values("lease_s")
                # nudged apart a little at each lease, so whiskers that overlap can be told
                # apart (the lease is what is on the axis, not the nudge)
                x = group["lease_s"] + 0.03 * (k - (len(drawn) - 1) / 2)
                seen = look(str(backend), variant).line()
                ax.errorbar(x, group["median"], capsize=2, elinewidth=0.8, markersize=5,
                            yerr=[group["median"] - group["min"], group["max"] - group["median"]],
                            **seen)
                interval = bounds(group, "median")
                if interval is not None:
                    ax.errorbar(x, group["median"], fmt="none", elinewidth=3, alpha=0.5,
                                ecolor=seen["color"], yerr=[group["median"] - interval[0],
                                                            interval[1] - group["median"]])
            # drawn over the series (zorder), since a median can sit right on it; a marker
            # too, as a quick run measures one lease, where the line is a single point
            ax.plot(leases, [lease + tick_for(lease) for lease in leases], color="black",
                    linestyle=(0, (4, 2)), linewidth=1.5, marker="_", markersize=14,
                    label="lease + tick", zorder=5)
            ax.set_xticks(leases)
            # from zero, the lease being a length; one lease (a quick run's) in the middle
            ax.set_xlim(0, max(leases) * (1.1 if len(leases) > 1 else 2.0))
            label(ax, ax.get_title(), "lease (s)", "kill → other worker's pass starts (s)")
            ax.legend(loc="upper left")  # the lines rise to the right: the corner is empty
    # one scale for every panel, from zero: how far under lease + tick each one is
    top = max(ax.get_ylim()[1] for ax in axes.flat)
    for ax in axes.flat:
        ax.set_ylim(0, top * 1.05)  # headroom: lease + tick can be the highest point
    fig.suptitle("Takeover after a SIGKILL: median, whiskers min to max", fontsize=10)
    return fig
