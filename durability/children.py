"""Child workflows: the names and records `run.child` and the worker share.

A child is a workflow of its own, started once under its parent (`child_id`: the parent's id and
the child's key), its body and id noted in the parent's checkpoint under its claim (`CHILD`) so
a second pass reaching the key starts none and a key reused for another body is refused. The
parent waits for the key like any input, holding no worker; the child's ending is supplied to
the parent under that key (`delivery`), which wakes it as an `arrive` does: no polling.
"""

from __future__ import annotations

from collections.abc import Mapping

from durability.checks import ENGINE, check_workflow
from durability.failures import Failure

__all__ = ["CHILD", "STARTED", "ChildFailed", "child_id", "children_of", "delivery", "parent_of"]

#: The record `durable.start` writes (`durability.bodies`): `{"body", "value"}`, and for a
#: child its `parent` and the parent's `key`.
STARTED = "started"
#: The parent's note of each child it started, under its claim: `{"body", "id"}`.
CHILD = f"{ENGINE}child:"


def child_id(parent: str, key: str) -> str:
    """The id of `parent`'s child at `key`: refused as any id is if it cannot be one."""
    return check_workflow(f"{parent}.{key}")


class ChildFailed(Exception):
    """A child workflow failed for good (`failure`) or was cancelled (`cancelled`): raised by
    `run.child` in the parent, a failure of the parent's step at that key unless caught."""

    def __init__(self, child: str, failure: Failure | None, cancelled: bool = False) -> None:
        said = "was cancelled" if cancelled else "failed"
        if failure is not None:
            said += f": {failure.type}: {failure.message}"
        super().__init__(f"child workflow {child!r} {said}")
        self.child = child
        self.failure = failure
        self.cancelled = cancelled


def parent_of(records: Mapping[str, object]) -> tuple[str, str] | None:
    """The parent's id and key, if these are a child's records."""
    record = records.get(STARTED)
    if record is None or not isinstance(record, Mapping):  # None first: every pass that ends
        return None
    parent, key = record.get("parent"), record.get("key")
    if isinstance(parent, str) and isinstance(key, str):
        return parent, key
    return None


def children_of(records: Mapping[str, object]) -> list[str]:
    """The ids of the children these records say were started."""
    return [
        str(note["id"])
        for key, note in records.items()
        if key.startswith(CHILD) and isinstance(note, Mapping) and "id" in note
    ]


def delivery(child: str, ending: Mapping[str, object]) -> dict[str, object]:
    """What a child's ending (its record) supplies to its parent under the child's key."""
    return {**ending, "child": child}
