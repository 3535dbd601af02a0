"""What a store raises when it is not there to answer: one type for every store.

`StoreUnavailable` is a store that could not be reached while it was opened; `Unanswered`, its
subclass, is a call to an open store that got no answer. Each store raises them in place of its
driver's error, which is their `__cause__`, so a caller needs one `except` whatever the store.
A store's own subclass is also its driver's kind of error, so the driver's retries, and code
that caught the driver's error before, go on as they did.
"""

from __future__ import annotations

__all__ = ["StoreUnavailable", "Unanswered", "delivery_unknown", "outcome_unknown"]


class StoreUnavailable(ConnectionError):
    """The store could not be reached, or did not answer in time, while it was opened.

    The message names where it looked (host, port and database, never a password), and the
    driver's own error is its `__cause__`. It may pass: a caller that can wait tries again.
    """


class Unanswered(StoreUnavailable):
    """A call to an open store got no answer: its connection was lost, or no reply came within
    the call bound (`open_durable`'s `call_timeout_ms`).

    Whatever it asked the store to do may or may not have been done: a write whose reply was
    lost, or that the server runs once it wakes. `outcome_unknown` and `delivery_unknown` say so
    in the message. A store's own subclass is also its driver's error:
    `durability.redis.bounds.Lost` is a `redis.exceptions.ConnectionError`.
    """


def outcome_unknown(error: Unanswered, move: str, workflow: str, key: str) -> Unanswered:
    """`error`, raised by `move`, saying that `move` may have landed and that sending it again
    with the same workflow and key is safe (`arrive` writes its key once, whoever sends it
    first); of the same type (a store's is also its driver's error). Raise it
    `from error.__cause__`, the driver's error. (A function, not a context manager: `arrive` is
    a hot path, and a `try` costs nothing until it catches.)"""
    return _retold(
        error,
        f"Whether {move}({workflow!r}, {key!r}) was written is unknown: the store may have run"
        " it before the answer was lost. Sending it again with the same workflow and key is"
        " safe: the key is written once, by whichever call lands first",
    )


def delivery_unknown(error: Unanswered, workflow: str) -> Unanswered:
    """`error`, raised by `deliver(workflow, ...)`, saying that the entry may have been
    appended, and that sending it again may append a second one, because each delivery
    appends an entry of its own (see `outcome_unknown`)."""
    return _retold(
        error,
        f"Whether deliver({workflow!r}, ...) appended its entry is unknown: the store may have"
        " run it before the answer was lost. Sending it again may append it twice; the"
        " workflow's records (`checkpointer.load`) show whether it is there",
    )


def _retold(error: Unanswered, said: str) -> Unanswered:
    told = f"{str(error).rstrip('.')}. {said}"
    try:
        return type(error)(told)
    except Exception:  # a subclass whose constructor wants more than a message
        return Unanswered(told)
