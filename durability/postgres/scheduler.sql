-- The scheduler's statements: one row per workflow per queue, scored by visible_at.
--
-- Every statement that can make a row visible sooner (make_ready, wake_at) also calls
-- pg_notify in the same statement, so the notification is sent if and only if the change
-- commits, and at the moment it commits. The payload is the queue's name; the channel is one
-- fixed identifier (LISTEN cannot take a bound parameter, and nothing is ever interpolated).

-- name: levels
-- The priorities present in the queue, highest first: a loose scan of queue_by_priority, one
-- probe per level, run lazily (a reader that stops at the first level probes once). A CTE
-- for a WITH list (no comma after it): every statement that walks the queue in order.
levels AS (
    WITH RECURSIVE level (priority) AS (
        (SELECT priority FROM durability.queue WHERE queue = %(queue)s
         ORDER BY priority DESC LIMIT 1)
        UNION ALL
        SELECT (SELECT o.priority FROM durability.queue AS o
                WHERE o.queue = %(queue)s AND o.priority < level.priority
                ORDER BY o.priority DESC LIMIT 1)
        FROM level WHERE level.priority IS NOT NULL
    )
    SELECT priority FROM level WHERE priority IS NOT NULL
)

-- name: policy
-- A wakeup's priority and limit as bound parameters, in the queue's column order (the tail of
-- a SELECT list).
           %(priority)s::smallint, %(limit_key)s::text, %(limit_at_most)s::integer,
           %(limit_per)s::interval

-- name: merging
-- The part of every wakeup's upsert (make_ready here, arrive and deliver in durable.sql) that
-- sets its priority and limit. A row a live pass holds (a take's receipt, its lease ahead)
-- has no wakeup pending: this one brings its own. A pending row (ready, asleep, or a lapsed
-- take) keeps the higher priority of the two and its limit, or takes this one's if it had
-- none. Not a statement of its own: the tail of a SET list.
            priority = CASE WHEN q.receipt >= 1000000000000000
                                 AND q.visible_at > EXCLUDED.visible_at
                            THEN EXCLUDED.priority
                            ELSE greatest(q.priority, EXCLUDED.priority) END,
            limit_key = CASE WHEN q.limit_key IS NULL
                                  OR (q.receipt >= 1000000000000000
                                      AND q.visible_at > EXCLUDED.visible_at)
                             THEN EXCLUDED.limit_key ELSE q.limit_key END,
            limit_at_most = CASE WHEN q.limit_key IS NULL
                                      OR (q.receipt >= 1000000000000000
                                          AND q.visible_at > EXCLUDED.visible_at)
                                 THEN EXCLUDED.limit_at_most ELSE q.limit_at_most END,
            limit_per = CASE WHEN q.limit_key IS NULL
                                  OR (q.receipt >= 1000000000000000
                                      AND q.visible_at > EXCLUDED.visible_at)
                             THEN EXCLUDED.limit_per ELSE q.limit_per END

-- name: make_ready
-- Visible now (or earlier, if it already was), with a new receipt: a pass holding the row
-- finds its receipt gone, so its done() leaves this wakeup in place. Its priority and limit
-- merge with a pending wakeup's (`merging`).
WITH now AS (SELECT clock_timestamp() AS t),
ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt,
                                       priority, limit_key, limit_at_most, limit_per)
    SELECT %(queue)s, %(workflow)s, now.t, nextval('durability.receipts'),
-- include: scheduler.sql policy

    FROM now
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt,
-- include: scheduler.sql merging
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT count(*) FROM told

-- name: plain
-- Whether the queue holds no wakeup of a priority other than 0 or under a limit, in this
-- statement's snapshot: one probe of queue_with_policy, which holds those rows alone (none
-- at all on the common path). A CTE for a WITH list (no comma after it). Every take answers it last,
-- so its caller knows which take to send next (see `take_plain`).
plain AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT FROM durability.queue AS s
                       WHERE s.queue = %(queue)s
                         AND (s.priority <> 0 OR s.limit_key IS NOT NULL)) AS yes
)

