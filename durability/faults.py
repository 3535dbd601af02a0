"""When the store fails under a pass: try the call again a few times, then stop the pass.

A store call that fails for the store's own reasons (its connection cut, the server restarting,
the file locked by another process) says nothing about the workflow, so it is never reported as
the body failing: that would answer for the delivery while the effect just performed has no
record, and nothing would ever run the workflow again. `patiently` tries the call again while
the error is transient, and past `ATTEMPTS` tries raises `StoreDown`, an `Interruption` rather
than an `Exception`, so a saga's rollback net cannot take it for a failure.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar, runtime_checkable

from durability.cancelling import stop_if_cancelled
from durability.connect import unavailable
from durability.signals import Interruption

__all__ = ["ATTEMPTS", "StoreDown", "Transient", "patiently", "transient"]

T = TypeVar("T")
log = logging.getLogger("durability.faults")

#: How many times in all a pass tries one store call before it stops.
ATTEMPTS = 6
#: The pause before the second try; it doubles each time, up to `LONGEST` (about 1.5 s in all).
FIRST = timedelta(milliseconds=50)
LONGEST = timedelta(seconds=1)


class StoreDown(Interruption):
    """The store kept failing a call of this pass (`cause` is its last error).

    An `Interruption`, so no `except Exception` in a workflow (a saga's rollback net) mistakes
    it for a failure of the work. The pass stops here; the worker hands the workflow back, or,
    if the store cannot even take that, leaves it to be taken over when its claim and delivery
    lapse. Nothing the pass recorded is lost, and the step whose record did not land runs again
    on the next pass.
    """

    def __init__(self, workflow: str, cause: Exception) -> None:
        super().__init__(f"the store did not answer for {workflow!r}: {cause!r}")
        self.workflow = workflow
        self.cause = cause


@runtime_checkable
class Transient(Protocol):
    """A store that tells its passing faults from its refusals.

    `transient(error)` is true for an error one of its calls raised that the same call may not
    meet again (a lost connection, a timeout, a locked file, a server starting up), false for
    one it would raise every time (a value it cannot hold, a statement it refuses).
    """

    def transient(self, error: Exception) -> bool: ...


def transient(store: object, error: BaseException) -> bool:
    """Whether `error`, raised by a call to `store`, is worth trying that call again for.

    A store may say for itself by being `Transient` (a store of another package, say); for any
    other, `durability.connect.unavailable` says: the one judge, for every store this package
    ships, of "the store is unreachable, gone or too slow", which the API answers with 503.
    """
    if not isinstance(error, Exception):
        return False
    if isinstance(store, Transient):
        return store.transient(error)
    return unavailable(error)


async def patiently(
    store: object,
    workflow: str,
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int | None = None,
    first: timedelta | None = None,
) -> T:
    """What `call()` returns, trying it again after a doubling pause while it fails
    transiently (`transient`); `StoreDown` once `attempts` tries (`ATTEMPTS`) have failed, the
    first pause being `first` (`FIRST`). Any other error is raised at once.

    Trying again is safe because every write a pass makes is first-writer-wins or atomic with
    its effect: a write that landed before its reply was lost answers the second time with what
    it wrote.
    """
    attempts = ATTEMPTS if attempts is None else attempts
    pause = 0.0  # the first pause is read only once a try failed: most calls need none
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except Exception as error:
            if not transient(store, error):
                raise
            if attempt == attempts:
                raise StoreDown(workflow, error) from error
            log.warning(
                "the store failed a call for %s (try %d of %d); trying again: %r",
                workflow,
                attempt,
                attempts,
                error,
            )
        # Jittered, so the passes a dropped connection failed together do not retry together.
        if attempt == 1:
            pause = (FIRST if first is None else first).total_seconds()
        stop_if_cancelled()
        await asyncio.sleep(pause * random.uniform(0.5, 1.5))
        pause = min(pause * 2, LONGEST.total_seconds())
    raise AssertionError("unreachable")  # the last try returned or raised
