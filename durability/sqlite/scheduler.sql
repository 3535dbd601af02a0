-- The scheduler's statements, loaded by `queries("scheduler")`. Writes run inside a
-- transaction the Python opened with BEGIN IMMEDIATE; :now is host microseconds.
-- A row's receipt is replaced by every write that wants another pass, so a holder's `done`
-- (compare-and-delete on the receipt it was handed) cannot delete a wakeup that came later.

-- name: ready
-- Visible now, or earlier if it already was. A held row becomes visible at once: the wakeup
-- may carry input the running pass will not see.
INSERT INTO durability_queue (queue, workflow, visible_us, receipt)
VALUES (:queue, :workflow, :now, :receipt)
ON CONFLICT (queue, workflow) DO UPDATE SET
    visible_us = min(visible_us, :now),
    receipt = :receipt

-- name: probe
-- Read before locking: an idle waiter never takes the write lock. The earliest visibility,
-- past or future: whether a row is ready now, and if not when the first hidden one shows.
SELECT min(visible_us) FROM durability_queue WHERE queue = :queue

-- name: take
-- The earliest visible row becomes invisible for a lease, under a fresh receipt. One statement,
-- run as its own transaction: its clock is read after the write lock is taken. A take's
-- receipts are odd and a wakeup's even, so a row still holding an odd one was taken and its
-- lease ran out unanswered: it gets :lapsed instead of :fresh, and RETURNING says which.
UPDATE durability_queue
SET visible_us = durability_now_us() + :lease,
    receipt = CASE WHEN receipt % 2 = 1 THEN :lapsed ELSE :fresh END
WHERE rowid = (
    SELECT rowid FROM durability_queue
    WHERE queue = :queue AND visible_us <= durability_now_us()
    ORDER BY visible_us, rowid
    LIMIT 1
)
RETURNING workflow, receipt

-- name: done
DELETE FROM durability_queue
WHERE queue = :queue AND workflow = :workflow AND receipt = :held

-- name: wake_at
-- Still ours: sleep until :when. Written over since (a wakeup landed, or a worker took it
-- after our lease): keep the earlier visibility. Either way a new receipt, so the holder's
-- `done` leaves the row. No row: cancelled, and nothing is scheduled.
UPDATE durability_queue
SET visible_us = CASE WHEN receipt = :held THEN :when ELSE min(visible_us, :when) END,
    receipt = :receipt
WHERE queue = :queue AND workflow = :workflow

-- name: extend
UPDATE durability_queue
SET visible_us = max(visible_us, :now + :within)
WHERE queue = :queue AND workflow = :workflow AND receipt = :held

-- name: cancel
DELETE FROM durability_queue WHERE queue = :queue AND workflow = :workflow

-- name: earliest
SELECT min(visible_us) FROM durability_queue WHERE queue = :queue AND visible_us > :now

-- name: footprint
SELECT count(*) FILTER (WHERE visible_us <= :now), count(*) FILTER (WHERE visible_us > :now)
FROM durability_queue WHERE queue = :queue

-- name: footprint_bytes
-- What the queue table and its indexes take in the file (needs SQLite's dbstat table).
SELECT sum(pgsize) FROM dbstat
WHERE name IN (
    SELECT name FROM sqlite_schema WHERE tbl_name = 'durability_queue'
)

-- name: backlog
-- The visible rows (ready, not taken) and the earliest time one became visible.
SELECT count(*), min(visible_us) FROM durability_queue
WHERE queue = :queue AND visible_us <= :now
