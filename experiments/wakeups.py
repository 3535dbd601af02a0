"""`wakeups`: is a wakeup that lands while a pass is running ever lost?

The race every queue design must win: a workflow's pass is running when someone sends it new
input (`arrive`), so the pass cannot see it; the wakeup that input brings must survive the pass
answering for its own delivery, or the input waits forever. Here a worker runs `bodies.poked`
(each pass records how many pokes it saw, in a step that holds the pass for `hold_ms`), and a
client pokes each workflow at a random moment inside its first pass (just after the pass
started, or a few milliseconds before it ends, when the pass is about to answer for its
delivery). A wakeup is *lost* when no later pass ever recorded seeing the poke.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Any

from experiments.backends import Backend
from experiments.harness import Lab

NAME = "wakeups"
TITLE = "wakeups raced against running passes"
#: How many backends a quick run measures at once (its figures are counts of races and losses); a
#: full run takes one at a time.
SIDE_BY_SIDE = 3
HOLD_MS = 20.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    # `wake=False` pokes without a wakeup: every one must then count as lost (the tests'
    # control that a lost wakeup would be seen).
    return [{"races": 40 if quick else 300, "wake": True}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
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


def summary(frame: Any) -> Any:
    table = frame.pivot_table(index="backend", columns="metric", values="value", aggfunc="sum",
                              sort=False).reset_index()
    return table[["backend", "races", "lost"]]


def draw(frame: Any) -> Any:
    """A bar a backend, family by family: the wakeups that raced a pass (pale), the ones lost
    over it (solid), and the count in words at its end."""
    from matplotlib.patches import Patch

    from experiments.figures import figure, label, look, nothing, order

    table = summary(frame)
    names = order(table["backend"])
    table = table.set_index("backend").reindex(names)
    fig, axes = figure(width=7.0, height=1.4 + 0.38 * max(len(names), 3))
    ax = axes[0][0]
    if not names:
        nothing(ax, "no wakeup races in this run")
        return fig
    for i, backend in enumerate(names):
        seen = look(backend)
        races, lost = (float(table.at[backend, c]) for c in ("races", "lost"))
        if races != races:  # no races measured: say so rather than draw a zero
            ax.annotate("not measured", (0, i), xytext=(4, 0), textcoords="offset points",
                        va="center", color="#888888")
            continue
        ax.barh(i, races, height=0.6, color=seen.colour, alpha=0.3, edgecolor=seen.colour)
        if lost == lost and lost > 0:
            ax.barh(i, lost, height=0.6, color=seen.colour)
        words = "none lost" if lost == 0 else f"{lost:,.0f} lost" if lost == lost else "lost: ?"
        ax.annotate(f"{races:,.0f} raced, {words}", (races, i), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.margins(x=0.3)  # room for the words at the bars' ends
    ax.set_xlim(left=0)
    ax.grid(axis="y", visible=False)
    label(ax, "Wakeups that landed mid-pass, and how many were lost", "wakeups", "")
    fig.legend(handles=[Patch(facecolor="#555555", alpha=0.3, edgecolor="#555555",
                              label="raced against a pass"),
                        Patch(facecolor="#555555", label="lost (none drawn where none was)")],
               loc="outside lower center", ncol=2)
    return fig
