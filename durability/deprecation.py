"""What this release keeps for one more and then drops: each warns when used (a
`DeprecationWarning` naming what replaces it and the release it goes in), and works until then.

| old | new | goes in |
|---|---|---|
| `durability.postgres.SqlEffect` (its module's `__getattr__`) | `PostgresEffect` | `GOES_IN` |
| `Scheduler.reclaim(idle)` (off the protocol) | `reclaiming(idle).delivery` | `GOES_IN` |
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Protocol

from durability.values import Delivery, Reclaimed

__all__ = ["GOES_IN", "Reclaim"]

#: The release in which what is deprecated here is gone.
GOES_IN = "0.3.0"


class _Reclaiming(Protocol):
    async def reclaiming(self, idle: timedelta) -> Reclaimed: ...


class Reclaim:
    """`reclaim(idle)` on the schedulers this package ships, for one more release. It is no
    longer part of `Scheduler` (the worker takes over through `reclaiming`), so a store of
    one's own need not have it."""

    __slots__ = ()

    async def reclaim(self: _Reclaiming, idle: timedelta) -> Delivery | None:
        """Deprecated: `(await reclaiming(idle)).delivery`, which takes the same delivery (one
        whose worker showed no sign of life for `idle`) and also says when to look again."""
        warnings.warn(
            f"Scheduler.reclaim is deprecated and goes in {GOES_IN}: take over through"
            " reclaiming(idle), whose .delivery is what reclaim returned",
            DeprecationWarning,
            stacklevel=2,
        )
        return (await self.reclaiming(idle)).delivery
