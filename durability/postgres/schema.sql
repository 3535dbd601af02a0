-- The tables behind durability.postgres, created by migrate() under an advisory lock.
--
-- Every statement is idempotent (IF NOT EXISTS), so running this file again is a no-op and many
-- processes may call migrate() at start-up; the advisory lock is what stops two of them racing
-- inside CREATE TABLE IF NOT EXISTS, which is not safe on its own against a concurrent creator.

CREATE SCHEMA IF NOT EXISTS durability;

-- A workflow's checkpoint: one row per recorded key, first writer wins (the primary key).
-- value is the codec's text rather than jsonb, so any Codec works and what comes back is
-- byte-for-byte what the codec wrote (jsonb would reorder keys and refuse non-JSON codecs).
-- seq gives first-recorded order; at is the database's own time of the write.
CREATE TABLE IF NOT EXISTS durability.records (
    workflow text        NOT NULL,
    key      text        NOT NULL,
    value    text        NOT NULL,
    seq      bigint      GENERATED ALWAYS AS IDENTITY,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (workflow, key)
);
CREATE INDEX IF NOT EXISTS records_in_order ON durability.records (workflow, seq);

-- Who may write next. The row outlives discard: its token keeps rising (max(now_ms, prev + 1))
-- so a pass stalled since before a discard is still fenced, and appended keeps minting fresh
-- inbox keys. until = -infinity means released; a claim is live while now < until and
-- now < deadline.
CREATE TABLE IF NOT EXISTS durability.claims (
    workflow text        PRIMARY KEY,
    token    bigint      NOT NULL,
    until    timestamptz NOT NULL,
    deadline timestamptz NOT NULL,
    appended bigint      NOT NULL DEFAULT 0
);

-- The queue: one row per workflow per queue, scored by when it becomes visible. Ready is a
-- visible_at in the past, sleeping one in the future, taken one a lease ahead. receipt changes
-- whenever a wakeup lands or a worker takes the row, so done() is a compare-and-delete.
CREATE SEQUENCE IF NOT EXISTS durability.receipts;
CREATE TABLE IF NOT EXISTS durability.queue (
    queue      text        NOT NULL,
    workflow   text        NOT NULL,
    visible_at timestamptz NOT NULL,
    receipt    bigint      NOT NULL,
    PRIMARY KEY (queue, workflow)
);
-- A wakeup's priority (higher is taken first) and the limit it names (key, at most, and per:
-- NULL for a bound on concurrency, a window for one on rate; no key, no limit). Added to a
-- table that may predate them: a constant default makes each ADD COLUMN a catalog change only.
-- Only when missing, checked first: ALTER TABLE locks the queue against every reader before
-- it looks for the column, and every process migrates at start-up.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute
                   WHERE attrelid = 'durability.queue'::regclass AND attname = 'limit_per'
                     AND NOT attisdropped) THEN
        ALTER TABLE durability.queue ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
        ALTER TABLE durability.queue ADD COLUMN IF NOT EXISTS limit_key text;
        ALTER TABLE durability.queue ADD COLUMN IF NOT EXISTS limit_at_most integer;
        ALTER TABLE durability.queue ADD COLUMN IF NOT EXISTS limit_per interval;
    END IF;
