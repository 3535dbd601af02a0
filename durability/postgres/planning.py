"""`configure`: how the store's connections plan its statements.

Each statement is prepared once per connection and then runs on a generic plan kept for the
connection's life, made from the tables as they were when it was planned. Planned while a
table was small (a new database, or statistics from before a burst), a lookup by key can come
out as a scan of the whole table, and stay one as the table grows to millions of rows. The
store's statements all find their rows by a key, so its connections plan without sequential
scans wherever an index serves; `transact` turns them back on for the effect it runs, which is
the application's own SQL.
"""

from __future__ import annotations

from typing import Any

__all__ = ["configure"]


async def configure(conn: Any) -> None:
    """Set up a pool connection for the store (`AsyncConnectionPool(configure=...)`); the
    pools `open_durable` makes are set up so. Run on an autocommit connection."""
    await conn.execute("SET enable_seqscan = off")
