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

A rival (`backend.rival`) is measured the same way at its own settings for the question
(`RECOVERIES`: saq's sweep, arq's in-progress expiry, streaq's reclaim, pgqueuer's heartbeat,
procrastinate's stalled-job retry), each made from the lease (1 s, or the smallest the rival
takes), killed a tick and a half into a job (`mid-job`). A rival that does not run the job
again within `patience_s` gives a `not_taken_over` row instead, and `summary` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

from experiments.backends import Backend, Place
from experiments.harness import Agent, AgentFailed, Lab

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


#: Each rival's ways of running a dead worker's job again, as its agent names them
#: (`experiments.rivals.<rival>` says how each is set).
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
    """A rival's takeover: the same kill, the same two workers, at its own settings. Its job
    cannot be deleted under the survivor as our workflow is, so a job holds only a little
    past the kill (`hold`), and the survivor finishes it before the next trial."""
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
    """Per backend, lease and phase (and a rival's recovery): the trials, the takeover's
    median, min and max, against lease + tick for ours; for a rival what it was set to and,
    where no trial was taken over, "never" and why."""
    frame = frame.assign(recovery=frame["recovery"].fillna("") if "recovery" in frame
                         else "")
    keys = ["backend", "lease_s", "phase", "recovery"]
    trials_ = frame[frame["metric"].isin(["takeover", "not_taken_over"])]
    table = trials_.groupby(keys, sort=False)["metric"].agg(n="count").reset_index()
    took = frame[frame["metric"] == "takeover"].groupby(keys)["value"]
    stats = took.agg(["count", "median", "min", "max"])
    for column in ("median", "min", "max"):
        table[column] = [stats[column].get(tuple(k), float("nan")) for k in
                         table[keys].itertuples(index=False)]
    table["taken_over"] = [int(stats["count"].get(tuple(k), 0)) for k in
                           table[keys].itertuples(index=False)]
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


def draw(frame: Any) -> Any:
    from experiments.figures import colour, figure, label, marker

    table = summary(frame)
    rivals = table[table["phase"] == "mid-job"]
    fig, axes = figure(columns=3 if len(rivals) else 2, width=6.5, height=4.5)
    if len(rivals):
        _draw_rivals(axes[0][2], rivals)
    for ax, phase in zip(axes[0][:2], PHASES, strict=True):
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
        if ax.get_legend_handles_labels()[0]:  # a run of rivals alone has none of ours
            ax.legend(loc="upper left")
    return fig


def _draw_rivals(ax: Any, table: Any) -> None:
    """The rivals' takeovers as bars (median, min to max), "never" written where it was."""
    from experiments.figures import colour, label

    names = [f"{b} ({r})" for b, r in zip(table["backend"], table["recovery"], strict=True)]
    y = list(range(len(table)))
    medians = table["median"].fillna(0)
    ax.barh(y, medians, color=[colour(str(b)) for b in table["backend"]],
            xerr=[(table["median"] - table["min"]).fillna(0),
                  (table["max"] - table["median"]).fillna(0)], capsize=3)
    for i, (median, most, note) in enumerate(zip(table["median"], table["max"], table["note"],
                                                  strict=True)):
        never = note.startswith("never")
        # Past the whisker, so the figure does not sit on it.
        ax.annotate(note.split(":")[0] if note else f"{median:.2g} s", (0 if never else most, i),
                    xytext=(6, 0), textcoords="offset points", va="center")
    lease = float(table["lease_s"].iloc[0])
    ax.axvline(lease + tick_for(lease), color="black", linestyle=(0, (4, 2)), linewidth=1.2,
               label=f"ours: lease + tick at a {lease:g} s lease")
    ax.legend(loc="lower right")
    ax.set_xlim(0, max(float(table["max"].fillna(0).max()), lease * 2) * 1.15)  # labels
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    label(ax, "Rivals, killed mid-job (settings from a 1 s lease)", "kill → another worker"
          " runs the job (s; median, min to max)", "")
