"""The SQLite stores: one file shared by every process on a machine, in WAL mode.

    database = await open_database("durability.db")
    await migrate(database)
    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))

Every write is one `BEGIN IMMEDIATE` transaction, so the check and the write it guards cannot
be split. One file is one application: the file is the namespace (there is no table prefix).
Import this subpackage only with the `sqlite` extra installed; `import durability` never needs it.
"""

from durability.sqlite.checkpointer import SqliteCheckpointer

# Two applications use two files, and removing an application is removing its file. (A `queue`
# name still separates queues inside one application.)
from durability.sqlite.database import SqliteDatabase, Synchronous, open_database

# `SqliteDurable`'s moves are one transaction each too, and `SqliteEffect` commits with its
# record. Writes asked for at the same time share one transaction, each behind a savepoint of
# its own (`batching`).
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
