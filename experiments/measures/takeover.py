"""`takeover`: a worker process is SIGKILLed holding a workflow; how long until another
worker process starts a pass on it?

Two worker processes share the queue; a workflow whose step holds the pass is submitted
(`bodies.holder`), and whichever worker starts it is killed, mid-step or just after a write
(`PHASES`). The time from the kill to the other worker's "started" event is the takeover; the
design's bound is about lease + tick (`tick_for`). Every trial meets survivors waiting for
work, as a real takeover does: the victim is replaced by a fresh worker, the workflow deleted,
and the workers left idle a moment before the next submission. A rival is killed the same way,
at its own settings (`RECOVERIES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from dataclasses import dataclass
from typing import Any

from experiments.harness.backends import Backend, Place
from experiments.harness.lab import Agent, AgentFailed, Lab
from experiments.readers.uncertainty import Interval

NAME = "takeover"
TITLE = "takeover of a killed worker's workflow"
#: How many backends a quick run measures at once (its figures are lease-bound waits of a second or
#: less, which other work beside it moves by milliseconds); a full run takes one at a time.
SIDE_BY_SIDE = 3

LEASES_S = (0.5, 1.0, 2.0, 5.0)
#: How long the workers wait, idle, before each trial's submission.
SETTLE_S = 0.7
#: When the worker holding the workflow is killed: `mid-step` a tick and a half into the step
#: (after the claim and the delivery were renewed), or `after-write` the moment an earlier
#: step's record has landed (a write is a sign of life, so the claim was fresh).
PHASES = ("mid-step", "after-write")
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"trials": "kills per configuration",
            "patience_s": "how long to wait for a rival's takeover before calling it never"}
#: The lease a rival's settings are made from: 1 s, the smallest saq's whole seconds allow.
RIVAL_LEASE_S = 1.0


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a rival takes over a dead worker's job: what it sets (`setting`, made from the
    lease: `{L}` is the lease, `{Q}` a quarter of it), and, where it never does, why
    (`never`)."""

    setting: str
    never: str = ""


#: Each rival's ways of running a dead worker's job again (saq's sweep, arq's in-progress
#: expiry, streaq's reclaim, pgqueuer's heartbeat, procrastinate's stalled-job retry), as its
#: agent names them (`experiments.harness.rivals.<rival>` says how each is set).
RECOVERIES: dict[str, dict[str, Recovery]] = {
    "saq": {
        "sweep": Recovery("heartbeat={L} s, timeout=0, retries=2, sweep each {L} s"),
        "sweep-default-retries": Recovery(
            "heartbeat={L} s, timeout=0, retries=1, sweep each {L} s",
            never="retries=1: the sweep finishes a stuck job as aborted"),
    },
    "arq": {"expiry": Recovery("job_timeout={L} s: in-progress key lives {L} + 10 s")},
    "streaq": {"reclaim": Recovery("idle_timeout={L} s")},
    "pgqueuer": {"heartbeat": Recovery("heartbeat_timeout={L} s, dequeue_timeout={L} s")},
    "procrastinate": {
        "retry-stalled": Recovery("heartbeat each {Q} s; each 1 s a task retries jobs"
                                  " stalled {L} s"),
        "none": Recovery("heartbeat each {Q} s, no task retrying stalled jobs",
                         never="nothing retries a stalled job unless the application does"),
    },
}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.rival is not None:
        return [{"lease_s": RIVAL_LEASE_S, "phase": "mid-job", "recovery": recovery}
                for recovery in RECOVERIES[backend.rival]]
    leases = (0.5,) if quick else LEASES_S
    return [{"lease_s": lease, "phase": phase} for lease in leases for phase in PHASES]


def trials(quick: bool) -> int:
    return 1 if quick else 5


def tick_for(lease_s: float) -> float:
    """The workers' tick: a quarter of the lease, at most a second, so renewal keeps up with
    short leases."""
    return min(1.0, lease_s / 4)


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    if backend.rival is not None:
        return await _rival(lab, backend, params)
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


