"""`SqliteCheckpointer`: a workflow's records and claim as rows of one SQLite file.

| table                  | one row per           | holds                                         |
|------------------------|-----------------------|-----------------------------------------------|
| `durability_workflows` | workflow              | `token`, `until_us`, `deadline_us`, `appended` |
| `durability_records`   | (workflow, key)       | the codec's text, the write time, `seq` order  |

Every write is one `BEGIN IMMEDIATE` transaction on the database's writer thread, so a check
and the write it guards (is the claim live? is the key free?) cannot be split by another
process.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any

from durability.checks import (
    check_key,
    check_page,
    check_recorded_key,
    check_state,
    check_workflow,
    detail_text,
    inbox_key,
    positive,
)
from durability.codec import Codec, JsonCodec, decode_checkpoint
from durability.signals import Fenced
from durability.sqlite.database import SqliteDatabase, from_us, now_us, queries
from durability.sqlite.effect import SqliteEffect
from durability.sqlite.watching import SqliteBell, ended_signal, watch
from durability.values import Effect, Entry, Look, Pass, Recorded, Standing, Written

# The `*_step` functions are the transactions' bodies. `SqliteDurable` runs several of them, with
# the scheduler's, in one transaction (`take` is `claim_step` after the scheduler's `take_step`).
__all__ = [
    "Claimed",
    "SqliteCheckpointer",
    "append_step",
    "claim_step",
    "claimed_pass",
    "discard_step",
    "release_step",
    "supply_step",
]

#: The statements, from `checkpointer.sql`.
_SQL = queries("checkpointer")
_MICRO = timedelta(microseconds=1)


def _us(value: timedelta) -> int:
    return value // _MICRO


def _fenced(connection: sqlite3.Connection, holder: Pass) -> Fenced:
    """Why `holder` may not write (read after its guarded statement matched no row)."""
    row = connection.execute(_SQL["holder"], {"workflow": holder.workflow}).fetchone()
    if row is None or row[0] != holder.token:
        return Fenced(holder.workflow, holder.token, "a newer claim exists")
    return Fenced(holder.workflow, holder.token, "the claim lapsed")


def _renew(connection: sqlite3.Connection, holder: Pass, now: int, alive: timedelta) -> int:
    """Renew a live claim (a sign of life); its deadline. Raises `Fenced` if not live."""
    row = connection.execute(
        _SQL["renew"],
        {"workflow": holder.workflow, "token": holder.token, "now": now, "alive": _us(alive)},
    ).fetchone()
    if row is None:
        raise _fenced(connection, holder)
    deadline: int = row[0]
    return deadline


def _write(
    connection: sqlite3.Connection, workflow: str, key: str, encoded: str, now: int
) -> tuple[str, bool]:
    """First writer wins: the text `key` holds now, and whether it is `encoded`'s write."""
    params = {"workflow": workflow, "key": key, "value": encoded, "now": now}
    if connection.execute(_SQL["insert"], params).fetchone() is not None:
        return encoded, True
    (held,) = connection.execute(_SQL["recorded"], params).fetchone()
    return str(held), False


def supply_step(
    connection: sqlite3.Connection, workflow: str, key: str, encoded: str
) -> tuple[str, bool]:
    """`supply` inside an open write transaction."""
    return _write(connection, workflow, key, encoded, now_us())


def append_step(connection: sqlite3.Connection, workflow: str, encoded: str) -> str:
    """`append` inside an open write transaction; the minted key."""
    (sequence,) = connection.execute(_SQL["mint"], {"workflow": workflow}).fetchone()
    key = inbox_key(sequence)
    _, first = _write(connection, workflow, key, encoded, now_us())
    if not first:  # only a hand-written row could already hold a minted key
        raise sqlite3.IntegrityError(f"inbox key {key!r} of {workflow!r} is already recorded")
    return key


#: What `claim_step` found: the new token, the deadline (us) and the records' (key, text) rows.
Claimed = tuple[int, int, list[tuple[str, str]]]


def claim_step(
    connection: sqlite3.Connection, workflow: str, budget: timedelta, alive: timedelta
) -> Claimed | None:
    """`claim` inside an open write transaction; `None` if a live claim holds the workflow."""
    now = now_us()
    deadline = now + _us(budget)
    row = connection.execute(
        _SQL["claim"],
        {
            "workflow": workflow,
            "now": now,
            "now_ms": now // 1000,
            "until": min(now + _us(alive), deadline),
            "deadline": deadline,
        },
    ).fetchone()
    if row is None:
        return None
    # The checkpoint as this claim found it, read under the same lock: the pass needs no
    # `load` (another hop to another thread) before its first step.
    found = connection.execute(_SQL["load"], {"workflow": workflow}).fetchall()
    return row[0], deadline, found


