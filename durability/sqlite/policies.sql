-- Priorities and limits (issue 34), run by `migrate` after schema.sql and after it added the
-- queue's columns, if missing: priority INTEGER NOT NULL DEFAULT 0, limit_key TEXT,
-- limit_at_most INTEGER, limit_per_us INTEGER (NULL: a bound on concurrency; else the rate
-- limit's window). Idempotent, like schema.sql.

-- A take walks the priorities present, highest first (one probe per level), and within a
-- level reads the ready range in visibility order: with every row at 0 that is the range the
-- visibility index gave, so this index replaces it (a second one would be written on every
-- take).
CREATE INDEX IF NOT EXISTS durability_queue_by_priority
    ON durability_queue (queue, priority, visible_us);
DROP INDEX IF EXISTS durability_queue_visible;

-- The limited rows alone (none when no wakeup names a limit): an idle look finds the keys of
-- ready rows a take passed over here, to learn when their limits open again.
CREATE INDEX IF NOT EXISTS durability_queue_limited
    ON durability_queue (queue, visible_us) WHERE limit_key IS NOT NULL;

-- The holds of each limit key: one per take under the key, until its lease ends (a bound on
-- concurrency: stretched by extend, removed by done or by its workflow's cancel) or its window
-- does (a rate). A key has
-- room while fewer than at_most of its holds are live. A take counts them and writes its own
-- in one write transaction (`take_step`), and writers are serialized by the file's lock, so
-- no two takes both see the last slot free.
CREATE TABLE IF NOT EXISTS durability_holds (
    queue    TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    receipt  INTEGER NOT NULL,  -- the take's
    workflow TEXT    NOT NULL,  -- the holder's; '' for a rate's hold (no one gives it back)
    until_us INTEGER NOT NULL,
    PRIMARY KEY (queue, key, receipt)
) WITHOUT ROWID;

-- A file migrated while this held a trigger writing the holds: the take writes them itself.
DROP TRIGGER IF EXISTS durability_queue_held;

-- The holds of a workflow: a cancel's (`cancel_holds`), and a take's look for a re-taken
-- workflow's own hold, find them here rather than among every hold of the queue or key.
CREATE INDEX IF NOT EXISTS durability_holds_by_workflow
    ON durability_holds (queue, workflow);
