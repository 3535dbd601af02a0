"""A wakeup's priority and limit on their way into the SQLite statements and back.

A limit is three columns of the queue row (key, at most, and the window in microseconds); a
delivery taken under one is handed back carrying it, so its `done`, `extend` and `wake_at`
know which hold is theirs. Only a concurrency limit holds a slot a pass gives back: a rate
limit's hold stays out its window.
"""

from __future__ import annotations

from datetime import timedelta

from durability.checks import check_limit, check_priority
from durability.values import Delivery, Limit, held_key

__all__ = ["delivered", "held_key", "wakeup"]

_MICRO = timedelta(microseconds=1)


def wakeup(priority: object, limit: object) -> dict[str, object]:
    """The parameters a wakeup's upsert binds, both checked first (`check_priority`,
    `check_limit`): a `TypeError` or `ValueError` before any I/O."""
    level = check_priority(priority)
    bound = check_limit(limit)
    if bound is None:
        return {"priority": level, "limit_key": None, "limit_at_most": None, "limit_per_us": None}
    per = None if bound.per is None else max(1, bound.per // _MICRO)
    return {
        "priority": level,
        "limit_key": bound.key,
        "limit_at_most": bound.at_most,
        "limit_per_us": per,
    }



def delivered(
    workflow: str,
    receipt: int,
    lapsed: bool,
    priority: int | None,
    key: str | None,
    at_most: int | None,
    per_us: int | None,
) -> Delivery:
    """A taken row as a `Delivery`, carrying the priority and limit the row kept."""
    limit = None
    if key is not None and at_most is not None:
        window = None if per_us is None else timedelta(microseconds=per_us)
        limit = Limit(key, at_most, window)
    return Delivery(workflow, str(receipt), lapsed, priority=priority or 0, limit=limit)
