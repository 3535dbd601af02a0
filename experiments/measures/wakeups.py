"""`wakeups`: is a wakeup that lands while a pass is running ever lost?

The race every queue design must win: a workflow's pass is running when someone sends it new
input (`arrive`), so the pass cannot see it; the wakeup that input brings must survive the pass
answering for its own delivery, or the input waits forever. A client pokes each workflow at a
random moment inside its first pass, early or in its last milliseconds (`measure`); the wakeup
is *lost* when no later pass ever recorded seeing the poke. A rival, which has no inbox, is
raced by enqueueing the job again under its own key for it (`KEYS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Any

from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "wakeups"
TITLE = "wakeups raced against running passes"
#: How many backends a quick run measures at once (its figures are counts of races and losses); a
#: full run takes one at a time.
SIDE_BY_SIDE = 3
HOLD_MS = 20.0
#: How long a rival's pokes may take to run before the ones that did not count as lost.
PATIENCE_S = 12.0


#: How each rival's race enqueues the poke: under its own key for one job per workflow
#: (True), or, where it has none, as a job of its own (False); that key in a word, and what
#: it does.
KEYS: dict[str, tuple[bool, str, str]] = {
    "saq": (True, "job key", "job key = workflow: refused while the job is queued or running"),
    "arq": (True, "job id", "_job_id = workflow: refused while queued, running or its result"
            " is kept"),
    "streaq": (False, "no key", "no key per job: a second job, run beside the first"),
    "pgqueuer": (True, "dedupe key", "dedupe_key = workflow: refused while queued or picked"),
    "procrastinate": (True, "lock", "queueing_lock and lock = workflow: refused only while"
                      " one waits, run after the first"),
}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    # `wake=False` pokes without a wakeup: every one must then count as lost (the tests'
    # control that a lost wakeup would be seen).
    return [{"races": 40 if quick else 300, "wake": True}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A worker runs `bodies.poked` (each pass records how many pokes it saw, in a step that
    holds the pass for `HOLD_MS`), and a client pokes each workflow at a random moment inside
    its first pass: just after the pass started, or a few milliseconds before it ends, when
    the pass is about to answer for its delivery. A wakeup is lost when no later pass ever
    recorded seeing the poke."""
    if backend.rival is not None:
        return await _rival(lab, backend, params)
    races, wake = int(params["races"]), bool(params.get("wake", True))
    chance = random.Random(11)
    prefix = f"wk{uuid.uuid4().hex[:6]}"
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place) as worker,
        contextlib.AsyncExitStack() as stack,
    ):
        client = worker
        if not backend.in_process:
            client = await stack.enter_async_context(
                lab.agent(backend, place, role="client", housekeeping=False))
        await worker.request("work", body="poked", pool=16)
        for i in range(races):
            workflow = f"{prefix}-{i}"
            await client.request("arrive", workflow=workflow, key="order",
                                 value={"hold_ms": HOLD_MS})
            await worker.event("holding", workflow, timeout=30)
            # Early in the pass, or in its last milliseconds, when done is near.
            delay = chance.choice([0.0, 0.002, (HOLD_MS - 3) / 1000, (HOLD_MS - 1) / 1000])
            await asyncio.sleep(delay)
            await client.request("arrive", workflow=workflow, key="poke:1", value=i, wake=wake)
        await asyncio.sleep(2.0)  # a poll or two, and the pass the poke brings
        lost = 0
        for i in range(races):
            keys = (await client.request("records", workflow=f"{prefix}-{i}"))["keys"]
            if "saw:1" not in keys:
                lost += 1
        await worker.request("stop")
    return [
        {"metric": "races", "value": races, "unit": "count"},
        {"metric": "lost", "value": lost, "unit": "count"},
    ]


