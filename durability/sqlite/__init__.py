"""The SQLite stores: one file shared by every process on a machine, in WAL mode.

    database = await open_database("durability.db")
    await migrate(database)
    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))

Every write is one `BEGIN IMMEDIATE` transaction (the check and the write it guards cannot be
split), `SqliteDurable`'s moves included, and `SqliteEffect` commits with its record; writes
asked for at the same time share one, each behind a savepoint (`batching`). Import this
subpackage only with the `sqlite` extra installed; `import durability` never needs it.

One file is one application: the file is the namespace (there is no table prefix), so two
applications use two files, and removing an application is removing its file. (A `queue`
name still separates queues inside one application.)
"""

from durability.sqlite.checkpointer import SqliteCheckpointer
from durability.sqlite.database import SqliteDatabase, Synchronous, open_database
from durability.sqlite.durable import SqliteDurable
from durability.sqlite.effect import SqliteEffect
from durability.sqlite.migrate import SCHEMA_VERSION, migrate
from durability.sqlite.scheduler import SqliteScheduler

__all__ = [
    "SCHEMA_VERSION",
    "SqliteCheckpointer",
    "SqliteDatabase",
    "SqliteDurable",
    "SqliteEffect",
    "SqliteScheduler",
    "Synchronous",
    "migrate",
    "open_database",
]
