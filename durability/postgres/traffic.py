"""Counting what the Postgres store sends (`durability.storekit.traffic`), connection by connection.

A pool that `open_durable` makes tags each connection with the durable's `Traffic` as it
opens (`attach`, from the pool's `configure`); `libpq_pipeline.exchange` and the cursor paths in
`statements` then count each statement by its name in the `.sql` files (`scheduler.take`) and
each send that waits for answers as a round trip. A pool of the caller's own counts nothing
unless its `configure` calls `attach` too.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from durability.storekit.traffic import Traffic

__all__ = ["attach", "name", "of", "register"]

_COUNTING: weakref.WeakKeyDictionary[Any, Traffic] = weakref.WeakKeyDictionary()
#: Statement text -> "<file>.<name>", for every statement the store has loaded.
_NAMES: dict[str, str] = {}


def attach(conn: Any, traffic: Traffic) -> None:
    """Count what is sent on `conn` into `traffic`."""
    _COUNTING[conn] = traffic


def of(conn: Any) -> Traffic | None:
    """The `Traffic` that `conn` counts into, if any."""
    return _COUNTING.get(conn)


def register(filename: str, named: Mapping[str, str]) -> None:
    """Name the statements of one `.sql` file for counting."""
    stem = filename.removesuffix(".sql")
    for statement, text in named.items():
        _NAMES.setdefault(text, f"{stem}.{statement}")


def name(sql: str) -> str:
    """A statement's name: its entry in a `.sql` file, else its first word (an effect's SQL)."""
    found = _NAMES.get(sql)
    if found is not None:
        return found
    words = sql.split(None, 1)
    return words[0].upper() if words else "?"
