"""The checks every store makes of its input before any I/O, and the names they guard.

Every store refuses the same bad input, with a `ValueError` or `TypeError`: a workflow id
(`check_workflow`), a step key (`check_key`) or a duration (`positive`). Values are the codec's
to refuse (`durability.codec`).

The one decision: the bounds are one for every store, not each store's own, so an id that works
on one store works on all.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from datetime import timedelta

from durability.values import STATES, Limit

__all__ = [
    "ENGINE",
    "INBOX",
    "INBOX_WIDTH",
    "MAX_DURATION",
    "MAX_NAME",
    "MAX_PAGE",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "check_limit",
    "check_priority",
    "check_key",
    "check_page",
    "check_recorded_key",
    "check_state",
    "check_workflow",
    "detail_text",
    "inbox_key",
    "positive",
    "to_ms",
]

#: Inbox entries are ordinary records whose keys the store mints under this prefix, fixed-width
#: so that lexical order is append order. Step keys may not start with it.
INBOX = "inbox:"
#: Width of the decimal sequence number in an inbox key: `inbox:00000000000000000042`.
INBOX_WIDTH = 20
#: Records the engine itself writes under a pass's claim (a failed attempt, an explicit retry:
#: `durability.failures`) live under this prefix. Step keys and supplied keys may not start
#: with it, so nothing from outside can forge or shadow one; only `record` takes them.
ENGINE = "engine:"


#: The longest workflow id or step key, in characters. Ids and keys sit in SQL primary keys, and
#: 256 characters is at most 1 KiB of UTF-8, inside every index's limit.
MAX_NAME = 256
#: The longest duration any timing may be: a century. Far past any real budget, lease or
#: sleep, and far enough inside every store's clock arithmetic (datetime's year 9999, Lua's
#: 14 significant digits of milliseconds) that `now + duration` never overflows.
MAX_DURATION = timedelta(days=36_525)


def positive(name: str, value: timedelta) -> timedelta:
    """Return `value` if it is a positive duration of at most `MAX_DURATION`, else raise a
    `ValueError` (a `TypeError` if it is not a `timedelta`) naming it.

    None of the timings in this library has a meaningful zero, and a zero is how a duration
    read from an unset setting usually arrives, so it is refused where it enters. So is an
    absurd one: refused here, it never reaches a store that would write with it and then fail.
    """
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    if value > MAX_DURATION:
        raise ValueError(
            f"{name} must be at most MAX_DURATION ({MAX_DURATION.days} days), got {value!r}"
        )
    return value


def _check_name(what: str, name: str) -> None:
    """The checks ids and keys share; O(length), and O(1) for the length and ASCII tests."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if len(name) > MAX_NAME:  # before any scan, so a huge string costs nothing more
        raise ValueError(f"{what} is {len(name)} characters; the bound is {MAX_NAME}")
    if "\x00" in name:
        raise ValueError(f"{what} {name!r} holds a NUL character, which SQL text cannot hold")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as error:
            # A lone surrogate: what os.fsdecode makes of a file name that is not UTF-8.
            raise ValueError(
                f"{what} {name!r} is not valid Unicode text ({error.reason} at position"
                f" {error.start}), so no store can hold it"
            ) from None


#: How many names each check remembers as good (`_remembered`) before it starts afresh.
_REMEMBERED = 4096


def _remembered(check: Callable[[str], str]) -> Callable[[str], str]:
    """`check`, remembering the names it passed: a pass checks its workflow's id at every call
    it makes and its step keys at each write, and a `str`'s validity never changes, so each is
    scanned once. Emptied when full, so it stays small."""
    good: set[str] = set()

    @functools.wraps(check)
    def checked(name: str) -> str:
        if type(name) is str and name in good:
            return name
        check(name)
        if len(good) >= _REMEMBERED:
            good.clear()
        good.add(name)
        return name

    return checked


@_remembered
def check_workflow(workflow: str) -> str:
    """Return `workflow` if every store can hold it as an id: a `str` of 1 to `MAX_NAME`
    characters, valid Unicode (no lone surrogate), without NUL (SQL text cannot hold it), `{`
    or `}` (ids are part of Redis key names, where a brace would move the cluster hash tag)."""
    _check_name("workflow id", workflow)
    if "{" in workflow or "}" in workflow:
        raise ValueError(
            f"workflow id {workflow!r} contains a brace; Redis would read it as a hash tag"
        )
    return workflow


