"""A wakeup's priority and limit as the Redis queues keep them: one text field per wakeup.

The scripts read it with `scripts/shared/policy.lua`, which also keeps each limit's books on
the queue's own slot. The decision not to undo: priority 0 with no limit is the empty text and
is never stored, so the common path writes nothing it did not write before priorities.
"""

from __future__ import annotations

from datetime import timedelta

from durability.checks import check_limit, check_priority, to_ms
from durability.values import Limit

__all__ = ["limit_books", "policy_of", "policy_text"]


def policy_text(priority: int = 0, limit: Limit | None = None) -> str:
    """The text a script keeps for a wakeup of `priority` under `limit` ('' for the default);
    both are checked here, before anything is sent."""
    check_priority(priority)
    check_limit(limit)
    if priority == 0 and limit is None:
        return ""
    if limit is None:
        return f"{priority}\t\t0\t0"
    per = 0 if limit.per is None else to_ms(limit.per)
    return f"{priority}\t{limit.key}\t{limit.at_most}\t{per}"


def policy_of(text: object) -> tuple[int, Limit | None]:
    """The priority and limit a script's policy text names (see `policy_text`)."""
    if isinstance(text, bytes):
        text = text.decode()
    if not text:
        return 0, None
    priority, key, at_most, per = str(text).split("\t")
    if not key:
        return int(priority), None
    window = timedelta(milliseconds=int(per)) if int(per) else None
    return int(priority), Limit(key, int(at_most), window)


def limit_books(queue: str, limit: Limit) -> str:
    """The key where `queue` counts `limit`'s holders (or, for a rate, its takes)."""
    return f"{queue}:{'held' if limit.per is None else 'rate'}:{limit.key}"