def claimed_pass(
    codec: Codec, workflow: str, alive: timedelta, claimed: Claimed | None
) -> Pass | None:
    """The `Pass` a committed `claim_step` stands for, its records decoded. Call it on the
    caller's side, not on the writer's thread that other writes wait for."""
    if claimed is None:
        return None
    token, deadline, found = claimed
    records, ordinals = decode_checkpoint(codec, found)
    return Pass(workflow, token, alive, from_us(deadline), records, ordinals)


def release_step(connection: sqlite3.Connection, holder: Pass) -> None:
    """`release` as one statement (it reads no clock, so it needs no transaction of its own)."""
    connection.execute(_SQL["release"], {"workflow": holder.workflow, "token": holder.token})


def settle_params(holder: Pass, state: str, detail: Mapping[str, object]) -> dict[str, object]:
    """`settle_step`'s parameters, checked and encoded (on the caller's side, not the
    writer's thread)."""
    check_state(state)
    return {
        "workflow": check_workflow(holder.workflow),
        "token": holder.token,
        "state": state,
        "detail": detail_text(detail),
    }


def settle_step(connection: sqlite3.Connection, params: dict[str, object]) -> bool:
    """`settle` inside an open write transaction: whether the standing was written."""
    return connection.execute(_SQL["settle"], params | {"now": now_us()}).rowcount > 0


