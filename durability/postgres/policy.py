"""A wakeup's priority and limit on their way into the Postgres statements and back.

A limit is three columns of the queue row (key, at most, per); a delivery taken under one is
handed back carrying it, so its `done`, `extend` and `wake_at` know which hold is theirs. Only
a concurrency limit holds a slot a pass gives back: a rate limit's hold stays out its window.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType

from durability.checks import check_limit, check_priority
from durability.values import Delivery, Limit, held_key

__all__ = ["delivered", "giving_back", "held_key", "wakeup"]


def wakeup(priority: object, limit: object) -> dict[str, object]:
    """The parameters a wakeup's upsert binds, both checked first (`check_priority`,
    `check_limit`): a `TypeError` or `ValueError` before any I/O."""
    level = check_priority(priority)
    bound = check_limit(limit)
    if bound is None:
        return {"priority": level, "limit_key": None, "limit_at_most": None, "limit_per": None}
    return {
        "priority": level,
        "limit_key": bound.key,
        "limit_at_most": bound.at_most,
        "limit_per": bound.per,
    }



#: `giving_back`'s answer for a delivery that holds no slot, one for all (read, never changed).
_NO_HOLD: Mapping[str, object] = MappingProxyType({"held_key": None, "hold": None})


def giving_back(delivery: Delivery) -> Mapping[str, object]:
    """The parameters that name `delivery`'s hold in its key's limits row: the key (None for
    a delivery with no concurrency slot, which then touches nothing) and the hold's name in
    the row's map, '<the take's receipt>/<workflow>' (a receipt alone can repeat: every row of
    one batched take shares the statement's clock). With no slot (the common path) both are
    None: no statement reads the hold of a delivery with no key, so its name is not made."""
    key = held_key(delivery)
    if key is None:
        return _NO_HOLD
    return {"held_key": key, "hold": f"{delivery.receipt}/{delivery.workflow}"}


def delivered(
    workflow: str,
    receipt: int,
    lapsed: bool | None,
    priority: int | None,
    key: str | None,
    at_most: int | None,
    per: float | None,
) -> Delivery:
    """A taken row as a `Delivery`, carrying the priority and limit the row kept (`per` as
    seconds, or None)."""
    limit = None
    if key is not None and at_most is not None:
        window = None if per is None else timedelta(seconds=per)
        limit = Limit(key, at_most, window)
    return Delivery(workflow, str(receipt), bool(lapsed), priority=priority or 0, limit=limit)
