"""The Postgres store: every guarantee an ordinary transaction, and idle workers woken by
LISTEN/NOTIFY rather than a polling floor.

    pool = AsyncConnectionPool(dsn, kwargs={"autocommit": True}, configure=configure, open=False)
    await pool.open(wait=True)
    await migrate(pool)
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), PostgresScheduler(pool=pool))
    await durable.scheduler.close(); await pool.close()   # settles what cancelled calls left

Needs the `postgres` extra (psycopg 3 and psycopg-pool); `durability` alone never imports it.
"""

import warnings

from durability.deprecation import GOES_IN
from durability.postgres.checkpointer import PostgresCheckpointer
from durability.postgres.durable import PostgresDurable
from durability.postgres.effect import PostgresEffect

# Tables live in the `durability` schema (`schema.sql`), or in the schema given to
# `migrate(pool, schema)` and to each store (`schema=`; `?schema=` in a store URL): one per
# application sharing a database, each with its own tables and notification channel. Dropping
# an application's schema (`DROP SCHEMA <name> CASCADE`) removes all of it.
from durability.postgres.migrate import migrate
from durability.postgres.planning import configure
from durability.postgres.scheduler import PostgresScheduler

__all__ = [
    "PostgresCheckpointer",
    "PostgresDurable",
    "PostgresScheduler",
    "PostgresEffect",
    "configure",
    "migrate",
]


def __getattr__(name: str) -> object:
    # `SqlEffect` was renamed `PostgresEffect` (beside SqliteEffect, LuaEffect, MemoryEffect);
    # the old name answers, warning, for one release.
    if name == "SqlEffect":
        warnings.warn(
            f"durability.postgres.SqlEffect is renamed PostgresEffect; the old name goes in"
            f" {GOES_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return PostgresEffect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