@_remembered
def check_key(key: str) -> str:
    """Return `key` if every store can hold it as a step key: the id rules without the brace
    rule (keys are never part of a Redis key name), outside the store-owned inbox key space and
    the engine's own (`ENGINE`)."""
    check_recorded_key(key)
    if key.startswith(ENGINE):
        raise ValueError(f"step key {key!r} lies in the engine's key space ({ENGINE!r}...)")
    return key


@_remembered
def check_recorded_key(key: str) -> str:
    """`check_key` for `Checkpointer.record`, which alone may also write the engine's keys
    (a pass records its own failure under its claim, fenced like any step)."""
    _check_name("step key", key)
    if key.startswith(INBOX):
        raise ValueError(f"step key {key!r} lies in the inbox key space ({INBOX!r}...)")
    return key


def inbox_key(sequence: int) -> str:
    """The key of the `sequence`-th inbox entry (1-based); lexical order is numeric order."""
    if sequence < 1 or sequence >= 10**INBOX_WIDTH:
        raise ValueError(f"inbox sequence out of range: {sequence}")
    return f"{INBOX}{sequence:0{INBOX_WIDTH}d}"


def to_ms(value: timedelta) -> int:
    """A duration in whole milliseconds, rounded up so a positive duration never becomes 0."""
    micros = value // timedelta(microseconds=1)
    return -(-micros // 1000)


#: The most workflows one `Ledger.standings` call returns.
MAX_PAGE = 1000


def detail_text(detail: Mapping[str, object]) -> str:
    """A standing's `detail` as the JSON text a store keeps (`TypeError` for what JSON cannot
    hold). A completed pass has none: its "{}" costs no encoding."""
    return json.dumps(dict(detail)) if detail else "{}"


def check_state(state: str | None) -> str | None:
    """Return `state` if it is `None` or one of `STATES`; refuse anything else by name."""
    if state is not None and state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}; got {state!r}")
    return state


def check_page(prefix: str | None, limit: int, after: str | None) -> None:
    """Refuse a listing's bad prefix (not a str, or longer than an id), limit (not a count from
    1 to `MAX_PAGE`) or cursor (not a workflow id), before any I/O."""
    if prefix is not None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if prefix:
            check_workflow(prefix)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE}, got {limit}")
    if after is not None:
        check_workflow(after)


#: The range of a wakeup's priority (`Scheduler.make_ready`): higher is taken first, 0 is the
#: default. Bounded so a store that keeps a queue per level (the Redis stream) has few.
MIN_PRIORITY = -100
MAX_PRIORITY = 100
#: The largest `Limit.at_most`: far past any real bound, well inside every store's integers.
MAX_LIMIT = 1_000_000


def check_priority(priority: object) -> int:
    """Return `priority` if it is an int (not a bool) from `MIN_PRIORITY` to `MAX_PRIORITY`;
    else a `TypeError` or `ValueError` saying so."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority}"
        )
    return priority


def check_limit(limit: object) -> Limit | None:
    """Return `limit` if it is None or a sound `Limit`: a key of 1 to `MAX_NAME` characters
    with no brace (it sits inside a Redis key, under the queue's hash tag) and no control
    character, an int `at_most` from 1 to `MAX_LIMIT`, a `per` that is None or a positive
    duration. Else a `TypeError` or `ValueError` naming what is wrong."""
    if limit is None:
        return None
    if not isinstance(limit, Limit):
        raise TypeError(f"limit must be a Limit or None, not {type(limit).__name__}")
    key = limit.key
    if not isinstance(key, str):
        raise TypeError(f"a limit's key must be a str, not {type(key).__name__}")
    if not 1 <= len(key) <= MAX_NAME:
        raise ValueError(f"a limit's key must be 1 to {MAX_NAME} characters, got {len(key)}")
    if "{" in key or "}" in key or any(c < " " or c == "\x7f" for c in key):
        raise ValueError(f"a limit's key may not hold a brace or a control character: {key!r}")
    at_most = limit.at_most
    if not isinstance(at_most, int) or isinstance(at_most, bool):
        raise TypeError(f"a limit's at_most must be an int, not {type(at_most).__name__}")
    if not 1 <= at_most <= MAX_LIMIT:
        raise ValueError(f"a limit's at_most must be from 1 to {MAX_LIMIT}, got {at_most}")
    if limit.per is not None:
        positive("a limit's per", limit.per)
    return limit
