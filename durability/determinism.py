"""Changed code under workflows in flight: the order a body reached its steps, and its check.

A pass replays recorded steps by key, so a body changed under a workflow in flight (a step
renamed, moved or removed) would run on over a history it no longer matches. Each record the
body's own task makes carries its ordinal (`durability.codec.Stamped`), and the first new key
that task reaches in a pass is checked against them (`Trail` states the rule, and why a body
that did not change never trips it). `Run.patched` is the way to change a body safely.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from typing import Any

from durability.checks import ENGINE, INBOX

__all__ = ["PATCH", "Nondeterministic", "Trail"]

#: The prefix of a `run.patched(name)` record: the engine's, so no step can shadow it.
PATCH = f"{ENGINE}patch:"


def _task_lookup() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    """`asyncio.current_task(loop)` at the least cost this Python offers: every step asks it.
    Python 3.11 writes it in Python over a map of loop to running task, which is read here
    directly (the map the C tasks keep); a later Python writes it in C, and it is used as it is."""
    current: object = getattr(asyncio.tasks, "_current_tasks", None)
    if sys.version_info < (3, 12) and isinstance(current, dict):
        return current.get
    return asyncio.current_task


_running_task = _task_lookup()


class Nondeterministic(RuntimeError):
    """The body reached a step its history does not hold while a recorded step it should
    have passed by was never reached: the body changed under a workflow in flight.

    The pass stops before the new step runs (no effect of it happens) and the workflow fails
    with this message; no retry policy tries it again, since the same code would fail the same
    way. Deploy a body that guards the change with `run.patched`, then `durable.retry` it.
    """

    def __init__(self, workflow: str, reached: str, at: int, missed: str, was: int) -> None:
        super().__init__(
            f"workflow {workflow!r} reached step {reached!r} (its body's step {at + 1}),"
            f" which its history does not hold, but never reached the recorded step"
            f" {missed!r} (step {was + 1} when it ran): the body changed under this workflow"
            " (a step renamed, moved or removed); guard the change with run.patched(...)"
        )
        self.workflow = workflow
        self.reached = reached
        self.missed = missed


class Trail:
    """One pass's walk through its workflow's history: what it reached, in which order, and
    the check of its first new key. `ordinals` is the claim's (`Pass.ordinals`): `None` when
    the store read no stamps, and then the pass stamps and checks nothing.

    The rule, each part so that a body that did not change never trips it:

    - Only the body's own task is ordered: a record's ordinal is the n-th distinct key that
      task reached in its pass. Steps reached in tasks the body starts (a TaskGroup, `gather`)
      are stamped without an ordinal and never checked: their order depends on timing.
    - Only the first new key that task reaches in a pass is checked: a record stamped at that
      ordinal or below that the pass never reached is one the old body reached before this
      point and the new one does not, so the pass stops with `Nondeterministic` before the new
      step runs. Later new keys are not checked: after a step that failed and was caught, a
      later pass may legitimately take another way.
    - Values supplied from outside (`arrive`), inbox entries, the engine's records, results of
      `transact` and records written before stamps carry no ordinal and are never checked.
    """

    __slots__ = (
        "_aside", "_awaited", "_checked", "_found", "_loop", "_own", "_task", "broken",
        "checks", "placed", "stamps",
    )

    def __init__(
        self, found: Mapping[str, object], ordinals: Mapping[str, int | None] | None
    ) -> None:
        self._found = found  # the records as the pass found them (not its own writes)
        self._own = ordinals
        #: Whether this pass stamps what it records (the store reads stamps back).
        self.stamps = ordinals is not None
        # The body runs in the task that makes the Run (`resume`'s): its steps are ordered. A
        # Run made outside a loop (a test's `passing`) takes the first task that reaches a step.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._task = None if self._loop is None else _running_task(self._loop)
        #: What the pass reached in the body's own task, at its ordinal (`stamp`'s answer, read
        #: in place by `Recorder.record`); keys reached elsewhere are kept unordered.
        self.placed: dict[str, int] = {}
        self._aside: set[str] = set()
        self._awaited: set[str] = set()  # keys read as supplied values (`awaiting`)
        self._checked = False
        #: The `Nondeterministic` this pass met, if any: every new key after it is refused.
        self.broken: Nondeterministic | None = None
        #: Whether `new` has anything to do: a check is still due (the claim found stamped
        #: records and no new key was checked yet), or the pass broke. A caller may skip `new`
        #: while it is False (a fresh workflow's pass: nothing stamped to check against).
        self.checks = bool(ordinals)

    def reach(self, key: str) -> int | None:
        """Note that the pass reached `key`; its ordinal if the body's own task reached it."""
        loop = self._loop
        if loop is None:  # made outside a loop: the first task to reach a step is the body's
            loop = self._loop = asyncio.get_running_loop()
            self._task = _running_task(loop)
        if _running_task(loop) is not self._task:
            self._aside.add(key)
            return None
        placed = self.placed.get(key)
        if placed is None:
            placed = self.placed[key] = len(self.placed)
        return placed

    def awaited(self, key: str) -> int | None:
        """`reach` for a key whose value is supplied from outside."""
        self._awaited.add(key)
        return self.reach(key)

    def touch(self, key: str) -> None:
        """Note that the pass reached `key` without giving it an ordinal (a patch)."""
        self._aside.add(key)

    def stamp(self, key: str) -> int | None:
        """The ordinal a record of `key` written now carries: the one the body's own task
        reached it at, whichever task produced it (that task's code reaches it there on every
        pass), or none."""
        return self.placed.get(key)

    def new(self, workflow: str, key: str, ordinal: int | None) -> None:
        """`key`, reached at `ordinal`, is not recorded and is about to be produced (or waited
        on): raise `Nondeterministic` if it is the first new key of the body's own task and a
        record stamped at `ordinal` or below was never reached; refuse every new key after."""
        if self.broken is not None:
            raise self.broken
        if ordinal is None or self._checked:
            return
        self._checked, self.checks = True, False
        own = self._own
        if not own:
            return
        missed: str | None = None
        lowest = ordinal + 1
        placed, aside = self.placed, self._aside
        for recorded, at in own.items():
            if at is not None and at < lowest and recorded not in placed and recorded not in aside:
                missed, lowest = recorded, at
        if missed is not None:
            self.broken = Nondeterministic(workflow, key, ordinal, missed, lowest)
            self.checks = True
            raise self.broken

    def first_here(self, records: Mapping[str, object]) -> bool:
        """Whether the workflow reaches this point for the first time, as far as its history
        tells: no record it holds lies past it (`run.patched`'s answer).

        Past it is a record the pass has not reached that the workflow made itself (stamped),
        or, for a workflow whose records predate stamps (the pass replayed one of its own
        that carries none), any such record that is not an inbox entry or the engine's.
        """
        if self.broken is not None:
            raise self.broken
        own = self._own or {}
        placed, aside = self.placed, self._aside
        unstamped = {key for key in self._found if key not in own and not _outside(key)}
        legacy = any(
            (key in placed or key in aside) and key not in self._awaited for key in unstamped
        )
        for key in records:
            if key in placed or key in aside:
                continue
            if key in own or (legacy and key in unstamped):
                return False
        return True


def _outside(key: str) -> bool:
    """An inbox entry or an engine record: never a step the body recorded."""
    return key.startswith(INBOX) or key.startswith(ENGINE)
