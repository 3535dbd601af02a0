"""The moves an operator may make on one workflow, as a table (`ACTIONS`): each names itself,
asks its question, says when it applies, and runs. The command line makes a subcommand of
each entry and the page a button, so a new move (retry, cancel, delete) is one entry here.

How a move ends is data (`Acted`): `Done`, `Refused` (not in a state it applies to, or held
by a live pass: nothing changed) or `Gone` (no such workflow).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from durability.checks import check_workflow
from durability.endings import cancel
from durability.interfaces import Durable
from durability.signals import Contended
from durability.status import Status, retry, status

__all__ = ["ACTIONS", "Acted", "Action", "Done", "Gone", "Refused", "act"]


@dataclass(frozen=True, slots=True)
class Done:
    said: str


@dataclass(frozen=True, slots=True)
class Refused:
    said: str


@dataclass(frozen=True, slots=True)
class Gone:
    said: str


Acted = Done | Refused | Gone


@dataclass(frozen=True, slots=True)
class Action:
    """One move: `name` (the subcommand, the form's value), `title` (the button), `question`
    (the confirmation, `{id}` standing for the workflow), `applies` (whether the page offers
    it for a status), `run` (the move itself), and whether it cannot be undone (`lasting`:
    the command line then asks for `--yes`)."""

    name: str
    title: str
    question: str
    applies: Callable[[Status], bool]
    run: Callable[[Durable, str], Awaitable[Acted]]
    lasting: bool = False


async def _retry(durable: Durable, workflow: str) -> Acted:
    try:
        again = await retry(durable.checkpointer, durable.scheduler, workflow)
    except Contended:
        return Refused(f"a live pass holds {workflow!r}; nothing was changed")
    if again:
        return Done(f"{workflow!r} is queued to run again from its last recorded step")
    found = await status(durable.checkpointer, workflow)
    if found.state == "unknown":
        return Gone(f"no workflow {workflow!r} in this store")
    return Refused(f"{workflow!r} has not failed (it is {found.state}); nothing was changed")


async def _cancel(durable: Durable, workflow: str) -> Acted:
    found = await status(durable.checkpointer, workflow)
    if found.state == "unknown":
        return Gone(f"no workflow {workflow!r} in this store")
    if await cancel(durable, workflow):
        return Done(f"{workflow!r} is cancelled: nothing more of it runs")
    ended = await status(durable.checkpointer, workflow)
    return Refused(f"{workflow!r} has ended already (it is {ended.state}); nothing was changed")


#: The states a workflow may be cancelled in (a running one too: it stops at its next step).
_CANCELLABLE = frozenset({"queued", "running", "sleeping", "blocked"})


async def _delete(durable: Durable, workflow: str) -> Acted:
    found = await status(durable.checkpointer, workflow)
    if found.state == "unknown" and not await durable.checkpointer.load(workflow):
        return Gone(f"no workflow {workflow!r} in this store")
    gone = await durable.delete(workflow)
    return Done(f"{workflow!r} is deleted: its wakeups cancelled, {gone} record(s) forgotten")


#: Every move, by name, in the order the page shows them.
ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            "retry",
            "Retry",
            "Run {id} again from its last recorded step?",
            lambda found: found.state == "failed",
            _retry,
        ),
        Action(
            "cancel",
            "Cancel",
            "Cancel {id}: run nothing more of it (a running pass stops at its next step)?",
            lambda found: found.state in _CANCELLABLE,
            _cancel,
            lasting=True,
        ),
        Action(
            "delete",
            "Delete",
            "Delete {id}: cancel its wakeups and forget every record? This cannot be undone.",
            lambda found: found.state != "unknown",
            _delete,
            lasting=True,
        ),
    )
}


async def act(durable: Durable, name: str, workflow: str) -> Acted:
    """Run the move `name` on `workflow` (`ValueError` for a name not in `ACTIONS`)."""
    check_workflow(workflow)
    action = ACTIONS.get(name)
    if action is None:
        raise ValueError(f"no action {name!r}; there are {', '.join(ACTIONS)}")
    return await action.run(durable, workflow)
