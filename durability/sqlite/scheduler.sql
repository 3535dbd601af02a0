-- The scheduler's statements, loaded by `queries("scheduler")`. Writes run inside a
-- transaction the Python opened with BEGIN IMMEDIATE; :now is host microseconds.
-- A row's receipt is replaced by every write that wants another pass, so a holder's `done`
-- (compare-and-delete on the receipt it was handed) cannot delete a wakeup that came later.

-- name: ready
-- Visible now, or earlier if it already was. A held row becomes visible at once: the wakeup
-- may carry input the running pass will not see. The wakeup's priority and limit merge with a
-- pending one's: a row a live pass holds (a take's odd receipt, its lease ahead) has none
-- pending, and takes this one's; a pending row (ready, asleep, or a lapsed take) keeps the
-- higher priority and its limit, or takes this one's if it had none. (SET reads the old row.)
INSERT INTO durability_queue (queue, workflow, visible_us, receipt,
                              priority, limit_key, limit_at_most, limit_per_us)
VALUES (:queue, :workflow, :now, :receipt, :priority, :limit_key, :limit_at_most, :limit_per_us)
ON CONFLICT (queue, workflow) DO UPDATE SET
    visible_us = min(visible_us, :now),
    receipt = :receipt,
    priority = CASE WHEN receipt % 2 = 1 AND visible_us > :now THEN excluded.priority
                    ELSE max(priority, excluded.priority) END,
    limit_key = CASE WHEN limit_key IS NULL OR (receipt % 2 = 1 AND visible_us > :now)
                     THEN excluded.limit_key ELSE limit_key END,
    limit_at_most = CASE WHEN limit_key IS NULL OR (receipt % 2 = 1 AND visible_us > :now)
                         THEN excluded.limit_at_most ELSE limit_at_most END,
    limit_per_us = CASE WHEN limit_key IS NULL OR (receipt % 2 = 1 AND visible_us > :now)
                        THEN excluded.limit_per_us ELSE limit_per_us END

-- name: levels
-- The priorities present in the queue, highest first, then one NULL: a loose scan of the
-- priority index, one probe per level (with every row at 0, one level). Not a statement of its
-- own: the WITH clause of each statement that walks the queue in order (`probe`, `next_look`,
-- `take`, `earliest`), which then reads `level` WHERE priority IS NOT NULL.
WITH RECURSIVE level (priority) AS (
    SELECT max(priority) FROM durability_queue WHERE queue = :queue
    UNION ALL
    SELECT (SELECT max(o.priority) FROM durability_queue AS o
            WHERE o.queue = :queue AND o.priority < level.priority)
    FROM level WHERE level.priority IS NOT NULL
)

-- name: probe
-- Read before locking: an idle waiter never takes the write lock. The earliest visibility,
-- past or future (one probe of the index per priority level present): whether a row is ready
-- now, and if not when the first hidden one shows.
SELECT CASE
    -- The common path (every row at 0, or none: two probes of the index) skips the walk.
    WHEN ifnull((SELECT max(o.priority) FROM durability_queue AS o WHERE o.queue = :queue), 0) = 0
     AND ifnull((SELECT min(o.priority) FROM durability_queue AS o WHERE o.queue = :queue), 0) = 0
    THEN (SELECT min(visible_us) FROM durability_queue WHERE queue = :queue AND priority = 0)
    ELSE (SELECT min(at) FROM (
-- include: scheduler.sql levels
        SELECT (SELECT min(visible_us) FROM durability_queue
                WHERE queue = :queue AND priority = level.priority) AS at
        FROM level WHERE level.priority IS NOT NULL
    ))
END

