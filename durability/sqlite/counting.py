"""`Counted`: a SQLite connection that counts each statement it runs, by its leading keyword.

Counted where `execute` is called, not through SQLite's trace hook: the hook hands Python each
statement's text with every parameter spelled out, which SQLite makes by tokenizing the whole
text again (a take's statement is a few kilobytes) and formatting each value, on every run.
`SqliteDatabase.trace` still installs the hook, for a caller that wants the text.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any

__all__ = ["Counted", "keyword"]

#: Statements' texts and their keywords: ours are a few dozen fixed texts. Bounded, for an
#: effect that builds its text each time.
_KEYWORDS: dict[str, str] = {}
_KEPT = 1024


def keyword(sql: str) -> str:
    """The statement's leading keyword, upper case (`BEGIN` for `BEGIN IMMEDIATE`)."""
    found = _KEYWORDS.get(sql)
    if found is None:
        words = sql.split(None, 1)
        found = words[0].upper() if words else ""
        if len(_KEYWORDS) < _KEPT:
            _KEYWORDS[sql] = found
    return found


class Counted(sqlite3.Connection):
    """A connection whose `execute` counts the statement into `sent` (when set), from the
    connection's own thread: one writer per counter (`Traffic.counter`)."""

    sent: Counter[str] | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        sent = self.sent
        if sent is not None:
            sent[keyword(sql)] += 1
        return super().execute(sql, parameters)
