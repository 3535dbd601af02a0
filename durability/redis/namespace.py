"""How every Redis store names its keys, and how the schedulers read replies.

Every key a store writes starts with the namespace it was opened with, so two applications
on one Redis never meet. A queue's keys are `{<ns>}:<name>`: the namespace is their Redis
Cluster hash tag, so one queue lands on one slot and a script may touch all of its keys. A
workflow's keys are `<ns>:workflow:{<id>}...` (see checkpointer.py): the namespace stays
outside the braces, so the tag is still the id and workflows spread over the cluster. A
namespace holds no brace for the same reason.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from durability.values import Footprint

__all__ = [
    "DEFAULT",
    "LONGEST_NAMESPACE",
    "block_slice",
    "check_namespace",
    "footprint",
    "from_ms",
    "key",
    "ms",
    "patterns",
    "text",
]

#: The namespace a store uses when it is given none.
DEFAULT = "durability"


#: The longest namespace: it starts every key name, sent with every command.
LONGEST_NAMESPACE = 200


def check_namespace(namespace: str) -> str:
    """Refuse a namespace that cannot start every key: empty or over `LONGEST_NAMESPACE`
    characters, holding a brace (it is the queue keys' hash tag), a control character (NUL
    among them: a key an operator could not type or read) or a lone surrogate (not UTF-8)."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, not {type(namespace).__name__}")
    if not 1 <= len(namespace) <= LONGEST_NAMESPACE:
        shown = repr(namespace) if len(namespace) <= 40 else f"{namespace[:40]!r}..."
        raise ValueError(
            f"namespace must be 1 to {LONGEST_NAMESPACE} characters, got {len(namespace)}:"
            f" {shown}"
        )
    if "{" in namespace or "}" in namespace:
        raise ValueError(f"namespace {namespace!r} may not hold '{{' or '}}': it is the hash tag")
    for character in namespace:
        if unicodedata.category(character) in ("Cc", "Cs"):
            raise ValueError(
                f"namespace {namespace!r} may not hold a control character or a lone"
                f" surrogate (found {character!r})"
            )
    return namespace


def key(namespace: str, name: str) -> str:
    """`{<namespace>}:<name>`: one queue's keys share a cluster slot through the tag."""
    return f"{{{namespace}}}:{name}"


async def footprint(redis: Any, parts: dict[str, tuple[str, str]]) -> Footprint:
    """A queue's `Footprint` in one script: `parts` names each key as (key, kind), kind being
    how it is counted (`stream`, `zset`, `list`, or `queue:stream` / `queue:zset` for a queue's
    level-0 key counted with its other levels and its parked wakeups: see footprint.lua)."""
    from durability.redis.lua import script

    names = list(parts)
    keys = [parts[name][0] for name in names]
    kinds = [parts[name][1] for name in names]
    reply = await script(redis, "footprint")(keys=keys, args=kinds)
    counted = [int(text(value)) for value in reply]
    return Footprint(
        {name: counted[2 * i] for i, name in enumerate(names)},
        sum(counted[1::2]),
    )


def patterns(namespace: str) -> tuple[str, str, str]:
    """The SCAN `MATCH` patterns that together find every key the stores write under
    `namespace`: its queue keys, its shards' queue keys, and its workflows' keys. (Braces are
    plain characters to Redis's glob; the glob's own `*?[]\\` in a namespace are escaped.)

    The queue keys are `{<ns>}:ready`, `{<ns>}:sleeping`, `{<ns>}:schedule`, `{<ns>}:doorbell`,
    `{<ns>}:marker` (which notices a wipe of the server's data: marker.py), the standings and
    their indexes, and `{<ns>}:shards` (the count of shards, shards.py); a sharded queue's are
    the same names under `{<ns>:<i>}`; each workflow's are `<ns>:workflow:{<id>}`, `...:pass`
    and `...:order`."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in check_namespace(namespace))
    return f"{{{escaped}}}:*", f"{{{escaped}:[0-9]*}}:*", f"{escaped}:workflow:{{*"


def text(value: object) -> str:
    """A reply as str, whether or not the client decodes responses."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


# Scores and stream ids are milliseconds of the server's clock (`TIME`), never the host's: every
# worker then agrees on what "now" is whatever its own clock says.


def ms(moment: datetime) -> int:
    """A moment as whole Unix milliseconds (a naive datetime is taken to be UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def ms_at_or_after(moment: datetime) -> int:
    """A deadline as whole Unix milliseconds, rounded up: a wakeup stored at the millisecond
    below its deadline would be due, and run, before the deadline it was given."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return -(-(moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1))


def from_ms(value: object) -> datetime:
    """A reply holding Unix milliseconds (int, float or their text) as an aware UTC datetime."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=float(text(value)))


def block_slice(redis: Any) -> timedelta | None:
    """The longest server-side `BLOCK` a read on this client may ask for, or None (unbounded).

    redis-py gives every reply `socket_timeout` seconds (5 by default), and a `Bounded`
    connection its `call_timeout` (`bounds.call_bound`), dropping the connection when one is
    late, so a `BLOCK` longer than that would be cut by the client, not the server. A blocking
    read is therefore split into slices that end a safe margin before the timeout.
    """
    from durability.redis.bounds import call_bound

    pool = getattr(redis, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if kwargs is None:  # RedisCluster keeps the per-node kwargs on itself
        kwargs = getattr(redis, "connection_kwargs", None) or {}
    timeout = call_bound(kwargs)
    if timeout is None:
        return None
    seconds = timeout
    margin = min(1.0, seconds / 2)
    return timedelta(seconds=max(seconds - margin, 0.001))