async def _rival(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A rival's takeover: the same kill, the same two workers, at its own settings for the
    question (one of its `RECOVERIES`, made from `RIVAL_LEASE_S`), killed a tick and a half
    into a job (`mid-job`). A rival that does not run the job again within `patience_s` gives
    a `not_taken_over` row instead, and `summary` says why. Its job cannot be deleted under
    the survivor as our workflow is, so a job holds only a little past the kill (`hold`), and
    the survivor finishes it before the next trial."""
    lease, recovery = float(params["lease_s"]), str(params["recovery"])
    tick, hold = tick_for(lease), 2 * lease
    patience = float(params.get("patience_s") or lease * 6 + 20)
    options = f"takeover={recovery}"
    rows: list[dict[str, Any]] = []
    async with lab.place(backend, keep=True) as (place, _), contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            lab.agent(backend, place, role="client", housekeeping=False,
                      lease_ms=lease * 1000, options=options))
        workers = [await _worker(lab, backend, place, lease, tick, stack, options, hold)
                   for _ in range(2)]
        await asyncio.sleep(SETTLE_S)
        for trial in range(int(params.get("trials") or trials(lab.quick))):
            job = f"to{uuid.uuid4().hex[:8]}"
            await client.request("submit", prefix=job, rate=1000.0, count=1, seed=trial)
            victim = await _first_holding(workers, f"{job}-0", patience=30 + lease * 3)
            await asyncio.sleep(1.5 * tick)
            killed = victim.kill()
            survivor = next(w for w in workers if w is not victim)
            try:
                started = await survivor.event("started", f"{job}-0", timeout=patience)
            except (AgentFailed, TimeoutError):  # the wait ran out: not taken over
                rows.append({"trial": trial, "tick_s": tick, "metric": "not_taken_over",
                             "value": patience, "unit": "s"})
            else:
                rows.append({"trial": trial, "tick_s": tick, "metric": "takeover",
                             "value": (started["at"] - killed) / 1e9, "unit": "s"})
                await asyncio.sleep(hold)  # the survivor's run of it ends
            workers = [survivor,
                       await _worker(lab, backend, place, lease, tick, stack, options, hold)]
            await asyncio.sleep(SETTLE_S)
    return rows


async def _worker(lab: Lab, backend: Backend, place: Place, lease: float, tick: float,
                  stack: contextlib.AsyncExitStack, options: str = "",
                  hold: float | None = None) -> Agent:
    agent: Agent = await stack.enter_async_context(
        lab.agent(backend, place, lease_ms=lease * 1000, options=options))
    await agent.request("work", body="holder", live=True, tick_ms=tick * 1000,
                        hold_ms=None if hold is None else hold * 1000)
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
    """Per backend, lease and phase (and a rival's recovery): the trials (`n`), the median of
    those taken over with its interval (`median_lo`, `median_hi`: bootstrap over the kills),
    min, max, the bound lease + tick and the median as a share of it; for a rival how many
    were taken over, what it was set to and, where none or only some were, "never" and why
    (`typical` counts those as never in its median; here they are counted, not timed)."""
    from experiments.readers.uncertainty import quantile

    frame = frame.assign(recovery=frame["recovery"].fillna("") if "recovery" in frame
                         else "")
    keys = ["backend", "lease_s", "phase", "recovery"]
    trials_ = frame[frame["metric"].isin(["takeover", "not_taken_over"])]
    table = trials_.groupby(keys, sort=False)["metric"].agg(n="count").reset_index()
    took = frame[frame["metric"] == "takeover"].groupby(keys)["value"]
    stats = took.agg(["count", "median", "min", "max"])
    found = {key: quantile(group.to_numpy(), 0.5) for key, group in took}
    nothing = Interval(math.nan, math.nan, math.nan, 0)
    at = [tuple(k) for k in table[keys].itertuples(index=False)]
    table["median"] = [stats["median"].get(k, math.nan) for k in at]
    table["median_lo"] = [found.get(k, nothing).lo for k in at]
    table["median_hi"] = [found.get(k, nothing).hi for k in at]
    for column in ("min", "max"):
        table[column] = [stats[column].get(k, math.nan) for k in at]
    table["taken_over"] = [int(stats["count"].get(k, 0)) for k in at]
    bound = frame[frame["metric"] == "lease_plus_tick"].groupby(
        ["backend", "lease_s", "phase"])["value"].first()
    table["lease_plus_tick"] = [bound.get((b, lease, p), float("nan")) for b, lease, p in
                                zip(table["backend"], table["lease_s"], table["phase"],
                                    strict=True)]
    table["median_vs_bound"] = table["median"] / table["lease_plus_tick"]
    table["setting"] = [_recovery(b, r).setting.format(L=f"{lease:g}", Q=f"{lease / 4:g}")
                        for b, r, lease in zip(table["backend"], table["recovery"],
                                               table["lease_s"], strict=True)]
    table["note"] = [_note(b, r, n, t) for b, r, n, t in
                     zip(table["backend"], table["recovery"], table["n"], table["taken_over"],
                         strict=True)]
    return table


def _recovery(backend: str, recovery: str) -> Recovery:
    return RECOVERIES.get(backend, {}).get(recovery, Recovery(""))


def _note(backend: str, recovery: str, n: int, taken: int) -> str:
    """"never: why" where no trial was taken over, "k of n" where only some were."""
    if taken == n:
        return ""
    if taken == 0:
        return f"never: {_recovery(backend, recovery).never or 'not in the patience given'}"
    return f"{taken} of {n} taken over"


#: The one takeover figure quoted beside the other measures (the overview, the design
#: documents' table), named so wherever it is shown: a kill can land at any moment of a pass,
#: so both phases' kills count.
TYPICAL = "median of all kills, both phases"


def typical(frame: Any, backend: str, lease_s: float, recovery: str = "") -> Interval:
    """`TYPICAL` for one backend at one lease (a rival: at one of its `RECOVERIES`; ours have
    none, ""), as an `uncertainty.Interval` over the kills. A kill that was never taken over
    (a rival's `not_taken_over`) is longer than any that was, so it counts as `math.inf`: the
    estimate is inf where half the kills or more were never taken over, and so is a bound
    where that many of the resampled medians were; nothing becomes NaN."""
    import numpy

    from experiments.readers.uncertainty import LEVEL, RESAMPLES, SEED, quantile

    rows = frame[(frame["backend"] == backend) & (frame["lease_s"] == lease_s)]
    if "recovery" in rows:
        rows = rows[rows["recovery"].fillna("").astype(str) == recovery]
    took = rows.loc[rows["metric"] == "takeover", "value"].to_numpy(dtype=float)
    never = int((rows["metric"] == "not_taken_over").sum())
    if not never:
        return quantile(took, 0.5)
    values = numpy.concatenate([took, numpy.full(never, math.inf)])
    n = len(values)

    def median(a: Any) -> Any:  # the middle two's mean, as numpy's, but inf + inf is inf
        ordered = numpy.sort(a, axis=-1)
        return (ordered[..., (n - 1) // 2] + ordered[..., n // 2]) / 2

    estimate = float(median(values))
    if n < 2:
        return Interval(estimate, math.nan, math.nan, n)
    drawn = median(values[numpy.random.default_rng(SEED).integers(0, n, size=(RESAMPLES, n))])
    tail = (1 - LEVEL) / 2  # order statistics: interpolating toward inf would give NaN
    return Interval(estimate, float(numpy.quantile(drawn, tail, method="lower")),
                    float(numpy.quantile(drawn, 1 - tail, method="higher")), n)


def draw(frame: Any) -> Any:
    """Per phase, the median takeover against the lease (whiskers min to max; a thicker bar
    for the median's interval where the summary has one), beside the lease + tick bound; a row
    of panels per family where one axis would hold too many backends; the rivals, killed
    mid-job at their own settings, in a row of their own below."""
    from experiments.readers.figures import bounds, figure, label, look, nothing, panels

    table = summary(frame)
    if "variant" not in table:  # ours have one setting; a rival's row may name its own
        table = table.assign(variant="default")
    rivals = table[table["phase"] == "mid-job"]
    table = table[table["phase"] != "mid-job"]
    series = list(table.groupby(["backend", "variant"], sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series))
    if not groups and not len(rivals):
        groups = [("", [])]
    rows = len(groups) + (1 if len(rivals) else 0)
    fig, axes = figure(columns=2, rows=rows, width=6.5,
                       height=4.5 if rows == 1 else 3.8 if rows <= 3 else 3.0)
    leases = sorted(table["lease_s"].unique())
    for row, (title, chosen) in zip(axes, groups, strict=False):
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
    ours = [ax for row in axes[:len(groups)] for ax in row]
    # one scale for every panel of ours, from zero: how far under lease + tick each one is
    top = max((ax.get_ylim()[1] for ax in ours), default=1.0)
    for ax in ours:
        ax.set_ylim(0, top * 1.05)  # headroom: lease + tick can be the highest point
    if len(rivals):
        left, right = axes[-1]
        grid = left.get_subplotspec().get_gridspec()
        left.remove()
        right.remove()
        _draw_rivals(fig.add_subplot(grid[-1, :]), rivals)
    fig.suptitle("Takeover after a SIGKILL: median, whiskers min to max", fontsize=10)
    return fig


def _draw_rivals(ax: Any, table: Any) -> None:
    """The rivals' takeovers as bars in their families' looks (median, whiskers min to max, a
    thicker bar for the median's interval), "never" written where it was, beside ours' bound
    at the same lease."""
    from experiments.readers.figures import bounds, label, look, order

    table = table.assign(rank=[order(table["backend"]).index(str(b)) for b in table["backend"]])
    table = table.sort_values("rank", kind="stable")
    names = [f"{b} ({r})" for b, r in zip(table["backend"], table["recovery"], strict=True)]
    y = list(range(len(table)))
    colours = [look(str(b)).colour for b in table["backend"]]
    ax.barh(y, table["median"].fillna(0), color=colours, height=0.6,
            xerr=[(table["median"] - table["min"]).fillna(0),
                  (table["max"] - table["median"]).fillna(0)],
            error_kw={"elinewidth": 0.8, "capsize": 2})
    interval = bounds(table, "median")
    if interval is not None:
        ax.errorbar(table["median"], y, fmt="none", elinewidth=3, alpha=0.5, ecolor="black",
                    xerr=[(table["median"] - interval[0]).fillna(0),
                          (interval[1] - table["median"]).fillna(0)])
    for i, (median, most, note, hue) in enumerate(zip(table["median"], table["max"],
                                                       table["note"], colours, strict=True)):
        never = note.startswith("never")
        # past the whisker, so the figure does not sit on it
        ax.annotate(note.split(":")[0] if never else f"{median:.3g} s" + (
                    f" ({note})" if note else ""), (0 if never else most, i),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=9,
                    color=hue if never else "black", fontweight="bold" if never else None)
    lease = float(table["lease_s"].iloc[0])
    ax.axvline(lease + tick_for(lease), color="black", linestyle=(0, (4, 2)), linewidth=1.5,
               label=f"ours: lease + tick at a {lease:g} s lease")
    ax.legend(loc="lower right")
    ax.set_xlim(0, max(float(table["max"].fillna(0).max()), lease * 2) * 1.15)  # labels
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    label(ax, f"Rivals, killed mid-job (their settings made from a {lease:g} s lease)",
          "kill → another worker runs the job (s)", "")