def conclude_step(
    connection: sqlite3.Connection, workflow: str, key: str, encoded: str
) -> tuple[str, bool]:
    """`conclude` inside an open write transaction: the ending written first-writer-wins and,
    if this write won, the fence raised (the records kept)."""
    now = now_us()
    text, first = _write(connection, workflow, key, encoded, now)
    if first:
        connection.execute(_SQL["fence"], {"workflow": workflow, "now_ms": now // 1000})
    return text, first


def end_step(
    connection: sqlite3.Connection, params: dict[str, object], key: str, encoded: str
) -> bool:
    """The ending and the standing (`settle_params`) written under the pass's token, if it is
    still the workflow's (a cancel's fence or a newer claim raised it otherwise); whether they
    were. The standing's write is the token's check: it is written only under that token, so
    no statement reads the claim first."""
    now = now_us()
    written = params | {"now": now, "key": key, "value": encoded}
    if connection.execute(_SQL["settle"], written).rowcount == 0:
        return False
    # First writer wins, as a record: an ending already there (a pass that ended it and was
    # not answered) stays as it was.
    connection.execute(_SQL["end"], written)
    return True


def discard_step(connection: sqlite3.Connection, workflow: str) -> int:
    """`discard` inside an open write transaction; how many records went."""
    gone = connection.execute(_SQL["forget"], {"workflow": workflow}).rowcount
    connection.execute(_SQL["unstand"], {"workflow": workflow})
    now = now_us()
    connection.execute(_SQL["fence"], {"workflow": workflow, "now_ms": now // 1000})
    return gone


class SqliteCheckpointer:
    """A `Checkpointer` over a `SqliteDatabase` (call `migrate` on it first).

    Times are the host clock read inside each transaction, after its lock is taken; the
    token is `max(now_ms, previous + 1)`. `history` times are UTC, to the microsecond.

    A fenced pass's transaction raises `Fenced` and rolls back: it writes nothing, and does not
    even renew. Values are encoded before the transaction, on the caller's side.
    """

    def __init__(self, database: SqliteDatabase, codec: Codec | None = None) -> None:
        self.database = database
        self.codec: Codec = codec or JsonCodec()

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        check_workflow(workflow)
        positive("budget", budget)
        positive("alive", alive)
        claimed = await self.database.write(
            lambda connection: claim_step(connection, workflow, budget, alive)
        )
        return claimed_pass(self.codec, workflow, alive, claimed)

    async def load(self, workflow: str) -> dict[str, object]:
        check_workflow(workflow)
        rows = await self.database.read(
            lambda connection: connection.execute(_SQL["load"], {"workflow": workflow}).fetchall()
        )
        return {key: self.codec.decode(text) for key, text in rows}

    async def history(self, workflow: str) -> list[Written]:
        check_workflow(workflow)
        rows = await self.database.read(
            lambda connection: connection.execute(
                _SQL["history"], {"workflow": workflow}
            ).fetchall()
        )
        return [Written(key, self.codec.decode(text), from_us(at)) for key, text, at in rows]

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self.codec.encode(value)

        def work(connection: sqlite3.Connection) -> tuple[str, bool]:
            now = now_us()
            _renew(connection, holder, now, holder.alive)
            return _write(connection, holder.workflow, key, encoded, now)

        text, first = await self.database.write(work)
        return Recorded(self.codec.decode(text), first)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        check_key(key)
        if not isinstance(effect, SqliteEffect):
            raise TypeError(f"the SQLite store performs SqliteEffect, not {type(effect).__name__}")
        codec = self.codec

        def work(connection: sqlite3.Connection) -> tuple[str, bool]:
            now = now_us()
            row = connection.execute(
                _SQL["recorded"], {"workflow": holder.workflow, "key": key}
            ).fetchone()
            # Fenced first: a fenced pass learns nothing, not even a recorded value.
            _renew(connection, holder, now, holder.alive)
            if row is not None:
                return str(row[0]), False
            # Encoding here, inside the transaction: a result the codec refuses rolls the
            # effect back with it.
            encoded = codec.encode(effect.perform(connection))
            return _write(connection, holder.workflow, key, encoded, now)

        text, first = await self.database.write(work)
        return Recorded(self.codec.decode(text), first)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        check_workflow(workflow)
        check_key(key)
        encoded = self.codec.encode(value)
        text, first = await self.database.write(
            lambda connection: supply_step(connection, workflow, key, encoded)
        )
        return Recorded(self.codec.decode(text), first)

    async def append(self, workflow: str, value: object) -> Entry:
        check_workflow(workflow)
        encoded = self.codec.encode(value)
        key = await self.database.write(
            lambda connection: append_step(connection, workflow, encoded)
        )
        return Entry(key, self.codec.decode(encoded))

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        positive("budget", budget)
        positive("alive", alive)

        def work(connection: sqlite3.Connection) -> int:
            now = now_us()
            row = connection.execute(
                _SQL["extend"],
                {
                    "workflow": holder.workflow,
                    "token": holder.token,
                    "now": now,
                    "budget": _us(budget),
                    "alive": _us(alive),
                },
            ).fetchone()
            if row is None:
                raise _fenced(connection, holder)
            deadline: int = row[0]
            return deadline

        deadline = await self.database.write(work)
        return Pass(holder.workflow, holder.token, holder.alive, from_us(deadline))

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        positive("alive", alive)
        await self.database.write(lambda connection: _renew(connection, holder, now_us(), alive))

    async def discard(self, workflow: str) -> int:
        check_workflow(workflow)
        return await self.database.write(lambda connection: discard_step(connection, workflow))

    async def release(self, holder: Pass) -> None:
        check_workflow(holder.workflow)
        await self.database.alone(lambda connection: release_step(connection, holder))

    async def conclude(self, workflow: str, key: str, value: object) -> Recorded:
        check_workflow(workflow)
        check_recorded_key(key)
        encoded = self.codec.encode(value)
        text, first = await self.database.write(
            lambda connection: conclude_step(connection, workflow, key, encoded)
        )
        if first:
            self.database.notify(ended_signal(workflow), ended=True)
        return Recorded(self.codec.decode(text), first)

    def watch(self, workflow: str) -> AbstractAsyncContextManager[SqliteBell]:
        """A bell rung as `workflow`'s ending commits (`durability.sqlite.watching`)."""
        check_workflow(workflow)
        return watch(self.database, workflow)

    # -- the ledger: where each workflow's last pass left it ----------------------------------

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        params = settle_params(holder, state, detail)
        return await self.database.write(lambda connection: settle_step(connection, params))

    async def look(self, workflow: str) -> Look:
        check_workflow(workflow)

        def read(connection: sqlite3.Connection) -> tuple[Any, int]:
            row = connection.execute(_SQL["look"], {"workflow": workflow}).fetchone()
            return row, now_us()

        (state, detail, at, until, deadline, known), now = await self.database.read(read)
        standing = None
        if state is not None:
            standing = Standing(workflow, state, json.loads(detail), from_us(at))
        claimed = until is not None and now < until and now < deadline
        return Look(standing, claimed, bool(known))

    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        check_state(state)
        check_page(prefix, limit, after)
        params = {"state": state, "prefix": prefix or "", "after": after or "", "limit": limit}
        sql = _SQL["standings_all" if state is None else "standings_in"]
        rows = await self.database.read(
            lambda connection: connection.execute(sql, params).fetchall()
        )
        return [
            Standing(workflow, found, json.loads(detail), from_us(at))
            for workflow, found, detail, at in rows
        ]

    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        check_page(prefix, 1, None)
        params = {"prefix": prefix or ""}
        rows = await self.database.read(
            lambda connection: connection.execute(_SQL["tally"], params).fetchall()
        )
        return {str(state): int(count) for state, count in rows}

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({self.database!r})"
