"""`lifecycle`: what a cancel and a waited-for result cost on each store.

Three questions, asked inside one agent process that runs a worker beside its client, so the
worker's observer events and the client's clock are one clock: cancel to stopped (a pass
mid-step, a sleeper, a blocked one), ending to result, and the cancel/finish race, whose
`both` and `lost` must be 0. `probe` says how each is timed.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any

from durability import (
    Durable,
    Event,
    Inspectable,
    Run,
    WorkflowCancelled,
    as_dict,
    as_int,
    work,
)
from experiments.harness.backends import Backend
from experiments.harness.lab import Lab

NAME = "lifecycle"
TITLE = "cancel to stopped, ending to result, and the cancel/finish race"
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"samples": "timed cancels (of each kind) and results", "races": "cancels raced"}
#: The ways a workflow is found when it is cancelled.
CANCELS = ("mid-step", "sleeper", "blocked")
#: How long the mid-step pass's effect holds (longer than a cancel takes, so the cancel lands
#: mid-effect: the cancel is sent at most `CANCEL_WITHIN_MS` into it), and the race's last step.
HOLD_MS = 100.0
CANCEL_WITHIN_MS = 20.0
RACE_HOLD_MS = 4.0
#: The race's cancels are sent this long after its step began at most (a cancel takes a few
#: milliseconds to land: the span reaches past the pass's ending).
RACE_SPAN_MS = 30.0
#: How long anything the measure waits for may take before the sample is a failure.
PATIENCE_S = 30.0


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    return [{"samples": 20 if quick else 150, "races": 40 if quick else 200}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """One agent, its worker and client in one process (`probe`)."""
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place) as agent,
    ):
        reply = await agent.request("probe", module=__name__, timeout=1800, args=params)
    rows: list[dict[str, Any]] = reply["rows"]
    return rows


# -- inside the agent --------------------------------------------------------------------------


class _Seen:
    """What the worker told its observer and the bodies told the measure, by workflow: each
    kind's first time (wall clock, as `Event.at`), and an asyncio.Event to wait on it."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], float] = {}
        self.waiting: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)
        self.revived: set[str] = set()

    def mark(self, kind: str, workflow: str, at: float | None = None) -> None:
        self.at.setdefault((kind, workflow), time.time() if at is None else at)
        self.waiting[(kind, workflow)].set()

    def observe(self, event: Event) -> None:
        if event.kind in ("cancelled", "outcome"):
            self.mark(event.kind, event.workflow, event.at)

    async def when(self, kind: str, workflow: str) -> float:
        await asyncio.wait_for(self.waiting[(kind, workflow)].wait(), PATIENCE_S)
        return self.at[(kind, workflow)]


_seen = _Seen()


async def _mid_step(run: Run) -> object:
    order = run.input(as_dict)
    hold = float(str(order.get("hold_ms", HOLD_MS))) / 1000
    workflow = run.workflow

    async def holding() -> int:
        _seen.mark("holding", workflow)
        await asyncio.sleep(hold)
        _seen.mark("held", workflow)
        return 1

    await run.step("hold", holding, as_int)
    return await run.step("after", lambda: 2, as_int)


async def _sleeper(run: Run) -> object:
    await run.sleep("nap", timedelta(hours=1))
    return 1


async def _blocked(run: Run) -> object:
    await run.awaiting("go", as_int)

    def went() -> int:
        _seen.revived.add(run.workflow)
        return 1

    return await run.step("went", went, as_int)


async def _quick(run: Run) -> object:
    return await run.step("work", lambda: 7, as_int)


BODIES = {"mid-step": _mid_step, "sleeper": _sleeper, "blocked": _blocked, "result": _quick,
          "race": _mid_step}


def _ms(seconds: float) -> float:
    return seconds * 1000