async def _rival(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The same race on a rival: a job holding for `HOLD_MS`, enqueued again mid-run.

    A rival has no inbox: the way to wake a workflow's job is to enqueue it again, and the way
    to keep one job per workflow is the rival's own key for it (`KEYS`: saq's job key, arq's
    job id, pgqueuer's dedupe key, procrastinate's queueing lock). So its race is a second
    enqueue under that key while the first job runs; it is lost when the job is not run again
    after it (`refused` counts the enqueues the rival turned down). streaq has no key per
    job: each enqueue is a job of its own, run beside the first."""
    assert backend.rival is not None
    races, once = int(params["races"]), KEYS[backend.rival][0]
    chance = random.Random(11)
    prefix = f"wk{uuid.uuid4().hex[:6]}"
    refused = 0
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place) as worker,
        lab.agent(backend, place, role="client", housekeeping=False) as client,
    ):
        await worker.request("work", body="holder", hold_ms=HOLD_MS, live=True, pool=16)
        for i in range(races):
            workflow = f"{prefix}-{i}"
            await client.request("enqueue", workflow=workflow, once=once)
            await worker.event("holding", workflow, timeout=30)
            delay = chance.choice([0.0, 0.002, (HOLD_MS - 3) / 1000, (HOLD_MS - 1) / 1000])
            await asyncio.sleep(delay)
            poked = await client.request("enqueue", workflow=workflow, once=once)
            refused += not poked["accepted"]
        keys = [f"{prefix}-{i}" for i in range(races)]
        # Until every poke it took has run, or long past a fallback poll (procrastinate's is
        # 5 s): a job that starts late is late, not lost.
        deadline = asyncio.get_running_loop().time() + PATIENCE_S
        while True:
            runs = (await worker.request("mark"))["runs"]
            again = sum(1 for key in keys if runs.get(key, 0) >= 2)
            if again >= races - refused or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        await worker.request("stop")
    lost = races - again
    return [
        {"metric": "races", "value": races, "unit": "count"},
        {"metric": "lost", "value": lost, "unit": "count"},
        {"metric": "refused", "value": refused, "unit": "count"},
    ]


def summary(frame: Any) -> Any:
    """Races and lost wakeups per backend, the share lost with its interval (`lost_share_lo`,
    `lost_share_hi`: `uncertainty.proportion`, so none lost of 300 still says how many could
    have been); for a rival, the enqueues it refused and how the poke was enqueued (`KEYS`)."""
    from experiments.readers.uncertainty import proportion

    table = frame.pivot_table(index="backend", columns="metric", values="value", aggfunc="sum",
                              sort=False).reset_index()
    if "refused" not in table:
        table["refused"] = float("nan")
    shares = [proportion(lost, races) for lost, races in zip(table["lost"], table["races"],
                                                             strict=True)]
    table["lost_share"] = [i.estimate for i in shares]
    table["lost_share_lo"] = [i.lo for i in shares]
    table["lost_share_hi"] = [i.hi for i in shares]
    table["how"] = [KEYS[b][2] if b in KEYS else "" for b in table["backend"]]
    return table[["backend", "races", "lost", "lost_share", "lost_share_lo", "lost_share_hi",
                  "refused", "how"]]


def share(found: Any) -> str:
    """A share lost with its interval, as the figure and the tables say it: "at most 1.3%"
    where none was lost, else "74-84%" (an en dash)."""
    lo, hi = found.lo, found.hi
    if hi != hi:
        return ""
    if found.estimate == 0:
        return f"at most {hi:.1%}"
    digits = 0 if hi - lo >= 0.02 else 1

    def shown(value: float) -> str:
        return "0" if value == 0 else "100" if value == 1 else f"{value * 100:.{digits}f}"

    return f"{shown(lo)}\N{EN DASH}{shown(hi)}%"


def draw(frame: Any) -> Any:
    """A bar a backend, family by family: the wakeups that raced a pass (pale), the ones lost
    over it (solid) with the interval of how many could have been (whiskers), and the count in
    words at its end."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from experiments.readers.figures import figure, label, look, nothing, order
    from experiments.readers.uncertainty import LEVEL, Interval

    table = summary(frame)
    names = order(table["backend"])
    table = table.set_index("backend").reindex(names)
    fig, axes = figure(width=7.5, height=1.4 + 0.38 * max(len(names), 3))
    ax = axes[0][0]
    if not names:
        nothing(ax, "no wakeup races in this run")
        return fig
    for i, backend in enumerate(names):
        seen = look(backend)
        races, lost, refused = (float(table.at[backend, c]) for c in ("races", "lost",
                                                                       "refused"))
        if races != races:  # no races measured: say so rather than draw a zero
            ax.annotate("not measured", (0, i), xytext=(4, 0), textcoords="offset points",
                        va="center", color="#888888")
            continue
        ax.barh(i, races, height=0.6, color=seen.colour, alpha=0.3, edgecolor=seen.colour)
        if lost == lost and lost > 0:
            ax.barh(i, lost, height=0.6, color=seen.colour)
        found = Interval(float(table.at[backend, "lost_share"]),
                         float(table.at[backend, "lost_share_lo"]),
                         float(table.at[backend, "lost_share_hi"]), int(races))
        if found.hi == found.hi:  # how many could have been lost: the share's interval
            ax.errorbar([lost], [i], xerr=[[lost - found.lo * races], [found.hi * races - lost]],
                        fmt="none", ecolor="black", elinewidth=1, capsize=3)
        words = "none lost" if lost == 0 else f"{lost:,.0f} lost" if lost == lost else "lost: ?"
        if found.hi == found.hi:
            words += f" ({share(found)})"
        if refused == refused:  # a rival's: its key turned the poke away (`KEYS`)
            words += f", {refused:,.0f} refused" if refused else ", none refused"
        ax.annotate(f"{races:,.0f} raced, {words}", (races, i), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    # a rival's name with the key it was poked under, the one thing that decides its count
    ax.set_yticks(range(len(names)), [f"{b} ({KEYS[b][1]})" if b in KEYS else b for b in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    # room for the words at the bars' ends (a rival's say what it refused too)
    ax.margins(x=0.5 if table["refused"].notna().any() else 0.3)
    ax.set_xlim(left=0)
    ax.grid(axis="y", visible=False)
    label(ax, "Wakeups that landed mid-pass, and how many were lost", "wakeups", "")
    fig.legend(handles=[Patch(facecolor="#555555", alpha=0.3, edgecolor="#555555",
                              label="raced against a pass"),
                        Patch(facecolor="#555555", label="lost (none drawn where none was)"),
                        Line2D([], [], color="black", marker="|", markersize=8, linewidth=1,
                               label=f"lost: {LEVEL:.0%} interval")],
               loc="outside lower center", ncol=3)
    return fig