END
$$;
-- A take walks the priorities present, highest first (a loose scan: one probe per level), and
-- within a level reads the ready range in visibility order; with every row at 0 that is the
-- range the visibility index gave, so this index replaces it rather than joining it (a second
-- index on the queue would be written on every take).
CREATE INDEX IF NOT EXISTS queue_by_priority ON durability.queue (queue, priority, visible_at);
DROP INDEX IF EXISTS durability.queue_by_visibility;
-- The rows of a priority other than 0 or under a limit alone (none on the common path, where
-- no write adds to it): a take probes it first, and while a queue has none takes as it did
-- before either existed, without the level walk or the limits (scheduler.sql's `take_plain`);
-- an idle take finds here the keys of the ready limited rows it had to skip, to learn when
-- their limits open again. One index for both, so the queue keeps three (each write to the
-- queue opens every index of it and checks each partial one's predicate).
CREATE INDEX IF NOT EXISTS queue_with_policy ON durability.queue (queue, visible_at)
    WHERE priority <> 0 OR limit_key IS NOT NULL;
DROP INDEX IF EXISTS durability.queue_limited;

-- Each limit key's live holds, per queue, in one row: the take that admits a wakeup under the
-- key updates this row (INSERT ... ON CONFLICT DO UPDATE, whose WHERE sees the row's newest
-- version under its lock), so two takers of one key are serialized here and the second counts
-- the first's hold: no overshoot under READ COMMITTED. held maps '<take's receipt>/<workflow>'
-- to [workflow, until in epoch microseconds, rank in the take that admitted it]: a concurrency
-- hold lasts the lease (extended with the delivery, removed by its done), a rate hold the
-- window. Lapsed holds are pruned by the next admission; a row left holding nothing is deleted
-- (by the statement that gives its last hold back, or a later take's sweep). at_most, per and
-- last are the newest admission's.
CREATE TABLE IF NOT EXISTS durability.limits (
    queue   text     NOT NULL,
    key     text     NOT NULL,
    held    jsonb    NOT NULL DEFAULT '{}',
    at_most integer  NOT NULL,
    per     interval,
    last    text     NOT NULL,
    PRIMARY KEY (queue, key)
);
-- The limits rows by the workflows their holds name: a cancel frees its workflow's slots from
-- the rows that hold one (`releasing`), not by reading every key's row of the queue. An
-- existing schema gains it here (IF NOT EXISTS); the expression must match releasing's.
CREATE INDEX IF NOT EXISTS limits_by_holder ON durability.limits
    USING gin (jsonb_path_query_array(held, '$.*[0]'));

-- Where each workflow's last pass (or an explicit retry) left it: its state and that state's
-- JSON detail (durability.status). The id is in the "C" collation so the index orders it by
-- code point, the one order every store lists in, and a listing by state is a range of the
-- (state, workflow) index, paged by id.
CREATE TABLE IF NOT EXISTS durability.standings (
    workflow text COLLATE "C" PRIMARY KEY,
    state    text        NOT NULL,
    detail   text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS standings_by_state ON durability.standings (state, workflow);
-- The workflow's ending, when a finish wrote it here (durable.sql's `settling`) or a cancel did
-- (checkpointer.sql's `conclude`): its key, its value (the codec's text), its place in the
-- records' order (a number of the records' own sequence) and its time. Every read of the
-- records reads it as one of them, so a finish writes one row, not two. The first ending
-- written takes the place and keeps it; a later epoch's (after a retry) is a row of `records`,
-- as every ending was before these columns (and those rows read as they always did). Added
-- to a table that may predate them: nullable, no default, so each ADD COLUMN is a catalog
-- change only, made only when missing (as the queue's columns above).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute
                   WHERE attrelid = 'durability.standings'::regclass AND attname = 'ending_at'
                     AND NOT attisdropped) THEN
        ALTER TABLE durability.standings ADD COLUMN IF NOT EXISTS ending_key text,
            ADD COLUMN IF NOT EXISTS ending text, ADD COLUMN IF NOT EXISTS ending_seq bigint,
            ADD COLUMN IF NOT EXISTS ending_at timestamptz;
    END IF;
END
$$;

-- Schedules (durability.schedules), per queue: each one's record, opaque to SQL and compared
-- whole by a swap, and when it is next due (NULL: paused), indexed so an idle worker's look at
-- the earliest is one index read however many schedules there are.
CREATE TABLE IF NOT EXISTS durability.schedules (
    queue  text COLLATE "C" NOT NULL,
    name   text COLLATE "C" NOT NULL,
    record text             NOT NULL,
    due    timestamptz,
    PRIMARY KEY (queue, name)
);
CREATE INDEX IF NOT EXISTS schedules_by_due ON durability.schedules (queue, due)
    WHERE due IS NOT NULL;

-- Who waits for a workflow's ending (`result`): one row per waiter while it waits. A finish
-- notifies `<schema>_ended` only while any row is here (`watched`), since every notifying
-- commit takes a lock all other notifying commits wait on, and wakes every backend that
-- LISTENs on any channel of the database (a worker's wakeup listener among them) to read past
-- the notification: a cost on every pass that nobody asked for when nobody waits.
--
-- The race a waiter arriving mid-finish could lose is closed by the claim row. A finish asks
-- `watched` after its release has locked that row, and the function (volatile: a snapshot of
-- its own, not the statement's) sees any waiter committed before then. A waiter commits its
-- row while it holds the same row FOR SHARE (`watch` in checkpointer.sql), so either it
-- committed first and the finish notifies, or the finish committed first and the waiter's look
-- after it finds the ending. A waiting process marks its rows alive every half minute
-- (watching.py); a row not marked for three minutes is a dead process's, deleted by the next
-- waiter's `unwatch` (checkpointer.sql), or here, when a process migrates at its start.
CREATE TABLE IF NOT EXISTS durability.watchers (
    workflow text        NOT NULL,
    watcher  uuid        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (workflow, watcher)
);
DELETE FROM durability.watchers WHERE at < clock_timestamp() - interval '3 minutes';
CREATE OR REPLACE FUNCTION durability.watched(finished bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- `finished` (how many the statement wrote) only orders the call after those writes.
    RETURN finished > 0 AND EXISTS (SELECT FROM durability.watchers);
END
$$;
