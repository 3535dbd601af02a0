"""`PostgresEffect`: a statement Postgres runs in the same transaction that records its result.

This is the only exactly-once effect the Postgres store offers, and it is exactly-once because
the statement and the record commit together or not at all: `transact` fences the pass and
reserves the key, runs the statement, and fills the record, in one transaction. A key already
recorded means the statement is not run again.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from durability.deprecation import GOES_IN
from durability.values import Effect


@dataclass(frozen=True, slots=True)
class PostgresEffect(Effect):
    """One SQL statement with bound parameters (`%s` or `%(name)s` placeholders).

    With no parameters the statement is sent as it is (a literal `%` needs no escaping);
    with parameters, psycopg's placeholder rules apply (`%%` for a literal `%`).

    The result (see `perform`) goes through the checkpointer's codec like any recorded value, so
    it must be a value the codec can hold (with the default `JsonCodec`: no `Decimal`, no
    `datetime`; cast in SQL, e.g. `RETURNING balance::float8` or `to_char(...)`). A result the
    codec refuses raises `Unencodable` and rolls the transaction back, so the statement's own
    writes are undone with it.
    """

    sql: str
    params: Sequence[object] | Mapping[str, object] = ()

    async def perform(self, conn: AsyncConnection[Any]) -> object:
        """Run the statement on `conn` (inside the caller's transaction); return its result,
        which is what gets recorded:

        | the statement                             | its result                                  |
        |-------------------------------------------|---------------------------------------------|
        | returns rows (`SELECT`, `... RETURNING`)  | first column of the first row; None if none |
        | returns none (`INSERT`/`UPDATE`/`DELETE`) | how many rows it touched (`rowcount`)       |
        """
        cursor = conn.cursor(row_factory=tuple_row)
        await cursor.execute(self.sql, self.params or None)
        if cursor.description is None:
            return cursor.rowcount
        row = await cursor.fetchone()
        return None if row is None else row[0]


def __getattr__(name: str) -> object:
    # The class was `SqlEffect` here before its rename; the old name answers, warning, for one
    # release (as `durability.postgres.SqlEffect` does).
    if name == "SqlEffect":
        warnings.warn(
            f"durability.postgres.effect.SqlEffect is renamed PostgresEffect; the old name goes"
            f" in {GOES_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return PostgresEffect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
