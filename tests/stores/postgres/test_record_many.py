"""`PostgresCheckpointer.record` asked for by several passes in one turn: ONE statement
(`record_many`) for all of them, and each pass still gets exactly what it would alone: its
value written first-writer-wins only under its own live claim, the value already held when it
lost, `Fenced` when its claim is no longer the workflow's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from durability.postgres import PostgresCheckpointer, configure
from durability.postgres.traffic import attach
from durability.signals import Fenced
from durability.storekit.traffic import Traffic
from durability.values import Pass, Recorded

LEASE = timedelta(seconds=30)
BUDGET = timedelta(hours=1)  # past the lease, so a write's renewal shows


class Counted(PostgresCheckpointer):
    traffic: Traffic


@pytest.fixture
async def checkpointer(database_url: str) -> AsyncIterator[Counted]:
    """A checkpointer whose pool counts what it sends (`checkpointer.traffic`)."""
    from psycopg_pool import AsyncConnectionPool

    traffic = Traffic()

    async def counted(conn: Any) -> None:
        attach(conn, traffic)
        await configure(conn)

    pool: Any = AsyncConnectionPool(database_url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=8, open=False, configure=counted)
    await pool.open(wait=True)
    try:
        made = Counted(pool=pool)
        made.traffic = traffic
        yield made
    finally:
        await pool.close()


async def _claimed(checkpointer: PostgresCheckpointer, names: list[str]) -> list[Pass]:
    held = []
    for name in names:
        holder = await checkpointer.claim(name, BUDGET, LEASE)
        assert holder is not None
        held.append(holder)
    return held


async def _until(checkpointer: PostgresCheckpointer, names: list[str]) -> list[object]:
    async with checkpointer.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT workflow, until FROM durability.claims WHERE workflow = ANY (%s)", [names]
        )
        found = dict(await cursor.fetchall())
    return [found[name] for name in names]


async def test_records_of_one_turn_are_one_statement_and_each_gets_its_own_answer(
    checkpointer: Counted,
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"rm-{tag}-{n}" for n in range(6)]
    held = await _claimed(checkpointer, names)
    # One pass is superseded (a newer claim took its workflow) ...
    fenced = 2
    await checkpointer.release(held[fenced])
    newer = await checkpointer.claim(names[fenced], BUDGET, LEASE)
    assert newer is not None
    # ... and one workflow already holds the key the pass is about to write.
    lost = 4
    assert (await checkpointer.supply(names[lost], "charge", "from outside")).first

    until = await _until(checkpointer, names)
    before = checkpointer.traffic.snapshot()
    outcomes = await asyncio.gather(
        *(checkpointer.record(holder, "charge", {"n": n}) for n, holder in enumerate(held)),
        return_exceptions=True,
    )
    sent = checkpointer.traffic.snapshot() - before
    assert sent.requests.get("checkpointer.record_many") == 1
    assert "checkpointer.record" not in sent.requests

    for n, outcome in enumerate(outcomes):
        if n == fenced:
            assert isinstance(outcome, Fenced)
        elif n == lost:
            assert outcome == Recorded("from outside", False)
        else:
            assert outcome == Recorded({"n": n}, True)
    for n, name in enumerate(names):
        records = await checkpointer.load(name)
        if n == fenced:
            assert records == {}  # the superseded pass wrote nothing
        elif n == lost:
            assert records == {"charge": "from outside"}
        else:
            assert records == {"charge": {"n": n}}
    # Each write renewed the claim it was made under (the lost one too: its claim is live),
    # and no other.
    after = await _until(checkpointer, names)
    assert [after[n] > until[n] for n in range(len(names))] == [n != fenced for n in range(6)]
    # The live passes' claims are still theirs; the superseded one's is not.
    await checkpointer.renew(held[0], LEASE)
    with pytest.raises(Fenced):
        await checkpointer.renew(held[fenced], LEASE)


async def test_two_records_of_one_workflow_in_a_turn_go_as_they_would_alone(
    checkpointer: Counted,
) -> None:
    name = f"rm-twice-{uuid.uuid4().hex[:8]}"
    (holder,) = await _claimed(checkpointer, [name])
    before = checkpointer.traffic.snapshot()
    first, second = await asyncio.gather(
        checkpointer.record(holder, "a", 1), checkpointer.record(holder, "b", 2)
    )
    sent = checkpointer.traffic.snapshot() - before
    assert (first, second) == (Recorded(1, True), Recorded(2, True))
    assert "checkpointer.record_many" not in sent.requests
    assert sent.requests.get("checkpointer.record") == 2
    assert await checkpointer.load(name) == {"a": 1, "b": 2}


async def test_a_claim_row_locked_elsewhere_holds_back_only_its_own_record(
    checkpointer: Counted, database_url: str
) -> None:
    """Another transaction holds one claim row: the turn's shared statement gives up on that
    lock after a moment, every record is then sent on its own, and all but the held one are
    answered while the lock is still held; that one is answered once it lifts."""
    import psycopg

    tag = uuid.uuid4().hex[:8]
    names = [f"rm-lock-{tag}-{n}" for n in range(4)]
    held = await _claimed(checkpointer, names)
    locked = 1
    async with await psycopg.AsyncConnection.connect(database_url) as other:
        await other.execute(
            "SELECT 1 FROM durability.claims WHERE workflow = %s FOR UPDATE", [names[locked]]
        )
        calls = [
            asyncio.ensure_future(checkpointer.record(holder, "charge", n))
            for n, holder in enumerate(held)
        ]
        free = [call for n, call in enumerate(calls) if n != locked]
        # A generous bound: these are waiting on nothing but the server.
        done, _ = await asyncio.wait(free, timeout=30)
        assert done == set(free)
        assert not calls[locked].done()
        await other.rollback()
    assert await calls[locked] == Recorded(locked, True)
    assert [call.result() for call in calls] == [Recorded(n, True) for n in range(4)]
