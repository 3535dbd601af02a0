"""Support for testing code built on durability, and for testing a store against the contract.

`durability.testing.conformance` holds the pytest classes every store's suite subclasses. This
package is not re-exported from `durability`, so a production import pulls in none of it (and
never pytest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from durability.interfaces import Checkpointer, Pass
from durability.stepwise import Run, utcnow


def passing(
    holder: Pass,
    checkpointer: Checkpointer,
    records: Mapping[str, object] | None = None,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> Run:
    """A `Run` wired as `resume` wires one, for a test that drives a single method.

    The test says what it is about (this pass, this store, these records) instead of restating
    how a pass is assembled: `await passing(holder, store).transact("k", effect, as_int)`.
    """
    return Run(holder, checkpointer, records or {}, clock=clock)


__all__ = ["passing"]
