"""`migrate`: create the store's tables, safely from many processes at once.

`schema.sql` is idempotent, but `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent
creator of the same table (both pass the check, one fails on the catalog's unique index). So the
whole file runs in one transaction holding a transaction-scoped advisory lock: the first process
creates, the rest wait for it and then find everything there. There is no version table yet;
a later change to the schema adds one here, beside the lock that will guard it.
"""

from __future__ import annotations

from durability.postgres.statements import DEFAULT_SCHEMA, Pool
from durability.postgres.statements import schema as schema_text

#: The advisory lock migrations hold. Any fixed bigint; this one spells "durable" in ASCII.
MIGRATION_LOCK = 0x647572_61626C65


async def migrate(pool: Pool, schema: str = DEFAULT_SCHEMA) -> None:
    """Create `schema` (`durability` unless given) and its tables if missing. Idempotent; safe
    to call from every process at start-up. Each application on one database migrates and
    opens its stores with a schema of its own, and sees nothing of another's."""
    text = schema_text(schema)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        # No parameters, so psycopg sends the file as one simple query: many statements.
        await conn.execute(text)
