"""How a pass writes its workflow's ending (`durability.endings`): a completed body's value,
with the finish in one step where the store can (`FinishingEnded`), and what a pass does when
it finds the workflow already ended or cancelled under it.

Not to undo: a completed pass's ending goes with its finish, not as a write before it, so a
workflow that completes costs the round trips it always did.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from durability.children import STARTED, delivery, parent_of
from durability.codec import Unencodable
from durability.endings import Ended, completion, ending_key
from durability.faults import StoreDown, patiently
from durability.signals import Fenced, Interruption
from durability.values import Pass
from durability.wakeups import arrive
from durability.worker.crew import Crew
from durability.worker.running import Running

__all__ = ["AlreadyEnded", "complete", "finish_ended", "tell_parent", "withdraw"]

log = logging.getLogger("durability.worker")


class AlreadyEnded(Interruption):
    """Raised before the body runs when its checkpoint holds the workflow's ending: nothing is
    run, whatever woke it."""

    def __init__(self, ending: Ended) -> None:
        super().__init__(f"ended: {ending.state}")
        self.ending = ending


async def complete(crew: Crew, running: Running, holder: Pass, value: object) -> None:
    """The body returned `value`: write the ending, the completed standing, and finish."""
    run = running.run
    key = running.ending_key
    if key is None:
        key = ending_key(run.records if run is not None else {})
    record = completion(value)
    try:
        ours = await finish_ended(crew, running, holder, key, record, "completed", {})
    except Unencodable:  # the value cannot be kept: the ending says so, and of what type
        unkept = completion(value, kept=False)
        ours = await finish_ended(crew, running, holder, key, unkept, "completed", {})
    if ours is False:
        await withdraw(crew, running)
    elif ours and run is not None and STARTED in run.records:  # a child: tell its parent
        ended = Ended("completed", value)
        await tell_parent(crew, holder.workflow, run.records, ended, running.delivery.priority)


async def tell_parent(
    crew: Crew, workflow: str, records: Mapping[str, object], ending: Ended, priority: int = 0
) -> None:
    """If `workflow` is a child, supply its ending to its parent under the child's key (which
    wakes the parent, as an `arrive` does, at `priority`: the child's, which it inherited from
    its parent). A delivery that fails is logged: the child's next wakeup (its parent starts it
    again on every pass that waits for it) delivers it again."""
    found = parent_of(records)
    if found is None:
        return
    parent, key = found
    told = delivery(workflow, ending.to_record())
    try:
        await arrive(crew.durable, parent, key, told, priority)
    except Exception:
        log.exception("telling %s that its child %s ended failed", parent, workflow)


async def finish_ended(
    crew: Crew,
    running: Running,
    holder: Pass,
    key: str,
    record: object,
    state: str,
    detail: dict[str, object],
) -> bool | None:
    """The ending `record` written as `key` with the finish (`FinishingEnded`), asked
    patiently; False if the claim was no longer the pass's, None if the store stayed down or
    refused it (the delivery lapses, or is answered, and a later pass ends it)."""
    durable = crew.ending  # asked once per worker: a protocol check costs more than a pass
    workflow = holder.workflow
    delivery = running.delivery
    if durable is None:
        try:
            await patiently(
                crew.checkpointer, workflow, lambda: crew.checkpointer.record(holder, key, record)
            )
        except Fenced:
            return False
        await crew.finish(holder, delivery, state, detail)
        return True
    try:
        return await patiently(
            crew.checkpointer,
            workflow,
            lambda: durable.finish_ended(holder, delivery, key, record, state, detail),
        )
    except StoreDown as lost:
        crew.emit("unavailable", workflow, error=lost)
        log.warning("ending %s failed; its delivery lapses and the next pass ends it", workflow)
        return None
    except Unencodable:
        raise
    except Exception:
        # Refused outright (not a passing fault): finish without it, as `Crew.finish` does
        # with a standing; the next wakeup's pass replays the body and ends it again.
        log.exception("the store refused finishing %s with its ending; finishing without", workflow)
        await crew.durable.finish(holder, delivery)
        return None


async def withdraw(crew: Crew, running: Running) -> None:
    """The pass lost its claim at its end: if the workflow was cancelled, answer the delivery
    (there is nothing left to run); otherwise hand it back, as for any fenced pass."""
    run = running.run
    workflow = running.delivery.workflow
    if run is not None and await run.cancelled():
        crew.emit("cancelled", workflow)
        log.info("%s was cancelled; its pass stopped", workflow)
        await crew.scheduler.done(running.delivery)
        return
    token = 0 if running.holder is None else running.holder.token
    crew.emit("fenced", workflow, error=Fenced(workflow, token, "its ending was refused"))
    await crew.hand_back(running.delivery, None)
