-- The SQLite stores' tables. Every statement is idempotent: `migrate` runs this whole file in
-- one `BEGIN IMMEDIATE` transaction, in any number of processes at once.
-- Times are microseconds since the epoch from the host clock; tokens are milliseconds.

-- One row per workflow that was ever claimed, appended to or discarded: its claim and fence.
-- Kept when the workflow is discarded (token raised, claim cleared), so tokens rise forever.
CREATE TABLE IF NOT EXISTS durability_workflows (
    workflow    TEXT    PRIMARY KEY,
    token       INTEGER NOT NULL,           -- fencing token, max(now_ms, previous + 1)
    until_us    INTEGER NOT NULL,           -- the claim is live while now < until ...
    deadline_us INTEGER NOT NULL,           -- ... and now < deadline (the budget)
    appended    INTEGER NOT NULL DEFAULT 0  -- inbox entries minted so far
) WITHOUT ROWID;

-- The records. `seq` (the rowid) gives first-recorded order: a new row's rowid is above every
-- row present, so within one workflow it only rises, even after other rows were deleted.
CREATE TABLE IF NOT EXISTS durability_records (
    seq        INTEGER PRIMARY KEY,
    workflow   TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,            -- the codec's text
    written_us INTEGER NOT NULL,
    UNIQUE (workflow, key)
);

-- The queue: one row per (queue, workflow), scored by when it becomes visible. Ready is a
-- score in the past, asleep or held by a worker a score in the future. `receipt` changes on
-- every write that wants another pass, so `done` deletes only the wakeup it was handed.
CREATE TABLE IF NOT EXISTS durability_queue (
    queue      TEXT    NOT NULL,
    workflow   TEXT    NOT NULL,
    visible_us INTEGER NOT NULL,
    receipt    INTEGER NOT NULL,
    PRIMARY KEY (queue, workflow)
);

-- The queue's priority and limit columns, its index by priority and the holds of its limits
-- are in policies.sql, which `migrate` runs after adding those columns to a file made before
-- them (SQLite has no ADD COLUMN IF NOT EXISTS).

-- Where each workflow's last pass (or an explicit retry) left it: its state and that state's
-- JSON detail (durability.status). Indexed by state, then id, so a listing by state is a
-- range of the index, paged by id.
CREATE TABLE IF NOT EXISTS durability_standings (
    workflow TEXT    PRIMARY KEY,
    state    TEXT    NOT NULL,
    detail   TEXT    NOT NULL,
    at_us    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS durability_standings_by_state
    ON durability_standings (state, workflow);

-- Schedules (durability.schedules): each one's record, opaque to SQL and compared whole by a
-- swap, and when it is next due (NULL: paused), indexed so an idle worker's look at the
-- earliest is one index read however many schedules there are.
CREATE TABLE IF NOT EXISTS durability_schedules (
    queue  TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    record TEXT    NOT NULL,
    due_us INTEGER,
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS durability_schedules_due
    ON durability_schedules (queue, due_us) WHERE due_us IS NOT NULL;
