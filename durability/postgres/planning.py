"""`configure`: how the store's connections plan its statements.

Each statement is prepared once per connection and then runs on a generic plan kept for the
connection's life, made from the tables as they were when it was planned. Planned while a
table was small (a new database, or statistics from before a burst), a lookup by key can come
out as a scan of the whole table, and stay one as the table grows to millions of rows. The
store's statements all find their rows by a key, so its connections plan without sequential
scans wherever an index serves, plan each statement once, and compile nothing (`configure`
says why); `transact` puts all three back for the effect it runs, the application's own SQL.
"""

from __future__ import annotations

from typing import Any

__all__ = ["configure"]


async def configure(conn: Any) -> None:
    """Set up a pool connection for the store (`AsyncConnectionPool(configure=...)`); the
    pools `open_durable` makes are set up so. Run on an autocommit connection.

    The connection also compiles nothing (`jit = off`): a scan the planner is told to avoid
    still costs what it is made to (ten billion), far past `jit_above_cost`, so a statement
    with a condition no index serves (the delete of a `result` waiter's row, whose sweep of
    stale rows reads the few rows there are) was compiled to machine code on every run, for
    far longer than it ran. No statement of the store runs long enough for compiling to pay.
    And it plans each statement once (`plan_cache_mode = force_generic_plan`): the server
    would plan a prepared statement afresh on each of its first five runs on each connection
    (and on every run after, if it judged those plans cheaper than the generic one), and the
    store's statements are long. The server's own settings are kept as `durability.jit` and
    `durability.plan_cache_mode`, and `transact` puts them back for the effect it runs."""
    await conn.execute(
        "SELECT set_config('enable_seqscan', 'off', false),"
        " set_config('durability.jit', current_setting('jit'), false),"
        " set_config('jit', 'off', false),"
        " set_config('durability.plan_cache_mode', current_setting('plan_cache_mode'), false),"
        " set_config('plan_cache_mode', 'force_generic_plan', false)"
    )
