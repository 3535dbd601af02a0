"""`PostgresDurable.finish_settled` asked for by several passes in one turn: ONE statement
(`finish_many`) for all of them, and each pass still gets exactly what it would alone: its
queue row deleted only if it still holds the receipt, its claim released and its standing
written only if it still holds the token."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from durability.endings import completion, ending_key
from durability.interfaces import Taken
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler
from durability.postgres.traffic import attach
from durability.storekit.traffic import Traffic

LEASE = timedelta(seconds=30)
SHORT = timedelta(milliseconds=500)
ENDED = ending_key({})


@pytest.fixture
async def durable(database_url: str) -> AsyncIterator[PostgresDurable]:
    """A durable on its own queue whose pool counts what it sends (`durable.traffic`)."""
    from psycopg_pool import AsyncConnectionPool

    traffic = Traffic()

    async def counted(conn: Any) -> None:
        attach(conn, traffic)

    pool: Any = AsyncConnectionPool(database_url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=8, open=False, configure=counted)
    await pool.open(wait=True)
    scheduler = PostgresScheduler(pool=pool, lease=LEASE, queue=f"pg-finish-{uuid.uuid4().hex}")
    try:
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler, traffic)
    finally:
        await scheduler.close()
        await pool.close()


async def _take_all(durable: PostgresDurable, count: int) -> list[Taken]:
    taken: list[Taken] = []
    while len(taken) < count:
        got = await durable.take(SHORT, LEASE, LEASE)
        assert got is not None and got.holder is not None
        taken.append(got)
    return taken


async def test_finishes_of_one_turn_are_one_statement_and_each_gets_its_own_answer(
    durable: PostgresDurable,
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"fm-{tag}-{n}" for n in range(6)]
    for name in names:
        await durable.arrive(name, "order", {"n": name})
    taken = {t.delivery.workflow: t for t in await _take_all(durable, len(names))}
    fenced, woken = names[1], names[4]
    # A newer claim on one (its pass is superseded) ...
    stale = taken[fenced].holder
    assert stale is not None
    await durable.checkpointer.release(stale)
    newer = await durable.checkpointer.claim(fenced, LEASE, LEASE)
    assert newer is not None and newer.token > stale.token
    # ... and a wakeup that lands mid-pass on another (its receipt changes).
    await durable.arrive(woken, "approved-by", "dana")

    before = durable.traffic.snapshot()
    stood = await asyncio.gather(*(
        durable.finish_settled(t.holder, t.delivery, "completed", {"n": i})  # type: ignore[arg-type]
        for i, t in enumerate(taken[name] for name in names)
    ))
    sent = durable.traffic.snapshot() - before
    # None of them holds a slot: the form without the limits CTEs.
    assert sent.requests.get("durable.finish_many_plain") == 1
    assert "durable.finish_many" not in sent.requests
    assert "durable.finish_settled" not in sent.requests

    assert stood == [name != fenced for name in names]
    for name in names:
        status = await durable.status(name)
        if name == fenced:
            assert status.state == "running"  # the newer claim's, not overwritten
        else:
            assert status.state == "completed", name
    # The woken workflow's new wakeup survived its finish; the others' rows are gone.
    again = await durable.take(SHORT, LEASE, LEASE)
    assert again is not None and again.delivery.workflow == woken


async def test_a_lone_finish_is_finish_settled_itself(durable: PostgresDurable) -> None:
    name = f"fm-lone-{uuid.uuid4().hex[:8]}"
    await durable.arrive(name, "order", 1)
    (taken,) = await _take_all(durable, 1)
    assert taken.holder is not None
    before = durable.traffic.snapshot()
    assert await durable.finish_settled(taken.holder, taken.delivery, "completed", {})
    sent = durable.traffic.snapshot() - before
    assert sent.requests.get("durable.finish_settled") == 1
    assert "durable.finish_many" not in sent.requests
    assert "durable.finish_many_plain" not in sent.requests
    assert (await durable.status(name)).state == "completed"


async def test_a_group_whose_statement_fails_is_sent_again_one_by_one(
    durable: PostgresDurable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails the shared statement (a deadlock the server broke, a lost connection),
    each finish is then sent alone and answers for itself."""
    broken = dict(durable._sql)
    broken["finish_many_plain"] = "SELECT no_such_function(%(asked)s)"
    monkeypatch.setattr(durable, "_sql", broken)
    names = [f"fm-again-{uuid.uuid4().hex[:8]}-{n}" for n in range(3)]
    for name in names:
        await durable.arrive(name, "order", 1)
    taken = await _take_all(durable, len(names))
    before = durable.traffic.snapshot()
    stood = await asyncio.gather(*(
        durable.finish_settled(t.holder, t.delivery, "completed", {})  # type: ignore[arg-type]
        for t in taken
    ))
    sent = durable.traffic.snapshot() - before
    assert stood == [True, True, True]
    assert sent.requests.get("durable.finish_settled") == 3
    for name in names:
        assert (await durable.status(name)).state == "completed"


@pytest.mark.parametrize("count", [1, 4])
async def test_a_turn_of_finishes_with_and_without_an_ending_writes_each_its_own(
    durable: PostgresDurable, count: int
) -> None:
    """Each finish sends only its own fields (an ending only if it brings one, the queue and
    channels once for the statement): alone, or in a turn with others, the ended ones keep
    their ending and the rest none."""
    names = [f"fm-mixed-{uuid.uuid4().hex[:8]}-{n}" for n in range(count)]
    for name in names:
        await durable.arrive(name, "order", 1)
    taken = await _take_all(durable, count)
    before = durable.traffic.snapshot()
    stood = await asyncio.gather(*(
        durable.finish_ended(t.holder, t.delivery, ENDED, completion(i), "completed", {})  # type: ignore[arg-type]
        if i % 2 == 0
        else durable.finish_settled(t.holder, t.delivery, "sleeping", {"n": i})  # type: ignore[arg-type]
        for i, t in enumerate(taken)
    ))
    sent = durable.traffic.snapshot() - before
    assert stood == [True] * count
    shared = "durable.finish_many_plain" if count > 1 else "durable.finish_settled"
    assert sent.requests.get(shared) == 1
    for i, t in enumerate(taken):
        name = t.delivery.workflow
        history = await durable.checkpointer.history(name)
        if i % 2 == 0:
            assert (await durable.status(name)).state == "completed"
            assert [w.key for w in history] == ["order", ENDED]
            assert history[-1].value == completion(i)
        else:
            assert (await durable.status(name)).state == "sleeping"
            assert [w.key for w in history] == ["order"]
