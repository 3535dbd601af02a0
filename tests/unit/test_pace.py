"""`at_any_pace`: a timing-sensitive contract test survives a slow machine by running again at
a slower pace, and still fails a store that breaks the promise.

The slow machine is played by a store whose writes each take a while (the memory store
behind a delay, as a write under WAITAOF on a busy disk takes), which is what made
`test_a_write_is_a_sign_of_life` fail once under load with fixed margins.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from durability.interfaces import Checkpointer, Entry, Pass, Recorded, Written
from durability.memory import MemoryCheckpointer
from durability.testing.conformance.claims import ClaimContract
from durability.testing.conformance.pace import TRIES, Stalled, at_any_pace


class _Delayed:
    """The memory store, each record taking `delay` before it lands (as on a slow server).
    With `forgetful`, a record is not a sign of life (it writes as `supply` does): a store that
    breaks the promise the contract test checks."""

    def __init__(self, delay: float, *, forgetful: bool = False) -> None:
        self._store = MemoryCheckpointer()
        self._delay = delay
        self._forgetful = forgetful

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        return await self._store.claim(workflow, budget, alive)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        await asyncio.sleep(self._delay)
        if self._forgetful:
            return await self._store.supply(holder.workflow, key, value)
        return await self._store.record(holder, key, value)

    async def load(self, workflow: str) -> dict[str, object]:
        return await self._store.load(workflow)

    async def history(self, workflow: str) -> list[Written]:
        return await self._store.history(workflow)

    async def transact(self, holder: Pass, key: str, effect: object) -> Recorded:
        raise NotImplementedError

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        return await self._store.supply(workflow, key, value)

    async def append(self, workflow: str, value: object) -> Entry:
        return await self._store.append(workflow, value)

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        return await self._store.extend(holder, budget, alive)

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        await self._store.renew(holder, alive)

    async def discard(self, workflow: str) -> int:
        return await self._store.discard(workflow)

    async def release(self, holder: Pass) -> None:
        await self._store.release(holder)


def _checkpointer(store: _Delayed) -> Checkpointer:
    assert isinstance(store, Checkpointer)
    return store


async def test_a_sign_of_life_test_holds_when_every_write_is_slow() -> None:
    # 0.3 s a write: at the first pace (alive 0.5 s, a write every 0.25 s) the gaps are 0.55 s
    # and the claim lapses; measured as a stall, not a failure, the test runs again slower.
    slow = _checkpointer(_Delayed(0.3))
    await ClaimContract().test_a_write_is_a_sign_of_life(slow)


async def test_a_store_whose_writes_are_no_sign_of_life_still_fails() -> None:
    forgetful = _checkpointer(_Delayed(0.0, forgetful=True))
    with pytest.raises(AssertionError):
        await ClaimContract().test_a_write_is_a_sign_of_life(forgetful)


async def test_at_any_pace_doubles_the_pace_until_a_run_concludes() -> None:
    paces: list[float] = []

    async def scenario(scale: float) -> None:
        paces.append(scale)
        if scale < 4:
            raise Stalled("too slow")

    await at_any_pace(scenario)
    assert paces == [1, 2, 4]


async def test_at_any_pace_gives_up_saying_why() -> None:
    async def scenario(scale: float) -> None:
        raise Stalled(f"stalled at {scale:g}")

    with pytest.raises(pytest.fail.Exception, match=r"stalled at 1.*stalled at 2") as failed:
        await at_any_pace(scenario)
    assert str(failed.value).count("stalled at") == TRIES


async def test_a_failure_that_is_not_a_stall_is_not_retried() -> None:
    paces: list[float] = []

    async def scenario(scale: float) -> None:
        paces.append(scale)
        raise AssertionError("broken")

    with pytest.raises(AssertionError, match="broken"):
        await at_any_pace(scenario)
    assert paces == [1]
