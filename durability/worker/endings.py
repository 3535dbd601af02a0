"""The ways a pass ends, one type each, and `answer`: the one place that says, for each, what
the checkpoint and the queue are told (the table is in its docstring).

Every ending first lets a delivery renewal in flight land (`Running.quiet`), so the answer is
not overtaken by an older renewal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import assert_never

from durability.failures import Failure
from durability.faults import StoreDown
from durability.signals import Fenced, Interruption
from durability.stepwise import Blocked, Completed, Sleeping
from durability.values import Pass
from durability.worker.concluding import AlreadyEnded, complete, tell_parent
from durability.worker.crew import Crew
from durability.worker.failing import fail
from durability.worker.running import Running

__all__ = [
    "AlreadyFailed",
    "Busy",
    "EndedBefore",
    "Ending",
    "FailedBefore",
    "OtherHeld",
    "Raised",
    "Settled",
    "Stopped",
    "Superseded",
    "Unreachable",
    "Withdrawn",
    "answer",
]

log = logging.getLogger("durability.worker")


@dataclass(frozen=True, slots=True)
class Settled:
    outcome: Completed[object] | Sleeping | Blocked


@dataclass(frozen=True, slots=True)
class Busy:
    pass


@dataclass(frozen=True, slots=True)
class OtherHeld:
    pass


@dataclass(frozen=True, slots=True)
class Stopped:
    pass


@dataclass(frozen=True, slots=True)
class Superseded:
    fenced: Fenced


@dataclass(frozen=True, slots=True)
class Unreachable:
    lost: StoreDown


class AlreadyFailed(Interruption):
    """Raised before the body runs when its checkpoint says the workflow has failed: nothing
    is run, whatever woke it."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"failed: {failure.type}: {failure.message}")
        self.failure = failure


@dataclass(frozen=True, slots=True)
class FailedBefore:
    dead: AlreadyFailed


@dataclass(frozen=True, slots=True)
class Raised:
    error: BaseException


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """The workflow was cancelled under the pass (`Cancelled` reached the body's end)."""


@dataclass(frozen=True, slots=True)
class EndedBefore:
    ended: AlreadyEnded


Ending = (
    Settled
    | Busy
    | OtherHeld
    | Stopped
    | Superseded
    | Unreachable
    | FailedBefore
    | Raised
    | Withdrawn
    | EndedBefore
)


async def answer(crew: Crew, running: Running, holder: Pass | None, ending: Ending) -> None:
    """Tell the checkpoint and the queue how the pass ended. `holder` is the pass's claim:
    None only for `Busy`, whose claim was refused.

    | ending | why | the checkpoint hears | the queue hears |
    |---|---|---|---|
    | `Settled` | the body returned | its standing; release | `wake_at(due)` if asleep, done |
    | `Busy` | a live pass holds the claim | nothing | `wake_at(now + contended)`; done |
    | `OtherHeld` | the body met another workflow held | release | as `Busy` |
    | `Stopped` | the keeper cancelled it (budget, claim) | nothing: not ours now | hand back now |
    | `Superseded` | a write was fenced: a newer pass | nothing | hand back now |
    | `Unreachable` | a store write kept failing | release, if it answers | hand back, else lapse |
    | `FailedBefore` | it had failed; only retry runs it | the failed standing again | done |
    | `Raised` | the body raised (`failing`) | failure record; standing | `wake_at(backoff)`; done |
    | `Withdrawn` | cancelled under it (`Cancelled`) | nothing: the cancel fenced it | done |
    | `EndedBefore` | it had ended (completed, cancelled) | its standing again | done |

    A completed body's ending is written with its finish (`concluding.complete`); refused
    there, the pass is `Withdrawn` if the workflow was cancelled, else handed back.
    """
    delivery = running.delivery
    if isinstance(ending, Busy):
        await crew.look_again(delivery, running.reclaimed)
        return
    if type(ending) is Settled:  # every pass whose body returned: told here, not by `_told`
        crew.emit("outcome", delivery.workflow, outcome=ending.outcome)
    else:
        _told(crew, delivery.workflow, ending)
    if running.extending is None:
        running.unnudge()  # no renewal was ever sent: nothing to let land, so no await
    else:
        await running.quiet()
        # A renewal that landed changed the delivery (the set's receipt): answer for that one.
        delivery = running.delivery
    assert holder is not None
    match ending:
        case Settled(outcome=outcome):
            if isinstance(outcome, Completed):
                await complete(crew, running, holder, outcome.value)
            else:
                await _settled(crew, running, holder, outcome)
        case OtherHeld():
            await crew.checkpointer.release(holder)
            await crew.look_again(delivery, running.reclaimed)
        case Stopped() | Superseded():
            await crew.hand_back(delivery, None)
        case Unreachable():
            await crew.give_back(delivery, holder)
        case FailedBefore(dead=dead):
            # Written again: the pass that failed it may have died before its standing landed.
            await crew.finish(holder, delivery, "failed", {"failure": dead.failure.to_record()})
        case Raised(error=error):
            await fail(crew, running, holder, error)
        case Withdrawn():
            await crew.scheduler.done(delivery)
        case EndedBefore(ended=before):
            # Written again: the pass (or cancel) that ended it may have died before its
            # standing landed.
            await crew.finish(holder, delivery, before.ending.state, {})
            run = running.run
            if run is not None:  # a child's delivery lost before: given again
                priority = delivery.priority
                await tell_parent(crew, holder.workflow, run.records, before.ending, priority)
        case Busy():
            raise AssertionError("answered above")
        case _:
            assert_never(ending)


def _told(crew: Crew, workflow: str, ending: Ending) -> None:
    """What the observer and the log hear of each ending."""
    match ending:
        case Busy() | Settled():  # (`Settled` is told by `answer` itself: every pass's)
            pass
        case OtherHeld():
            log.info("a pass of %s found another workflow held; looking again", workflow)
        case Stopped():
            crew.emit("expired", workflow)
        case Superseded(fenced=fenced):
            crew.emit("fenced", workflow, error=fenced)
            log.warning("pass of %s was fenced: %s", workflow, fenced)
        case Unreachable(lost=lost):
            # Not the workflow's failure: what it recorded stands, and the step whose record
            # did not land runs again on the next pass.
            crew.emit("unavailable", workflow, error=lost)
            log.warning("pass of %s stopped: %s", workflow, lost)
        case FailedBefore(dead=dead):
            crew.emit("dead", workflow, error=dead, attempt=dead.failure.attempt)
            log.info("%s has failed; not running it (durable.retry brings it back)", workflow)
        case Raised():
            pass
        case Withdrawn():
            crew.emit("cancelled", workflow)
        case EndedBefore():
            log.info("%s has ended; not running it", workflow)
        case _:
            assert_never(ending)


async def _settled(
    crew: Crew, running: Running, holder: Pass, outcome: Sleeping | Blocked
) -> None:
    # The standing is written with the finish (`Crew.finish`), while the claim still holds
    # or in the same step as its release: a status reads "running" until it lands. (A
    # completed body's ending goes with its finish: `concluding.complete`, from `answer`.)
    workflow = holder.workflow
    state: str
    detail: dict[str, object]
    match outcome:
        case Sleeping(due=due):
            state, detail = "sleeping", {"until": due.isoformat()}
            await crew.retain(workflow, due)
            await crew.wake(running.delivery, due)
        case Blocked(waiting=waiting, listening=listening):
            state = "blocked"
            detail = {"waiting": sorted(waiting), "listening": sorted(listening)}
            await crew.retain(workflow, crew.clock())
        case _:
            assert_never(outcome)
    await crew.finish(holder, running.delivery, state, detail)