-- name: taking_plain
-- `taking` on the common path, in main's shape before priorities and limits: the earliest
-- visible row (queue_by_priority's level 0), SKIP LOCKED, hidden for one lease under a new
-- receipt. Only while `plain` holds (a one-time filter: otherwise nothing is read, nothing is
-- taken, and the caller sends the full take). A row a wakeup merged a priority or a limit
-- into since the snapshot fails the recheck under its lock and is passed over, so this never
-- takes a row the full take would order or count otherwise. Ends inside the WITH list.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
-- include: scheduler.sql plain
,
taken AS (
    UPDATE durability.queue AS q
    SET visible_at = now.t + %(lease)s,
        receipt = greatest(floor(extract(epoch FROM now.t) * 1000000)::bigint, q.receipt + 1)
    FROM now, (SELECT count(*) FROM quick) AS unflushed
    WHERE q.queue = %(queue)s AND q.workflow = (
        SELECT workflow FROM durability.queue
        WHERE queue = %(queue)s AND priority = 0 AND visible_at <= (SELECT t FROM now)
          AND limit_key IS NULL AND (SELECT yes FROM plain)
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

-- name: hiding_plain
-- `hiding` on the common path: every row is at level 0 (`plain`), so the earliest hidden row
-- is the first of level 0's hidden range, and no limit can reopen. Only wanted when fewer
-- than %(n)s rows were taken (a one-time filter skips the probe otherwise).
hidden AS (
    SELECT min(visible_at) AS at FROM durability.queue
    WHERE queue = %(queue)s AND priority = 0 AND visible_at > (SELECT t FROM now)
      AND (SELECT count(*) FROM taken) < %(n)s AND (SELECT yes FROM plain)
)

-- name: clock
-- The clock a take reads once (`now`: t, and t in epoch microseconds, a take's receipt) and
-- its commit setting (`quick`: no wait for the WAL flush). CTEs for a WITH list.
now AS MATERIALIZED (
    SELECT t, floor(extract(epoch FROM t) * 1000000)::bigint AS us
    FROM (SELECT clock_timestamp() AS t) AS c
),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),

-- name: taken
-- The part every take that locks its rows first shares (`taking` here, `take_many_plain` in
-- durable.sql): the rows of the CTE `chosen` (each locked; its ctid, tableoid, workflow, receipt)
-- hidden for one lease under a take's receipt (the clock in microseconds, or one more than
-- the row's), found by where they lie (a TID scan: the lock is held, so they cannot move).
-- Answers each row's policy columns too (the plain take's are NULL and go unread). Ends
-- inside the WITH list.
taken AS (
    UPDATE durability.queue AS q
    SET visible_at = now.t + %(lease)s,
        receipt = greatest(now.us, q.receipt + 1)
    FROM now, (SELECT count(*) FROM quick) AS unflushed
    WHERE q.ctid = ANY (ARRAY(SELECT ctid FROM chosen))
      -- A ctid names a row within one table: on a partitioned queue the TID scan meets the
      -- same place in every partition, rows this take never locked (another take's: a wait,
      -- and a deadlock). Only the chosen partition's row is this take's. An unpartitioned
      -- queue's rows all lie in the table itself, where the ctid alone is exact: the first
      -- arm answers for them, and the look in `chosen` (a scan of it a row) never runs.
      AND (q.tableoid = 'durability.queue'::regclass
           OR q.tableoid = (SELECT c.tableoid FROM chosen AS c
                            WHERE c.ctid = q.ctid AND c.tableoid = q.tableoid))
    RETURNING q.workflow, q.receipt,
              -- Whether its holder's lease lapsed: the receipt the row held when picked was a
              -- take's, a clock reading, not a wakeup's from the sequence, whose values stay
              -- far below any clock reading.
              (SELECT w.receipt >= 1000000000000000 FROM chosen AS w
               WHERE w.workflow = q.workflow) AS lapsed,
              q.priority, q.limit_key, q.limit_at_most,
              extract(epoch FROM q.limit_per)::float8 AS limit_per
),

-- name: taking
-- The part every take begins with (`take` here, `take` and `take_many` in durable.sql): the
-- clock, the commit setting, and the `taken` CTE that hides up to %(n)s rows for one lease
-- under new receipts. Not a statement of its own; it ends inside the WITH list.
--
-- Order: the priorities present, highest first, walked as a loose scan of queue_by_priority
-- (`levels`: one probe per level, lazily, so with every row at 0 it is one probe and the
-- take stops at the first level that yields); within a level the ready range in visibility
-- order, SKIP LOCKED. A row whose limit is full, as this statement's snapshot sees it, is
-- passed over (the rows behind it are taken).
--
-- Limits: `admitted` upserts the limits row of each key picked, once per key with all of
-- its wakeups (keys in order, so two takers lock them in one order), and admits as many as
-- the limit has room for. ON CONFLICT DO UPDATE locks the row and counts against its newest
-- committed version, so a taker that waited for another's admission counts those holds,
-- which a count from the snapshot would not (READ COMMITTED). A wakeup not admitted stays
-- ready and untouched.
WITH
-- include: scheduler.sql clock
-- include: scheduler.sql levels
,
picked AS MATERIALIZED (
    SELECT p.* FROM levels CROSS JOIN LATERAL (
        SELECT q.ctid, q.tableoid, q.workflow, q.receipt, q.priority, q.visible_at, q.limit_key,
               q.limit_at_most, q.limit_per,
               -- The take's receipt: the clock in microseconds, or one more than the row's.
               greatest((SELECT us FROM now), q.receipt + 1) AS next
        FROM durability.queue AS q
        WHERE q.queue = %(queue)s AND q.priority = levels.priority
          AND q.visible_at <= (SELECT t FROM now)
          AND (q.limit_key IS NULL OR NOT EXISTS (
              SELECT FROM durability.limits AS l
              WHERE l.queue = q.queue AND l.key = q.limit_key
                AND (SELECT count(*) FROM jsonb_each(l.held) AS h
                     WHERE (h.value ->> 1)::bigint > (SELECT us FROM now)
                       AND (q.limit_per IS NOT NULL OR h.value ->> 0 <> q.workflow))
                    >= q.limit_at_most))
        ORDER BY q.visible_at
        LIMIT %(n)s
        FOR UPDATE SKIP LOCKED
    ) AS p
    LIMIT %(n)s
),
asking AS MATERIALIZED (
    -- The wakeups picked under a limit, ranked within their key (priority, then visibility),
    -- with the limit of the best of them, the key's for this take; no more than it allows.
    SELECT * FROM (
        SELECT w.limit_key, w.workflow, w.next,
               row_number() OVER best AS rank,
               first_value(w.limit_at_most) OVER best AS at_most,
               first_value(w.limit_per) OVER best AS per
        FROM picked AS w WHERE w.limit_key IS NOT NULL
        WINDOW best AS (PARTITION BY w.limit_key ORDER BY w.priority DESC, w.visible_at,
                                                          w.workflow)
    ) AS ranked
    WHERE rank <= at_most
),
admitted AS (
    -- One proposal per key (an upsert changes a row once per statement), keys in order,
    -- carrying its wakeups as holds [workflow, until, rank]. A key with no row yet takes them
    -- all (at most its limit). Otherwise the DO UPDATE, under the row's lock and on its newest
    -- version, keeps the live holds and admits the wakeups in rank order while the count
    -- stays within the limit: a concurrency hold of a workflow admitted again is its own
    -- (re-taken), so that wakeup adds nothing to the count.
    INSERT INTO durability.limits AS l (queue, key, held, at_most, per, last)
    SELECT %(queue)s, a.limit_key,
           jsonb_object_agg(a.next::text || '/' || a.workflow, jsonb_build_array(
               a.workflow,
               floor(extract(epoch FROM now.t + coalesce(a.per, %(lease)s)) * 1000000)::bigint,
               a.rank)),
           min(a.at_most), min(a.per), min(a.workflow)
    FROM asking AS a, now
    GROUP BY a.limit_key, now.t
    ORDER BY a.limit_key
    ON CONFLICT (queue, key) DO UPDATE
        SET held = (
            WITH live AS (
                SELECT h.key, h.value FROM jsonb_each(l.held) AS h
                WHERE (h.value ->> 1)::bigint > (SELECT us FROM now)
            ),
            asked AS (
                SELECT c.key, c.value,
                       sum(CASE WHEN EXCLUDED.per IS NULL AND EXISTS (
                                    SELECT FROM live WHERE live.value ->> 0 = c.value ->> 0)
                                THEN 0 ELSE 1 END)
                           OVER (ORDER BY (c.value ->> 2)::bigint) AS counted
                FROM jsonb_each(EXCLUDED.held) AS c
            ),
            let_in AS (
                SELECT asked.key, asked.value FROM asked
                WHERE (SELECT count(*) FROM live) + asked.counted <= EXCLUDED.at_most
            )
            SELECT coalesce(jsonb_object_agg(kept.key, kept.value), '{}') FROM (
                SELECT live.key, live.value FROM live
                WHERE EXCLUDED.per IS NOT NULL
                   OR NOT EXISTS (SELECT FROM let_in
                                  WHERE let_in.value ->> 0 = live.value ->> 0)
                UNION ALL
                SELECT let_in.key, let_in.value FROM let_in
            ) AS kept),
            at_most = EXCLUDED.at_most, per = EXCLUDED.per, last = EXCLUDED.last
    RETURNING l.key, l.held
),
swept AS (
    -- A bounded sweep: of the limits rows on one page of the table, picked at random (a
    -- sample of one page in the table's size as its statistics last had it: all of a table
    -- never analyzed), up to 8 of the queue's that hold nothing live (a rate's window gone
    -- by, a holder that lapsed), none under a key this take admits to. A sweep reads a page,
    -- not every key's row: with a thousand keys held that would cost the take about 1 ms.
    -- Each is locked SKIP LOCKED (a sweep never waits, so it keeps no lock order with anyone)
    -- with its holds checked again on its newest version, then deleted by where it lies: a
    -- row an admission changed after this statement's snapshot lies elsewhere now, and stays.
    DELETE FROM durability.limits AS l
    WHERE l.ctid = ANY (ARRAY(
        SELECT s.ctid FROM durability.limits AS s
            TABLESAMPLE SYSTEM ((SELECT least(100, 100.0 / greatest(c.relpages, 1))
                                 FROM pg_class AS c
                                 WHERE c.oid = 'durability.limits'::regclass))
        WHERE s.queue = %(queue)s
          AND NOT EXISTS (SELECT FROM asking AS a WHERE a.limit_key = s.key)
          AND NOT EXISTS (SELECT FROM jsonb_each(s.held) AS h
                          WHERE (h.value ->> 1)::bigint > (SELECT us FROM now))
        LIMIT 8
        FOR UPDATE SKIP LOCKED))
    RETURNING 1
),
chosen AS MATERIALIZED (
    SELECT w.* FROM picked AS w
    WHERE w.limit_key IS NULL
       OR EXISTS (SELECT FROM admitted AS a WHERE a.key = w.limit_key AND a.held ? (w.next::text || '/' || w.workflow))
),
-- include: scheduler.sql taken

-- name: soonest
-- When the earliest hidden row becomes visible (an expression, NULL if none is hidden), in
-- two index probes whatever the priorities present: level 0's hidden range of
-- queue_by_priority, and queue_with_policy's, which holds every row of another level (and
-- level 0's limited rows, which a min may meet twice). Needs the CTE `now`.
least(
    (SELECT min(o.visible_at) FROM durability.queue AS o
     WHERE o.queue = %(queue)s AND o.priority = 0 AND o.visible_at > (SELECT t FROM now)),
    (SELECT min(o.visible_at) FROM durability.queue AS o
     WHERE o.queue = %(queue)s AND (o.priority <> 0 OR o.limit_key IS NOT NULL)
       AND o.visible_at > (SELECT t FROM now)))

-- name: hiding
-- The part every take ends its WITH list with: when fewer than %(n)s rows were taken, when
-- to look again. The earliest hidden row (a sleeper, or a lease that may lapse: `soonest`),
-- the earliest hold to lapse or leave the window under a key whose ready rows were passed
-- over, or now if a row picked was not admitted (another taker's admission
-- came first: look again at once).
hidden AS (
    SELECT least(
-- include: scheduler.sql soonest
        ,
        (SELECT to_timestamp(min((h.value ->> 1)::bigint) / 1000000.0)
         FROM durability.limits AS l CROSS JOIN LATERAL jsonb_each(l.held) AS h
         WHERE l.queue = %(queue)s
           AND l.key IN (SELECT o.limit_key FROM durability.queue AS o
                         WHERE o.queue = %(queue)s AND o.limit_key IS NOT NULL
                           AND o.visible_at <= (SELECT t FROM now))
           AND (h.value ->> 1)::bigint > (SELECT us FROM now)),
        CASE WHEN (SELECT count(*) FROM picked) > (SELECT count(*) FROM chosen)
             THEN (SELECT t FROM now) END
    ) AS at
    WHERE (SELECT count(*) FROM taken) < %(n)s
),
-- include: scheduler.sql plain

-- name: take
-- Take the best ready row (see `taking`), hiding it for one lease under a new receipt. Also
-- report how long until the earliest row still hidden becomes visible (`hiding`), so an idle
-- worker knows when to look.
--
-- The receipt is the database clock in microseconds, or one more than the row's receipt if
-- that is ahead, NOT a sequence step, so this commit need not wait for the WAL flush (see
-- the module docstring): a take lost in a crash handed out a receipt no later take of the row
-- can repeat, because the clock has moved on by the restart. Receipts the synchronous writers
-- (make_ready, wake_at) mint from the sequence are far below any clock value, so the two
-- kinds never meet.
-- include: scheduler.sql taking
-- include: scheduler.sql hiding
SELECT taken.workflow,
       taken.receipt,
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       taken.lapsed,
       taken.priority, taken.limit_key, taken.limit_at_most, taken.limit_per,
       (SELECT yes FROM plain)
FROM now LEFT JOIN hidden ON true LEFT JOIN taken ON true

-- name: take_plain
-- `take` on the common path (no wakeup in the queue has a priority or a limit: `plain`),
-- without the level walk and the limits: the statement main ran before either existed, so
-- a queue that uses neither pays for neither. The answer is `take`'s, the flag last; when the
-- flag says the queue is not plain, nothing was taken and the caller sends `take` at once.
-- A row taken here has priority 0 and no limit (rechecked under its lock): its policy
-- columns are NULL, which the caller reads as those.
-- include: scheduler.sql taking_plain
-- include: scheduler.sql hiding_plain
SELECT taken.workflow,
       taken.receipt,
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       taken.lapsed,
       NULL::smallint, NULL::text, NULL::integer, NULL::float8,
       (SELECT yes FROM plain)
FROM now CROSS JOIN hidden LEFT JOIN taken ON true

-- name: done
-- Compare-and-delete: a wakeup that landed mid-pass changed the receipt, and survives.
-- Committed without waiting for the WAL flush: a lost done is one extra pass.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM durability.queue
USING quick
WHERE queue = %(queue)s AND workflow = %(workflow)s AND receipt = %(receipt)s

-- name: emptying
-- The holds a statement gives back, from `holding` (each key's row locked, in key order, its
-- newest version: `rest` its holds without those given back, `lives` whether any of `rest` is
-- live): a row still holding a live hold keeps `rest`; one that holds nothing more is deleted,
-- so a key keeps no row once nothing holds it. The row is locked first, and both writes
-- reach its newest version, so an admission that came in between is counted (its hold lives:
-- the row stays); an admission that waited for the delete inserts the row anew (READ
-- COMMITTED retries an upsert whose conflicting row was deleted). `freed`: one row per key.
kept AS (
    UPDATE durability.limits AS l SET held = h.rest
    FROM holding AS h
    WHERE l.queue = %(queue)s AND l.key = h.key AND h.lives
    RETURNING 1
),
emptied AS (
    DELETE FROM durability.limits AS l
    USING holding AS h
    WHERE l.queue = %(queue)s AND l.key = h.key AND NOT h.lives
    RETURNING 1
),
freed AS (SELECT 1 FROM kept UNION ALL SELECT 1 FROM emptied),

-- name: freeing
-- The hold of one delivery under a concurrency limit (%(held_key)s, NULL for any other) given
-- back: its key's limits row locked (its newest version) after the CTE named `first` (the
-- statement's write to the queue row: queue row, then limits row, the order a take locks them
-- in), then `emptying`. CTEs for a WITH list, ending with `freed` and a comma.
holding AS MATERIALIZED (
    SELECT l.key, l.held - %(hold)s::text AS rest,
           EXISTS (SELECT FROM jsonb_each(l.held - %(hold)s::text) AS h
                   WHERE (h.value ->> 1)::bigint
                         > floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
               AS lives
    FROM durability.limits AS l, (SELECT count(*) FROM first) AS after_first
    WHERE l.queue = %(queue)s AND l.key = %(held_key)s::text AND l.held ? %(hold)s::text
    FOR UPDATE OF l
),
-- include: scheduler.sql emptying

-- name: done_limited
-- done, for a delivery under a concurrency limit: its hold goes with it (by the take's
-- receipt, so a later take's hold of the same workflow stays), and waiting readers are told,
-- as an arrival tells them, so a wakeup passed over for that limit is taken now. The hold is
-- freed even when the row stays (a wakeup landed mid-pass): the pass is over either way.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
first AS (
    DELETE FROM durability.queue
    USING quick
    WHERE queue = %(queue)s AND workflow = %(workflow)s AND receipt = %(receipt)s
    RETURNING 1
),
-- include: scheduler.sql freeing
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM (SELECT FROM freed LIMIT 1) AS f)
SELECT (SELECT count(*) FROM first), (SELECT count(*) FROM told)

-- name: wake_at
-- Still ours (receipt unchanged): the row becomes a sleeper at `when`, under a new receipt so
-- the done() that follows leaves it, keeping its priority and limit (the delivery's: a
-- workflow that sleeps comes back as it went). Not ours (a wakeup landed mid-pass, or the
-- lease lapsed and someone else took it): keep whichever visibility is sooner, and merge the
-- delivery's priority and limit into the row's as make_ready does. No row: the workflow was
-- cancelled meanwhile, and nothing is scheduled. Listeners are told either way, so an idle
-- worker learns of a sleeper due sooner than the one it was waiting for (and of a hold freed).
WITH first AS (
    UPDATE durability.queue AS q
    SET visible_at = CASE WHEN q.receipt = %(receipt)s THEN %(when)s
                          ELSE least(q.visible_at, %(when)s) END,
        receipt = CASE WHEN q.receipt = %(receipt)s THEN nextval('durability.receipts')
                       ELSE q.receipt END,
        priority = CASE WHEN q.receipt = %(receipt)s THEN q.priority
                        ELSE greatest(q.priority, %(priority)s::smallint) END,
        limit_key = CASE WHEN q.receipt = %(receipt)s OR q.limit_key IS NOT NULL
                         THEN q.limit_key ELSE %(limit_key)s::text END,
        limit_at_most = CASE WHEN q.receipt = %(receipt)s OR q.limit_key IS NOT NULL
                             THEN q.limit_at_most ELSE %(limit_at_most)s::integer END,
        limit_per = CASE WHEN q.receipt = %(receipt)s OR q.limit_key IS NOT NULL
                         THEN q.limit_per ELSE %(limit_per)s::interval END
    WHERE q.queue = %(queue)s AND q.workflow = %(workflow)s
    RETURNING 1
),
-- include: scheduler.sql freeing
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM first)
SELECT count(*) FROM told WHERE (SELECT count(*) FROM freed) >= 0

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

