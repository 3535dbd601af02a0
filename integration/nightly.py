"""The example's scheduled workflows: a nightly report, started by a schedule kept in the store.

`durability-worker --nightly "0 2 * * *"` keeps the schedule `nightly-report` (added at every
start: adding it unchanged keeps it as it stands); any worker fires it, each firing once, and
whichever worker takes the firing's workflow runs the body its firing names. A firing naming a
body no worker here runs fails, recorded on its workflow (`status` says why), not lost: it can
be retried once a worker that knows the body runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from durability import Run, as_dict
from durability.schedules import Firing

__all__ = ["BODIES", "NIGHTLY", "UnknownBody", "report", "run_firing"]

#: The nightly schedule's name, and the body it names.
NIGHTLY = "nightly-report"


class UnknownBody(LookupError):
    """A firing names a body this worker does not run: recorded as the workflow's failure.
    (`durability.bodies.by_name` says the same for `work(durable, {...})`; the example's one
    body dispatches orders and firings alike, so it says it here.)"""


async def report(run: Run, firing: Firing) -> object:
    """Stands in for a nightly reconciliation: one step, recorded once per firing."""
    return await run.step(
        "reported",
        lambda: {"night": firing.at.date().isoformat(), "for": firing.input},
        as_dict,
    )


#: The bodies a firing may name, by name.
BODIES: Mapping[str, Callable[[Run, Firing], Awaitable[object]]] = {NIGHTLY: report}


async def run_firing(run: Run, firing: Firing) -> object:
    """Run the body `firing` names, or fail the workflow saying it is unknown here."""
    body = BODIES.get(firing.body)
    if body is None:
        raise UnknownBody(
            f"no body named {firing.body!r} runs here (schedule {firing.schedule!r});"
            f" known: {', '.join(sorted(BODIES))}"
        )
    return await body(run, firing)