-- name: next_look
-- After a take found nothing it could take: when to look again. The earliest hidden row (a
-- sleeper, or a lease that may lapse), or the earliest hold to end under a key whose ready
-- rows were passed over (its holder's lease lapses, or its rate window moves on).
SELECT nullif(min(
    coalesce((SELECT min(at) FROM (
-- include: scheduler.sql levels
        SELECT (SELECT min(o.visible_us) FROM durability_queue AS o
                WHERE o.queue = :queue AND o.priority = level.priority
                  AND o.visible_us > :now) AS at
        FROM level WHERE level.priority IS NOT NULL
    )), 9223372036854775807),
    coalesce((SELECT min(h.until_us) FROM durability_holds AS h
              WHERE h.queue = :queue AND h.until_us > :now
                AND h.key IN (SELECT o.limit_key FROM durability_queue AS o
                              WHERE o.queue = :queue AND o.limit_key IS NOT NULL
                                AND o.visible_us <= :now)), 9223372036854775807)
), 9223372036854775807)

-- name: take
-- The best ready row becomes invisible for a lease, under a fresh receipt: the highest
-- priority present that has a ready row (levels walked as in `probe`), the earliest visible
-- within it, passing over a row whose limit has no room (fewer than at_most live holds of its
-- key, a workflow's own concurrency hold not counted: a re-take holds its slot once). A
-- limited row's hold is written by `hold` in the same transaction (`take_step`). Its clock is
-- read after the write lock is taken. A take's receipts are odd and a wakeup's even, so a row
-- still holding an odd one was taken and its lease ran out unanswered: it gets :lapsed instead
-- of :fresh, and RETURNING says which.
UPDATE durability_queue
SET visible_us = durability_now_us() + :lease,
    receipt = CASE WHEN receipt % 2 = 1 THEN :lapsed ELSE :fresh END
WHERE rowid = coalesce((
    -- The common path (no row above priority 0: one probe of the index) skips the walk: the
    -- first visible row of level 0 is the one the walk would take, if it has no limit. A
    -- limited one, or none visible at 0, and the walk decides (coalesce runs it only then).
    SELECT CASE WHEN q.limit_key IS NULL THEN q.rowid END FROM durability_queue AS q
    WHERE q.queue = :queue AND q.priority = 0 AND q.visible_us <= durability_now_us()
      AND (SELECT max(o.priority) FROM durability_queue AS o WHERE o.queue = :queue) = 0
    ORDER BY q.visible_us, q.rowid
    LIMIT 1
), (
-- include: scheduler.sql levels
    SELECT found FROM (
        -- Each key's live holds are counted once (`live`), not once a row: behind a full
        -- limit every ready row of its key is passed over, and a count a row made a take
        -- that missed cost the write lock in proportion to the rows times the holds. A
        -- workflow's own concurrency hold (a re-take) is looked for, by workflow, only where
        -- it decides.
        SELECT (SELECT q.rowid FROM durability_queue AS q
                LEFT JOIN (SELECT h.key AS key, count(*) AS n FROM durability_holds AS h
                           WHERE h.queue = :queue AND h.until_us > durability_now_us()
                           GROUP BY h.key) AS live ON live.key = q.limit_key
                WHERE q.queue = :queue AND q.priority = level.priority
                  AND q.visible_us <= durability_now_us()
                  AND (q.limit_key IS NULL
                       OR ifnull(live.n, 0) < q.limit_at_most
                       OR (q.limit_per_us IS NULL AND live.n - 1 < q.limit_at_most
                           AND EXISTS (SELECT 1 FROM durability_holds AS h
                                       WHERE h.queue = q.queue AND h.workflow = q.workflow
                                         AND h.key = q.limit_key
                                         AND h.until_us > durability_now_us())))
                ORDER BY q.visible_us, q.rowid
                LIMIT 1) AS found
        FROM level WHERE level.priority IS NOT NULL
    )
    WHERE found IS NOT NULL
    LIMIT 1
))
RETURNING workflow, receipt, visible_us, priority, limit_key, limit_at_most, limit_per_us

-- name: hold
-- The hold of a take under a limit (its receipt), after the key's lapsed holds are pruned and,
-- under a concurrency limit, the workflow's older hold (a re-take holds one slot, not two).
-- Two statements, run one after the other in the take's transaction.
DELETE FROM durability_holds
WHERE queue = :queue AND key = :key
  AND (until_us <= :now OR (:per_us IS NULL AND workflow = :workflow))

-- name: held
-- A concurrency hold names its workflow (a re-take, a cancel find it by that); a rate hold
-- names none: it is a take counted in its window, which nothing gives back.
INSERT INTO durability_holds (queue, key, receipt, workflow, until_us)
VALUES (:queue, :key, :receipt, CASE WHEN :per_us IS NULL THEN :workflow ELSE '' END, :until)

-- name: done
DELETE FROM durability_queue
WHERE queue = :queue AND workflow = :workflow AND receipt = :held

-- name: give_back
-- The hold of a delivery under a concurrency limit, by the take's receipt: its done, finish
-- or wake_at frees the slot (whether or not the row stayed for a wakeup that landed mid-pass).
DELETE FROM durability_holds WHERE queue = :queue AND key = :key AND receipt = :held

-- name: keep_hold
-- extend, for a delivery under a concurrency limit: its hold lasts as long as its lease.
UPDATE durability_holds SET until_us = max(until_us, :now + :within)
WHERE queue = :queue AND key = :key AND receipt = :held

-- name: wake_at
-- Still ours: sleep until :when, keeping the row's priority and limit (the delivery's). Written
-- over since (a wakeup landed, or a worker took it after our lease): keep the earlier
-- visibility, and merge the delivery's priority and limit in as `ready` does. Either way a new
-- receipt, so the holder's `done` leaves the row. No row: cancelled, and nothing is scheduled.
UPDATE durability_queue
SET visible_us = CASE WHEN receipt = :held THEN :when ELSE min(visible_us, :when) END,
    priority = CASE WHEN receipt = :held THEN priority ELSE max(priority, :priority) END,
    limit_key = CASE WHEN receipt = :held OR limit_key IS NOT NULL
                     THEN limit_key ELSE :limit_key END,
    limit_at_most = CASE WHEN receipt = :held OR limit_key IS NOT NULL
                         THEN limit_at_most ELSE :limit_at_most END,
    limit_per_us = CASE WHEN receipt = :held OR limit_key IS NOT NULL
                        THEN limit_per_us ELSE :limit_per_us END,
    receipt = :receipt
WHERE queue = :queue AND workflow = :workflow

-- name: extend
UPDATE durability_queue
SET visible_us = max(visible_us, :now + :within)
WHERE queue = :queue AND workflow = :workflow AND receipt = :held

-- name: cancel
DELETE FROM durability_queue WHERE queue = :queue AND workflow = :workflow

-- name: cancel_holds
-- In the cancel's transaction: the concurrency slots the workflow holds go back now, since its
-- pass can no longer answer for them (its writes are fenced). Found by workflow, not by the
-- row's limit: a wakeup that landed mid-pass may have changed that. A rate's holds name no
-- workflow (`held`), and stay out their window.
DELETE FROM durability_holds WHERE queue = :queue AND workflow = :workflow

-- name: earliest
SELECT min(at) FROM (
-- include: scheduler.sql levels
    SELECT (SELECT min(o.visible_us) FROM durability_queue AS o
            WHERE o.queue = :queue AND o.priority = level.priority AND o.visible_us > :now) AS at
    FROM level WHERE level.priority IS NOT NULL
)

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
