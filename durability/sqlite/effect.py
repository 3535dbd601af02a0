"""`SqliteEffect`: one SQL statement the SQLite checkpointer runs in the transaction that
records its result, so the statement's change and the record commit together or not at all.

A statement that would end or nest the transaction (`COMMIT`, `BEGIN`, `SAVEPOINT`, ...) is
refused by SQLite's authorizer before it runs: it would commit half of a step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from durability.values import Effect

__all__ = ["Parameters", "SqliteEffect"]

#: Bound parameters: positional (`?`) or named (`:name`).
Parameters = Sequence[object] | Mapping[str, object]


@dataclass(frozen=True, slots=True)
class SqliteEffect(Effect):
    """A statement with its bound parameters, run by `SqliteCheckpointer.transact`.

    Parameters are bound, never spliced into `sql`. The result (see `perform`) goes through the
    checkpointer's codec like any record; a result the codec refuses rolls the statement back
    with the record.
    """

    sql: str
    params: Parameters = ()

    def perform(self, connection: sqlite3.Connection) -> object:
        """Run the statement on `connection` (inside the caller's transaction); its result,
        which is what gets recorded:

        | the statement                                | its result                            |
        |----------------------------------------------|---------------------------------------|
        | returns rows (`SELECT`, `... RETURNING ...`) | the first column of the first row, or |
        |                                              | `None` when it returned no row        |
        | returns none (`INSERT`, `UPDATE`, `DELETE`)  | how many rows it changed (`rowcount`) |
        """
        connection.set_authorizer(_no_transaction_control)
        try:
            cursor = connection.execute(self.sql, self.params)
            try:
                if cursor.description is None:
                    return cursor.rowcount
                row = cursor.fetchone()
                return None if row is None else row[0]
            finally:
                # Resets the statement, so a SELECT left unfinished holds nothing open.
                cursor.close()
        finally:
            connection.set_authorizer(None)


_REFUSED = frozenset({sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})


def _no_transaction_control(action: int, *_: object) -> int:
    return sqlite3.SQLITE_DENY if action in _REFUSED else sqlite3.SQLITE_OK
