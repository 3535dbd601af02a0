-- The scheduler's statements: one row per workflow per queue, scored by visible_at.
--
-- Every statement that can make a row visible sooner (make_ready, wake_at) also calls
-- pg_notify in the same statement, so the notification is sent if and only if the change
-- commits, and at the moment it commits. The payload is the queue's name; the channel is one
-- fixed identifier (LISTEN cannot take a bound parameter, and nothing is ever interpolated).

-- name: make_ready
-- Visible now (or earlier, if it already was), with a new receipt: a pass holding the row
-- finds its receipt gone, so its done() leaves this wakeup in place.
WITH now AS (SELECT clock_timestamp() AS t),
ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt)
    SELECT %(queue)s, %(workflow)s, now.t, nextval('durability.receipts') FROM now
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT count(*) FROM told

-- name: taking
-- The part every take begins with (`take` here, and `take` in durable.sql, which includes it):
-- the clock, the commit setting, and the `taken` CTE that hides the earliest visible row for
-- one lease under a new receipt. Not a statement of its own; it ends inside the WITH list.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
taken AS (
    UPDATE durability.queue AS q
    SET visible_at = now.t + %(lease)s,
        receipt = greatest(floor(extract(epoch FROM now.t) * 1000000)::bigint, q.receipt + 1)
    FROM now, (SELECT count(*) FROM quick) AS unflushed
    WHERE q.queue = %(queue)s AND q.workflow = (
        SELECT workflow FROM durability.queue
        WHERE queue = %(queue)s AND visible_at <= (SELECT t FROM now)
        ORDER BY visible_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING q.workflow, q.receipt,
              -- Whether its holder's lease lapsed: the receipt this statement's snapshot saw
              -- (the row before this update) was a take's, a clock reading, not a wakeup's
              -- from the sequence, whose values stay far below any clock reading.
              (SELECT was.receipt >= 1000000000000000 FROM durability.queue AS was
               WHERE was.queue = q.queue AND was.workflow = q.workflow) AS lapsed
),

-- name: take
-- Take the earliest visible row, skipping rows another worker is taking right now, and hide it
-- for one lease under a new receipt. Also report how long until the earliest row still hidden
-- becomes visible (a sleeper, or a lease that may lapse), so an idle worker knows when to look.
--
-- The receipt is the database clock in microseconds, or one more than the row's receipt if
-- that is ahead, NOT a sequence step, so this commit need not wait for the WAL flush (see
-- the module docstring): a take lost in a crash handed out a receipt no later take of the row
-- can repeat, because the clock has moved on by the restart. Receipts the synchronous writers
-- (make_ready, wake_at) mint from the sequence are far below any clock value, so the two
-- kinds never meet.
-- include: scheduler.sql taking
hidden AS (
    -- Only wanted when nothing was taken: otherwise a one-time filter skips the scan.
    SELECT min(visible_at) AS at FROM durability.queue
    WHERE queue = %(queue)s AND visible_at > (SELECT t FROM now)
      AND NOT EXISTS (SELECT FROM taken)
)
SELECT (SELECT workflow FROM taken),
       (SELECT receipt FROM taken),
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       (SELECT lapsed FROM taken)
FROM hidden, now

-- name: done
-- Compare-and-delete: a wakeup that landed mid-pass changed the receipt, and survives.
-- Committed without waiting for the WAL flush: a lost done is one extra pass.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM durability.queue
USING quick
WHERE queue = %(queue)s AND workflow = %(workflow)s AND receipt = %(receipt)s

-- name: wake_at
-- Still ours (receipt unchanged): the row becomes a sleeper at `when`, under a new receipt so
-- the done() that follows leaves it. Not ours (a wakeup landed mid-pass, or the lease lapsed
-- and someone else took it): keep whichever visibility is sooner. No row: the workflow was
-- cancelled meanwhile, and nothing is scheduled. Listeners are told either way, so an idle
-- worker learns of a sleeper due sooner than the one it was waiting for.
WITH moved AS (
    UPDATE durability.queue AS q
    SET visible_at = CASE WHEN q.receipt = %(receipt)s THEN %(when)s
                          ELSE least(q.visible_at, %(when)s) END,
        receipt = CASE WHEN q.receipt = %(receipt)s THEN nextval('durability.receipts')
                       ELSE q.receipt END
    WHERE q.queue = %(queue)s AND q.workflow = %(workflow)s
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM moved)
SELECT count(*) FROM told

-- name: extend
-- Keep a delivery hidden for `within` more. The receipt is kept: it changes only when a
-- wakeup lands or a worker takes the row, which is all done() needs to tell. Committed
-- without waiting for the WAL flush: a lost extend only lets the row show again sooner.
WITH now AS (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
UPDATE durability.queue AS q
SET visible_at = greatest(q.visible_at, now.t + %(within)s)
FROM now, quick
WHERE q.queue = %(queue)s AND q.workflow = %(workflow)s AND q.receipt = %(receipt)s
RETURNING 1

-- name: cancel
WITH gone AS (
    DELETE FROM durability.queue WHERE queue = %(queue)s AND workflow = %(workflow)s
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: earliest
SELECT min(visible_at) FROM durability.queue
WHERE queue = %(queue)s AND visible_at > (SELECT clock_timestamp())

-- name: probe
SELECT 1 FROM durability.queue LIMIT 0

-- name: footprint
-- The queue's rows by state, and what the table and its indexes take on disk (dead tuples
-- included, until vacuum: the cost of moving visible_at on every take shows here).
SELECT count(*) FILTER (WHERE visible_at <= clock_timestamp()),
       count(*) FILTER (WHERE visible_at > clock_timestamp()),
       pg_total_relation_size('durability.queue')
FROM durability.queue
WHERE queue = %(queue)s

-- name: backlog
-- The visible rows (ready, not taken) and how long ago the earliest became visible: a range of
-- the (queue, visible_at) index.
SELECT count(*), extract(epoch FROM clock_timestamp() - min(visible_at))
FROM durability.queue
WHERE queue = %(queue)s AND visible_at <= clock_timestamp()