-- name: extend_limited
-- extend, for a delivery under a concurrency limit: its hold lasts as long as its lease. The
-- hold is found by the take's receipt whether or not the row still holds it (a wakeup that
-- landed mid-pass moved the row on, but the pass runs on and keeps its slot). Queue row,
-- then limits row: the order a take locks them in.
WITH now AS (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
moved AS (
    UPDATE durability.queue AS q
    SET visible_at = greatest(q.visible_at, now.t + %(within)s)
    FROM now, quick
    WHERE q.queue = %(queue)s AND q.workflow = %(workflow)s AND q.receipt = %(receipt)s
    RETURNING 1
),
kept AS (
    UPDATE durability.limits AS l
    SET held = jsonb_set(l.held, ARRAY[%(hold)s::text], jsonb_build_array(
        %(workflow)s::text,
        greatest((l.held -> %(hold)s::text ->> 1)::bigint,
                 floor(extract(epoch FROM now.t + %(within)s) * 1000000)::bigint)))
    FROM now, (SELECT count(*) FROM moved) AS after_moved
    WHERE l.queue = %(queue)s AND l.key = %(held_key)s::text AND l.held ? %(hold)s::text
    RETURNING 1
)
SELECT 1 FROM moved WHERE (SELECT count(*) FROM kept) >= 0

-- name: releasing
-- The part a cancel shares (`cancel` here, `delete` in durable.sql): the concurrency slots
-- the workflow holds freed, since its pass can no longer answer for them (its writes are
-- fenced), and the readers waiting for a slot told, as of an arrival. Found by workflow in
-- every concurrency key's row of the queue, not by the queue row's limit (a wakeup that landed
-- mid-pass may have changed it); a rate's holds stay out their window. Two CTEs for a WITH
-- list, after the CTE named `dequeued` (queue row, then limits row: the order a take locks
-- them in); the statement reads `told`.
freed AS (
    UPDATE durability.limits AS l
    SET held = (SELECT coalesce(jsonb_object_agg(h.key, h.value), '{}')
                FROM jsonb_each(l.held) AS h WHERE h.value ->> 0 <> %(workflow)s::text)
    FROM (SELECT count(*) FROM dequeued) AS after_dequeued
    -- The holders' array is schema.sql's limits_by_holder: the rows holding one come from it.
    -- The queue is compared in "C" (equal exactly when equal in the column's collation) so
    -- no plan reads the primary key's range of the queue, every key's row, instead.
    WHERE jsonb_path_query_array(l.held, '$.*[0]') @> jsonb_build_array(%(workflow)s::text)
      AND l.queue COLLATE "C" = %(queue)s AND l.per IS NULL
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM (SELECT FROM freed LIMIT 1) AS f)

-- name: cancel
-- The queue row goes, and the slots its workflow held with it (`releasing`).
WITH dequeued AS (
    DELETE FROM durability.queue WHERE queue = %(queue)s AND workflow = %(workflow)s
    RETURNING 1
),
-- include: scheduler.sql releasing
SELECT (SELECT count(*) FROM dequeued), (SELECT count(*) FROM told)

-- name: earliest
-- The earliest hidden row (`soonest`: two index probes, not one per priority level).
WITH now AS (SELECT clock_timestamp() AS t)
SELECT
-- include: scheduler.sql soonest

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
-- The visible rows (ready, not taken) and how long ago the earliest became visible: level 0's
-- ready range of queue_by_priority, and queue_with_policy's, whose rows of level 0 (limited
-- ones) the first range counted already. Two ranges whatever the priorities present.
WITH now AS (SELECT clock_timestamp() AS t),
common AS (
    SELECT count(*) AS n, min(o.visible_at) AS earliest FROM durability.queue AS o
    WHERE o.queue = %(queue)s AND o.priority = 0 AND o.visible_at <= (SELECT t FROM now)
),
ranked AS (
    SELECT count(*) FILTER (WHERE o.priority <> 0) AS n, min(o.visible_at) AS earliest
    FROM durability.queue AS o
    WHERE o.queue = %(queue)s AND (o.priority <> 0 OR o.limit_key IS NOT NULL)
      AND o.visible_at <= (SELECT t FROM now)
)
SELECT common.n + ranked.n,
       extract(epoch FROM now.t - least(common.earliest, ranked.earliest))
FROM now, common, ranked
