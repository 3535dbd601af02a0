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
    from experiments.figures import colour, figure, label, marker

    fig, axes = figure(columns=2, width=6.5, height=4.5)
    table = summary(frame)
    for ax, phase in zip(axes[0], PHASES, strict=True):
        part = table[table["phase"] == phase]
        for backend, group in part.groupby("backend", sort=False):
            ax.errorbar(group["lease_s"], group["median"],
                        yerr=[group["median"] - group["min"], group["max"] - group["median"]],
                        marker=marker(str(backend)), capsize=3, label=str(backend),
                        color=colour(str(backend)))
        if len(part):
            # Drawn over the series (zorder), since a median can sit right on it.
            leases = sorted(part["lease_s"].unique())
            # A marker too: a quick run measures one lease, where the line is a single point.
            ax.plot(leases, [lease + tick_for(lease) for lease in leases], color="black",
                    linestyle=(0, (4, 2)), linewidth=1.5, marker="_", markersize=14,
                    label="lease + tick", zorder=5)
            ax.set_xticks(leases)
            ax.set_xlim(0, max(leases) * 1.1)
            ax.set_ylim(bottom=0)  # from zero: how far under lease + tick each one is
        label(ax, f"Takeover after a SIGKILL ({phase})", "lease (s)",
              "kill → other worker's pass starts (s; median, min to max)")
        ax.legend(loc="upper left")
    return fig
