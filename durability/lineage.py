"""The parts of `Run` about where a workflow comes from and where its body changed: its input
(`durable.start`), the children it starts (`run.child`, `durability.children`), and the patches
that change a body safely (`run.patched`, `durability.determinism`).

A mixin, so `Run` stays one pass's steps and suspensions: what it needs of `Run` is declared
below and given by it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from durability.checks import check_key, check_limit
from durability.children import CHILD, STARTED, ChildFailed, child_id
from durability.codec import as_bool
from durability.determinism import PATCH, Nondeterministic
from durability.endings import Ended
from durability.recording import Recorder
from durability.values import Limit

__all__ = ["Lineage", "child_outcome"]

T = TypeVar("T")


class Lineage:
    """`input`, `child`, `patched` and `broken`, mixed into `Run`."""

    _recorder: Recorder
    #: How this pass starts a child: set by the worker (see `Run`).
    starter: Callable[..., Awaitable[object]] | None

    @property
    def workflow(self) -> str:
        raise NotImplementedError

    @property
    def records(self) -> Mapping[str, object]:
        raise NotImplementedError

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        raise NotImplementedError

    def _step_failed(self, key: str, error: Exception) -> None:
        raise NotImplementedError

    def input(self, parse: Callable[[object], T]) -> T:
        """The value this workflow was started with (`durable.start`)."""
        record = self.records.get(STARTED)
        if not isinstance(record, Mapping) or "value" not in record:
            raise LookupError(f"{self.workflow!r} was not started by name (durable.start)")
        return parse(record["value"])

    async def child(
        self,
        key: str,
        body: str,
        value: object,
        parse: Callable[[object], T],
        *,
        limit: Limit | None = None,
    ) -> T:
        """Start the workflow `body` with `value` as a child at `key` (once: a later pass gets
        the same child), suspend until it ends, and return what it completed with (parsed), as
        this step's result. Its failure or cancel raises `ChildFailed` naming it. Its id is
        `<this workflow's id>.<key>`; a key reused for another body is a `ValueError`.

        The child's wakeup has this pass's priority and `limit` (none by default: a child
        does not inherit its parent's, which the parent's pass may be holding). The parent
        suspends here, so its pass ends and frees its own slot before the child needs one."""
        check_key(key)
        check_limit(limit)
        ident = child_id(self.workflow, key)
        note = f"{CHILD}{key}"
        held = self.records.get(note)
        if isinstance(held, Mapping) and held.get("body") != body:
            raise ValueError(
                f"child key {key!r} of {self.workflow!r} started body {held.get('body')!r};"
                f" it cannot be reused for {body!r}"
            )
        if key in self.records:
            try:
                return parse(child_outcome(self.records[key]))
            except Exception as error:
                self._step_failed(key, error)
                raise
        starter = self.starter
        if starter is None:
            raise RuntimeError("this pass cannot start a child (run it under work())")
        if held is None:  # noted under the claim first: a fenced pass starts no child
            await self._recorder.once(
                note, lambda: self._recorder.record(note, {"body": body, "id": ident})
            )
        # Every pass waiting here starts it again: a start is idempotent, and its wakeup lets
        # an ended child deliver its ending again if that delivery was lost.
        more = {} if limit is None else {"limit": limit}
        await starter(body, value, ident, parent=self.workflow, key=key, **more)
        return await self.awaiting(key, parse)

    async def patched(self, name: str) -> bool:
        """Whether this workflow reached this point first under the body that has the patch
        `name`: True for one that had not reached it before the change was deployed, False
        for one whose history already lies past it (it ran the old body here). The answer is
        recorded the first time, so every later pass of the workflow gets the same one.

        Keep the old code on the False branch until no workflow that ran it is in flight;
        then the patch and its old branch can go (`durability.determinism` says more).
        """
        check_key(name)
        key = f"{PATCH}{name}"
        recorder = self._recorder
        if key in recorder.records:
            recorder.trail.touch(key)
            known = recorder.records[key]
            if not isinstance(known, bool):
                raise TypeError(f"the record of patch {name!r} is not a bool")
            return known
        first = recorder.trail.first_here(recorder.records)
        return as_bool(await recorder.mark(key, first))

    @property
    def broken(self) -> Nondeterministic | None:
        """The `Nondeterministic` this pass met, if it met one (`resume` raises it)."""
        return self._recorder.trail.broken


def child_outcome(record: object) -> object:
    """A child's value from what its ending supplied to its parent, or `ChildFailed`."""
    if not isinstance(record, Mapping):
        raise TypeError(f"not a child's ending: {record!r}")
    ending = Ended.from_record(record)
    if ending.state == "completed":
        return ending.value
    child = str(record.get("child"))
    raise ChildFailed(child, ending.failure, cancelled=ending.state == "cancelled")