async def probe(durable: Durable, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Run a worker for the bodies above and time each question against it.

    How each question is timed:

    - *cancel to stopped* (`CANCELS`): the `cancel` call itself, and from its return to the
      workflow being stopped: for the pass mid-step (its effect holding `HOLD_MS`), the
      worker's "cancelled" event (its next write was refused); for the sleeper and the
      blocked one, which have no pass, the first `status` read that says `cancelled`. A
      blocked one is then given its input: a step that runs after that is `revived` (0).
    - *ending to result*: from the completing pass's "outcome" event (its body returned; the
      ending's write follows) to `result` returning, so the ending's write is counted in.
    - *the race*: a cancel at a random moment around a pass's last step; `cancel` returning
      True must mean cancelled, False completed. `both` and `lost` must be 0; `cancel_won`
      and `pass_won` show both sides were reached.
    """
    if not isinstance(durable, Inspectable):
        raise TypeError(f"{type(durable).__name__} offers no status, cancel or result")
    samples, races = int(args["samples"]), int(args["races"])
    tag = uuid.uuid4().hex[:6]
    worker = asyncio.create_task(work(durable, BODIES, observer=_seen.observe))
    rows: list[dict[str, Any]] = []
    try:
        for case in CANCELS:
            for i in range(samples):
                rows += await _cancel_one(durable, durable, case, f"lc{tag}-{case}-{i}", i)
        for i in range(samples):
            rows += await _result_one(durable, f"lc{tag}-result-{i}", i)
        rows += await _race(durable, f"lc{tag}-race", races)
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    return rows


async def _state(durable: Inspectable, workflow: str) -> str:
    return (await durable.status(workflow)).state


async def _until(durable: Inspectable, workflow: str, state: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while await _state(durable, workflow) != state:
        if time.monotonic() > deadline:
            raise AssertionError(f"{workflow} never became {state}")
        await asyncio.sleep(0.005)


async def _cancel_one(durable: Inspectable, store: Durable, case: str, workflow: str, i: int
                      ) -> list[dict[str, Any]]:
    """One cancel of a workflow found `case` (`durable` and `store` are one store: its
    operator's moves and its `arrive`)."""
    await durable.start(case, {}, workflow=workflow)
    if case == "mid-step":
        await _seen.when("holding", workflow)
        await asyncio.sleep(random.Random(i).uniform(0, CANCEL_WITHIN_MS / 1000))
    else:
        await _until(durable, workflow, "sleeping" if case == "sleeper" else "blocked")
    began = time.time()
    if not await durable.cancel(workflow):
        raise AssertionError(f"cancelling {workflow} ({case}) said it had ended")
    returned = time.time()
    rows = [{"case": case, "repetition": i, "metric": "cancel", "value": _ms(returned - began),
             "unit": "ms"}]
    if case == "mid-step":
        stopped = await _seen.when("cancelled", workflow)
        held = _seen.at.get(("held", workflow), stopped)
        rows.append({"case": case, "repetition": i, "metric": "after_effect",
                     "value": _ms(stopped - held), "unit": "ms"})
    else:
        await _until(durable, workflow, "cancelled")
        stopped = time.time()
    # A pass that stopped before the cancel returned kept its caller waiting for nothing: 0.
    rows.append({"case": case, "repetition": i, "metric": "to_stopped",
                 "value": _ms(max(0.0, stopped - returned)), "unit": "ms"})
    if case == "blocked":
        await store.arrive(workflow, "go", 1)  # a wakeup after the ending: must run nothing
    return rows


async def _result_one(durable: Inspectable, workflow: str, i: int) -> list[dict[str, Any]]:
    returned = 0.0

    async def wait() -> object:
        nonlocal returned
        value = await durable.result(workflow, within=timedelta(seconds=PATIENCE_S))
        returned = time.time()
        return value

    waiter = asyncio.create_task(wait())
    await asyncio.sleep(0.05)  # the waiter listening, and its first look said "not ended"
    await durable.start("result", {}, workflow=workflow)
    value = await waiter
    if value != 7:
        raise AssertionError(f"{workflow} completed with {value!r}, not 7")
    ended = await _seen.when("outcome", workflow)
    return [{"case": "result", "repetition": i, "metric": "to_result",
             "value": _ms(returned - ended), "unit": "ms"}]


async def _race(durable: Inspectable, prefix: str, races: int) -> list[dict[str, Any]]:
    """Cancels sent at a random moment across the race's last step and a little past it."""
    chance = random.Random(7)
    counts = {"races": races, "cancel_won": 0, "pass_won": 0, "both": 0, "lost": 0}
    for i in range(races):
        workflow = f"{prefix}-{i}"
        await durable.start("race", {"hold_ms": RACE_HOLD_MS}, workflow=workflow)
        await _seen.when("holding", workflow)
        await asyncio.sleep(chance.uniform(0, RACE_SPAN_MS / 1000))
        cancelled = await durable.cancel(workflow)
        try:
            await durable.result(workflow, within=timedelta(seconds=PATIENCE_S))
            completed = True
        except WorkflowCancelled:
            completed = False
        except TimeoutError:
            completed = None
        if cancelled and completed:
            counts["both"] += 1
        elif cancelled:
            counts["cancel_won"] += 1
        elif completed:
            counts["pass_won"] += 1
        else:
            counts["lost"] += 1
    revived = len(_seen.revived)
    return [{"case": "race", "metric": name, "value": value, "unit": "count"}
            for name, value in counts.items()] + [
        {"case": "blocked", "metric": "revived", "value": revived, "unit": "count"}]
