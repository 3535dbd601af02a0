"""`fail`: the answer to a pass whose body raised. The failure is recorded in the checkpoint
under the pass's claim first; only then is the workflow woken after its policy's backoff, or
left failed. A pass that cannot write the record (fenced, or its store down) decides nothing:
the workflow is handed back as for any other refused write."""

from __future__ import annotations

import logging
from datetime import datetime

from durability.determinism import Nondeterministic
from durability.endings import Ended, ending_key
from durability.failures import FAILURE, Failure, attempt, describe, leaves
from durability.failures import next_key as next_engine_key
from durability.faults import StoreDown, patiently
from durability.signals import Fenced
from durability.values import Pass
from durability.worker.concluding import finish_ended, tell_parent, withdraw
from durability.worker.crew import Crew
from durability.worker.running import Running

__all__ = ["fail"]


log = logging.getLogger("durability.worker")


async def fail(crew: Crew, running: Running, holder: Pass, failure: BaseException) -> None:
    """Record a failed attempt, then wake the workflow after its backoff or leave it failed."""
    workflow = running.delivery.workflow
    run = running.run
    records = dict(run.records) if run is not None else await crew.checkpointer.load(workflow)
    ours = {id(leaf) for leaf in leaves(failure)}
    step = next(
        (noted for noted in (run.failed_steps if run is not None else ()) if id(noted.error)
         in ours),
        None,
    )
    policy = step.retry if step is not None and step.retry is not None else crew.retry
    key = step.key if step is not None else None
    if isinstance(failure, Nondeterministic):
        key = failure.reached  # the step it stopped at, which never ran

    tried = attempt(records, key)
    now = crew.clock()
    due: datetime | None = None
    if policy.retries(failure) and tried < policy.attempts:
        due = now + policy.pause(tried)
    kind, message, trace = describe(failure)
    noted = Failure(key, kind, message, trace, tried, now, due)
    crew.emit("failed", workflow, error=failure, attempt=tried, due=due)
    log.error(
        "workflow %s failed on attempt %d (%s): %s",
        workflow,
        tried,
        "body" if key is None else f"step {key!r}",
        f"trying again at {due.isoformat()}" if due else "it has failed for good",
        exc_info=failure,
    )
    name = next_engine_key(records, FAILURE)
    try:
        await patiently(
            crew.checkpointer,
            workflow,
            lambda: crew.checkpointer.record(holder, name, noted.to_record()),
        )
    except Fenced as fenced:
        crew.emit("fenced", workflow, error=fenced)
        log.warning("pass of %s was fenced recording its failure: %s", workflow, fenced)
        await crew.hand_back(running.delivery, None)
        return
    except StoreDown as lost:
        crew.emit("unavailable", workflow, error=lost)
        log.warning("pass of %s could not record its failure: %s", workflow, lost)
        await crew.give_back(running.delivery, holder)
        return
    if due is not None:
        # A sleep this pass reached may be recorded too: wake at whichever comes first (the
        # pass that comes sleeps on, or tries the step again).
        deadline = run.deadline if run is not None else None
        wake = due if deadline is None else min(due, deadline.due)
        crew.emit("retrying", workflow, attempt=tried, due=due)
        state = "sleeping"
        detail: dict[str, object] = {"until": wake.isoformat(), "failure": noted.to_record()}
        await crew.retain(workflow, wake)
        await crew.wake(running.delivery, wake)
    else:
        # The workflow's ending, after its failure record and with the finish: a cancel that
        # lands between the two refuses this write, and the workflow ends cancelled, never both.
        ending = Ended("failed", failure=noted).to_record()
        detail = {"failure": noted.to_record()}
        # A store that forgets idle checkpoints keeps a failed one a full retention from
        # now, so the failure is there to read (and to retry) for that long at least.
        await crew.retain(workflow, now)
        crew.emit("dead", workflow, error=failure, attempt=tried)
        key = ending_key(records)
        landed = await finish_ended(crew, running, holder, key, ending, "failed", detail)
        if landed is False:
            await withdraw(crew, running)
        elif landed:
            ended = Ended("failed", failure=noted)
            await tell_parent(crew, workflow, records, ended, running.delivery.priority)
        return
    await crew.finish(holder, running.delivery, state, detail)
