-- The moves that cross both halves, each ONE statement, so one implicit transaction: there is
-- no moment at which a value is recorded but nothing is queued to read it, or a workflow's
-- wakeups are gone but its records remain. The pieces are the checkpointer's and scheduler's
-- own statements (checkpointer.sql, scheduler.sql) joined as data-modifying CTEs; keep them in
-- step. As there, pg_notify is sent only if, and when, the whole statement commits.

-- name: arrive
-- supply, then make_ready (whether or not the supply won: the caller asked for a pass), with
-- the wakeup's priority and limit merged as scheduler.sql's make_ready merges them.
WITH written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    VALUES (%(workflow)s, %(key)s, %(value)s, clock_timestamp())
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
),
ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt,
                                       priority, limit_key, limit_at_most, limit_per)
    SELECT %(queue)s, %(workflow)s, clock_timestamp(), nextval('durability.receipts'),
-- include: scheduler.sql policy
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt,
-- include: scheduler.sql merging
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT (SELECT value FROM written),
       (SELECT value FROM durability.records WHERE workflow = %(workflow)s AND key = %(key)s),
       (SELECT count(*) FROM told)

-- name: deliver
-- append, then make_ready.
-- The queue row is locked before the claim row (counted reads from ready, so ready runs
-- first): the order `take` locks them in, so the two cannot deadlock.
WITH ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt,
                                       priority, limit_key, limit_at_most, limit_per)
    SELECT %(queue)s, %(workflow)s, clock_timestamp(), nextval('durability.receipts'),
-- include: scheduler.sql policy
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt,
-- include: scheduler.sql merging
    RETURNING 1
),
counted AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline, appended)
    SELECT %(workflow)s, 0, '-infinity', '-infinity', 1
    FROM (SELECT count(*) FROM ready) AS queued
    ON CONFLICT (workflow) DO UPDATE SET appended = c.appended + 1
    RETURNING appended
),
written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT %(workflow)s, %(prefix)s || lpad(counted.appended::text, %(width)s, '0'),
           %(value)s, clock_timestamp()
    FROM counted
    RETURNING key
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT (SELECT key FROM written), (SELECT count(*) FROM told)

-- name: delete
-- cancel, then discard: the queue row goes with the slots its workflow held (`releasing`), the
-- records go, the fence rises. The queue row is locked before the limits and claim rows
-- (freed and fenced read from dequeued), the order `take` locks them in.
WITH now AS (SELECT clock_timestamp() AS t),
dequeued AS (
    DELETE FROM durability.queue WHERE queue = %(queue)s AND workflow = %(workflow)s
    RETURNING 1
),
-- include: scheduler.sql releasing
,
gone AS (
    DELETE FROM durability.records WHERE workflow = %(workflow)s RETURNING 1
),
unstood AS (
    DELETE FROM durability.standings WHERE workflow = %(workflow)s RETURNING ending_key
),
fenced AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline)
    SELECT %(workflow)s, floor(extract(epoch FROM now.t) * 1000)::bigint,
           '-infinity', '-infinity'
    FROM now, (SELECT count(*) FROM dequeued) AS d
    ON CONFLICT (workflow) DO UPDATE
        SET token = greatest(EXCLUDED.token, c.token + 1),
            until = '-infinity',
            deadline = '-infinity'
    RETURNING 1
)
-- The records forgotten count the ending the standing kept (checkpointer.sql's `load`).
SELECT (SELECT count(*) FROM gone) + (SELECT count(ending_key) FROM unstood),
       (SELECT count(*) FROM dequeued),
       (SELECT count(*) FROM fenced), (SELECT count(*) FROM unstood), (SELECT count(*) FROM told)

-- name: giving_back
-- The part a limited pass's ending shares (finish_limited, finish_settled_limited): the hold
-- of a delivery under a concurrency limit given back (scheduler.sql's `freeing`: its key's row
-- deleted if that was its last live hold) after the done (`first`) and before the release
-- (which reads from `freed`), and the readers waiting for the slot told. Locks: queue row,
-- limits row, claim row, the order a take locks them in. CTEs for a WITH list.
-- include: scheduler.sql freeing
told_freed AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM (SELECT FROM freed LIMIT 1) AS f),

-- name: giving_nothing
-- `giving_back` for a pass that holds no slot (the common path: no limits row is touched, no
-- statement to plan for one).
freed AS (SELECT WHERE false),
told_freed AS (SELECT WHERE false),

-- name: finishing
-- The part every finish of one pass begins with: the commit setting (committed without waiting
-- for the WAL flush: a finish lost in a server crash leaves a claim that lapses and a queue
-- row that becomes visible again, i.e. one extra, harmless pass) and the done (`first`):
-- compare-and-delete the queue row on the receipt (a wakeup that landed mid-pass changed it,
-- and survives). Ends inside the WITH list.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
first AS (
    DELETE FROM durability.queue
    WHERE queue = %(queue)s AND workflow = %(workflow)s AND receipt = %(receipt)s
    RETURNING 1
),

-- name: releasing_claim
-- The release that follows `first` and `freed`: free the claim if it is still this pass's
-- (token). The queue row is locked before the claim row (released reads from `first`, so the
-- done runs first): the order `take` locks them in, so the two cannot deadlock.
released AS (
    UPDATE durability.claims SET until = '-infinity'
    FROM quick, (SELECT count(*) FROM first) AS answered, (SELECT count(*) FROM freed) AS given
    WHERE workflow = %(workflow)s AND token = %(token)s
    RETURNING 1
)

-- name: finish
-- release, then done, as one statement, so nobody can see the delivery gone and the claim
-- still held (`finishing`, `releasing_claim`), for a pass that holds no slot.
-- include: durable.sql finishing
-- include: durable.sql giving_nothing
-- include: durable.sql releasing_claim
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM first), (SELECT count(*) FROM quick),
       (SELECT count(*) FROM told_freed)

-- name: finish_limited
-- `finish` for a pass under a concurrency limit: its slot given back too (`giving_back`).
-- include: durable.sql finishing
-- include: durable.sql giving_back
-- include: durable.sql releasing_claim
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM first), (SELECT count(*) FROM quick),
       (SELECT count(*) FROM told_freed)

-- name: settling
-- The part finish_settled (both forms) ends with, after `releasing_claim`: the pass's standing
-- written in the same statement (checkpointer.sql's settle), so a pass ends in one round trip
-- and no one sees the claim released and the standing old. The standing is written only if the
-- release found the claim still this pass's token (the release's UPDATE locks the claim row and
-- reads its newest version, as settle's FOR SHARE does), so a newer claim or a discard leaves
-- it untouched. Locks: queue row, claim row (as finish), then the standing, which reads from
-- the release. A standing lost in a crash (the commit does not wait for the flush) is lost
-- with the done, so the queue row shows again and the pass that comes writes it.
,
-- The workflow's ending, when the pass brings one (its body returned, or failed for good), is
-- written only under the pass's token (after the release, whose row lock a cancel's conclude
-- takes first too), first writer wins, and its waiters, if any wait (`watchers` in
-- schema.sql), are told on commit. It goes in the standing's own row (`ending_*`, one row
-- written, not two) unless that row holds an ending already (the first epoch's, when this one
-- follows a retry): then into `records`, as every ending went before (`ended`). Not looked
-- for in `records` first (a probe a pass, for the ending an older version could have written
-- there while this pass ran, which its claim rules out): should both hold one, the record is
-- read (checkpointer.sql's `load`).
stood AS (
    INSERT INTO durability.standings AS s (workflow, state, detail, at,
                                           ending_key, ending, ending_seq, ending_at)
    SELECT %(workflow)s, %(state)s, %(detail)s, clock_timestamp(),
           %(ending_key)s::text, %(ending_value)s::text,
           CASE WHEN %(ending_key)s::text IS NOT NULL
                THEN nextval('durability.records_seq_seq') END,
           CASE WHEN %(ending_key)s::text IS NOT NULL THEN clock_timestamp() END
    FROM released
    ON CONFLICT (workflow) DO UPDATE
        SET state = EXCLUDED.state, detail = EXCLUDED.detail, at = EXCLUDED.at,
-- include: checkpointer.sql placing
    RETURNING s.ending_key
),
ended AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT %(workflow)s, %(ending_key)s::text, %(ending_value)s::text, clock_timestamp()
    FROM stood
    WHERE %(ending_key)s::text IS NOT NULL
      AND stood.ending_key IS DISTINCT FROM %(ending_key)s::text
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING workflow
),
told AS (
    SELECT pg_notify(%(ended_channel)s, %(workflow)s)
    FROM (SELECT FROM stood WHERE stood.ending_key = %(ending_key)s::text
          UNION ALL SELECT FROM ended) AS e
    WHERE (SELECT durability.watched(count(*)) FROM stood)  -- only while someone waits
)
SELECT (SELECT count(*) FROM stood), (SELECT count(*) FROM first), (SELECT count(*) FROM quick),
       (SELECT count(*) FROM told), (SELECT count(*) FROM told_freed)

-- name: finish_settled
-- finish, with the pass's standing (`settling`), for a pass that holds no slot.
-- include: durable.sql finishing
-- include: durable.sql giving_nothing
-- include: durable.sql releasing_claim
-- include: durable.sql settling

-- name: finish_settled_limited
-- `finish_settled` for a pass under a concurrency limit: its slot given back too.
-- include: durable.sql finishing
-- include: durable.sql giving_back
-- include: durable.sql releasing_claim
-- include: durable.sql settling

-- name: claiming
-- The part both takes (take, take_many) share after their `taken` CTE: lock the taken
-- workflows' claim rows in workflow order (`latest`, which follows each row to its newest
-- version), then claim each as checkpointer.sql's claim does (token max(now_ms, previous + 1),
-- only if no live claim). Not a statement of its own; it ends inside the WITH list.
latest AS MATERIALIZED (
    SELECT c.workflow, c.xmin::text AS version FROM durability.claims AS c
    WHERE c.workflow = ANY (ARRAY(SELECT workflow FROM taken))  -- by the primary key
    ORDER BY c.workflow
    FOR UPDATE
),
claimed AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline)
    SELECT taken.workflow,
           floor(extract(epoch FROM now.t) * 1000)::bigint,
           least(now.t + %(alive)s, now.t + %(budget)s),
           now.t + %(budget)s
    FROM taken, now, (SELECT count(*) FROM latest) AS l
    ORDER BY taken.workflow
    ON CONFLICT (workflow) DO UPDATE
        SET token = greatest(EXCLUDED.token, c.token + 1),
            until = EXCLUDED.until,
            deadline = EXCLUDED.deadline
        WHERE NOT (c.until > (SELECT t FROM now) AND c.deadline > (SELECT t FROM now))
    RETURNING c.workflow, c.token, c.deadline, xmax::text = '0' AS inserted
),

-- name: found
-- The checkpoint a take hands back with each claim (an expression, not a statement): the
-- records from the statement's snapshot if that snapshot saw the claim row's newest version
-- (or the row is new), else NULL, and the pass loads them. The ending kept in the standing
-- (checkpointer.sql's `load`) is one of them, in its place.
CASE WHEN claimed.inserted
       OR (SELECT version FROM latest WHERE latest.workflow = claimed.workflow)
          = (SELECT c.xmin::text FROM durability.claims AS c WHERE c.workflow = claimed.workflow)
     THEN coalesce(
         (SELECT json_agg(json_build_array(e.key, e.value) ORDER BY e.seq)
          FROM (SELECT r.key, r.value, r.seq FROM durability.records AS r
                WHERE r.workflow = claimed.workflow
                UNION ALL
                SELECT s.ending_key, s.ending, s.ending_seq FROM durability.standings AS s
                WHERE s.workflow = claimed.workflow AND s.ending_key IS NOT NULL
-- include: checkpointer.sql unrecorded
                ) AS e),
         '[]'::json)
END

-- name: take
-- next_ready, then claim, as ONE statement: take the best ready row (as scheduler.sql's take
-- does: by priority, then visibility, within limits, SKIP LOCKED, hidden for one lease under a
-- new receipt; %(n)s is 1) and claim its workflow
-- (as checkpointer.sql's claim does: token max(now_ms, previous + 1), only if no live claim),
-- handing back the checkpoint found. With nothing visible it reports, like the scheduler's
-- take, when the earliest hidden row becomes visible, so the idle wait is the same.
--
-- Locks: the queue row, the limits row of its key (if it names a limit), then the claim row.
-- Every other statement that locks two of them (deliver, delete, finish) takes them in that
-- same order, so none of them can deadlock with this one.
--
-- The snapshot caveat is claim's: the records are read from the statement's snapshot, the
-- claim row's newest version is locked (`latest`), and the records are handed back only if
-- that version is the one the snapshot saw (or the claim row is new); otherwise NULL, and the
-- pass loads.
--
-- The `taken` CTE is the scheduler's take, included from scheduler.sql (`taking`).
-- Committed without waiting for the WAL flush, like the scheduler's take (the receipt is the
-- clock, not a sequence step: see there) and the claim (see checkpointer.sql): a take lost in
-- a crash is a row that shows again and a claim whose token no later claim repeats.
-- include: scheduler.sql taking
-- include: durable.sql claiming
-- include: scheduler.sql hiding
SELECT taken.workflow,
       taken.receipt,
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       claimed.token,
       claimed.deadline,
       taken.lapsed,
       taken.priority, taken.limit_key, taken.limit_at_most, taken.limit_per,
-- include: durable.sql found
       ,
       (SELECT yes FROM plain)
FROM now
LEFT JOIN hidden ON true
LEFT JOIN taken ON true
LEFT JOIN claimed ON true

-- name: take_plain
-- `take` on the common path (no wakeup in the queue has a priority or a limit), as
-- scheduler.sql's `take_plain` takes: main's statement from before priorities and limits,
-- the same answer as `take`'s with the flag last. When the flag says the queue is not plain,
-- nothing was taken or claimed, and the caller sends `take` at once.
-- include: scheduler.sql taking_plain
-- include: durable.sql claiming
-- include: scheduler.sql hiding_plain
SELECT taken.workflow,
       taken.receipt,
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       claimed.token,
       claimed.deadline,
       taken.lapsed,
       NULL::smallint, NULL::text, NULL::integer, NULL::float8,
-- include: durable.sql found
       ,
       (SELECT yes FROM plain)
FROM now CROSS JOIN hidden
LEFT JOIN taken ON true
LEFT JOIN claimed ON true

-- name: take_many
-- `take` for up to %(n)s workflows at once: the several readers of a busy worker that ask in
-- the same turn share one statement (PostgresDurable gathers them). Each row is taken, hidden
-- and claimed exactly as `take` does it; the answer is ONE row of arrays, in workflow order
-- (the order the claim rows are locked in), and, when fewer than n were taken, when the
-- earliest hidden row becomes visible. Locks: queue rows, limits rows in key order, then
-- claim rows in workflow order. A limit key admits as many of its wakeups as it has room
-- for (scheduler.sql's `admitted`); the others stay ready for the next read.
-- include: scheduler.sql taking
-- include: durable.sql claiming
-- include: scheduler.sql hiding
,
answered AS (
    SELECT taken.workflow,
           taken.receipt,
           claimed.token,
           claimed.deadline,
           taken.lapsed,
           taken.priority, taken.limit_key, taken.limit_at_most, taken.limit_per,
-- include: durable.sql found
           AS found
    FROM taken LEFT JOIN claimed ON claimed.workflow = taken.workflow
)
SELECT (SELECT array_agg(workflow ORDER BY workflow) FROM answered),
       (SELECT array_agg(receipt ORDER BY workflow) FROM answered),
       (SELECT array_agg(token ORDER BY workflow) FROM answered),
       (SELECT array_agg(deadline ORDER BY workflow) FROM answered),
       (SELECT array_agg(found ORDER BY workflow) FROM answered),
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       (SELECT array_agg(lapsed ORDER BY workflow) FROM answered),
       (SELECT array_agg(priority ORDER BY workflow) FROM answered),
       (SELECT array_agg(limit_key ORDER BY workflow) FROM answered),
       (SELECT array_agg(limit_at_most ORDER BY workflow) FROM answered),
       (SELECT array_agg(limit_per ORDER BY workflow) FROM answered),
       (SELECT yes FROM plain)
FROM now LEFT JOIN hidden ON true

-- name: take_many_plain
-- `take_many` on the common path: main's statement from before priorities and limits (up to
-- %(n)s rows of level 0 in visibility order, SKIP LOCKED, hidden as the full take hides them:
-- scheduler.sql's `taken`), only while `plain` holds, as scheduler.sql's `taking_plain`; the
-- answer is `take_many`'s with the flag last, its four policy columns NULL (every row taken
-- here has priority 0 and no limit, rechecked under its lock: no arrays to build and sort).
WITH
-- include: scheduler.sql clock
-- include: scheduler.sql plain
,
chosen AS MATERIALIZED (
    -- Locked here, then found again by where they lie (`taken`): a plan free to choose would
    -- look them up as `queue = $1 AND workflow = ANY (...)`, and a queue whose statistics
    -- predate a burst (or a table never analyzed) gets a scan of every row of the queue, for
    -- each take.
    SELECT ctid, tableoid, workflow, receipt FROM durability.queue
    WHERE queue = %(queue)s AND priority = 0 AND visible_at <= (SELECT t FROM now)
      AND limit_key IS NULL AND (SELECT yes FROM plain)
    ORDER BY visible_at
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
),
-- include: scheduler.sql taken
-- include: durable.sql claiming
-- include: scheduler.sql hiding_plain
,
answered AS (
    SELECT taken.workflow,
           taken.receipt,
           claimed.token,
           claimed.deadline,
           taken.lapsed,
-- include: durable.sql found
           AS found
    FROM taken LEFT JOIN claimed ON claimed.workflow = taken.workflow
)
SELECT (SELECT array_agg(workflow ORDER BY workflow) FROM answered),
       (SELECT array_agg(receipt ORDER BY workflow) FROM answered),
       (SELECT array_agg(token ORDER BY workflow) FROM answered),
       (SELECT array_agg(deadline ORDER BY workflow) FROM answered),
       (SELECT array_agg(found ORDER BY workflow) FROM answered),
       hidden.at,
       extract(epoch FROM hidden.at - now.t)::float8,
       (SELECT array_agg(lapsed ORDER BY workflow) FROM answered),
       -- Every row taken here has priority 0 and no limit: no arrays (`plainly` in durable.py)
       NULL::smallint[], NULL::text[], NULL::integer[], NULL::float8[],
       (SELECT yes FROM plain)
FROM now CROSS JOIN hidden

-- name: finishing_many
-- The part every `finish_many` begins with: the commit setting, the finishes asked, and the
-- queue rows deleted (`done`). Ends inside the WITH list.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
asked AS MATERIALIZED (
    -- From one JSON parameter, not unnest of arrays: the planner sizes unnest by the array it
    -- is given, so every call would be planned afresh (about 1 ms); a JSON set it sizes the
    -- same whatever it holds, so the prepared statement keeps one generic plan.
    SELECT * FROM jsonb_to_recordset(%(asked)s::jsonb)
        AS a(workflow text, token bigint, receipt bigint, state text, detail text,
             ending_key text, ending_value text, held_key text, hold text)
),
placed AS MATERIALIZED (
    -- Where each asked row's queue row lies, if it holds the receipt: one probe of the primary
    -- key per row (both its columns equal), as a scalar subquery, which the planner never turns
    -- into a join. Asked as a join, or as `workflow = ANY (...)`, a plan is free to read every
    -- row of the queue instead when the table's statistics are stale (see take_many).
    SELECT (SELECT ctid FROM durability.queue AS o
            WHERE o.queue = %(queue)s AND o.workflow = a.workflow AND o.receipt = a.receipt)
           AS ctid
    FROM asked AS a
),
done AS (
    -- A row changed since `placed` looked lies elsewhere now, and is left: rightly, when a
    -- wakeup changed its receipt; when only an extend moved its lease, it shows again at the
    -- lease's end for one extra, harmless pass.
    DELETE FROM durability.queue AS q
    WHERE q.ctid = ANY (ARRAY(SELECT ctid FROM placed))
      -- An asked row, not one at the same place in another partition of a partitioned
      -- queue (a ctid names a row within one table: see scheduler.sql's `taken`); in an
      -- unpartitioned queue the ctid alone is exact, and the first arm spares the look.
      AND (q.tableoid = 'durability.queue'::regclass
           OR (SELECT count(*) FROM asked AS a
               WHERE a.workflow = q.workflow AND a.receipt = q.receipt
                 AND q.queue = %(queue)s) > 0)
      AND (SELECT count(*) FROM quick) = 1
    RETURNING 1
),

-- name: holding_many
-- The part of `finish_many` that gives its passes' concurrency slots back, after `done`.
holding AS MATERIALIZED (
    -- The limits rows this turn gives holds back to, as scheduler.sql's `freeing` holds one:
    -- each key's row once, with all the holds the turn gives back to it (an UPDATE changes a
    -- row once per statement), locked in key order after the deletes; then `emptying` (a row
    -- left with no live hold deleted), and one notification.
    SELECT k.key, k.held - g.holds AS rest,
           EXISTS (SELECT FROM jsonb_each(k.held - g.holds) AS h
                   WHERE (h.value ->> 1)::bigint
                         > floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
               AS lives
    FROM durability.limits AS k
    JOIN (SELECT a.held_key, array_agg(a.hold) AS holds
          FROM asked AS a WHERE a.held_key IS NOT NULL GROUP BY a.held_key) AS g
      ON g.held_key = k.key
    WHERE k.queue = %(queue)s AND k.key = ANY (ARRAY(SELECT held_key FROM asked))
      AND k.held ?| g.holds
      AND (SELECT count(*) FROM done) >= 0
    ORDER BY k.key
    FOR UPDATE OF k
),
-- include: scheduler.sql emptying
told_freed AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM (SELECT FROM freed LIMIT 1) AS f),

-- name: released_many
-- The part of `finish_many` after the slots (`freed`): the claims released, the standings and
-- endings written, the ending's waiters told (if any wait: `watchers` in schema.sql). The
-- answer is one row.
released AS (
    UPDATE durability.claims AS c SET until = '-infinity'
    FROM asked AS a, (SELECT count(*) FROM freed) AS given
    WHERE c.workflow = ANY (ARRAY(SELECT workflow FROM asked))  -- by the primary key
      AND c.workflow = a.workflow AND c.token = a.token
      AND (SELECT count(*) FROM done) >= 0  -- after the deletes, as in finish_settled
    RETURNING c.workflow
),
stood AS (
    -- Each pass's standing, and its ending if it brings one, as finish_settled writes them.
    INSERT INTO durability.standings AS s (workflow, state, detail, at,
                                           ending_key, ending, ending_seq, ending_at)
    SELECT a.workflow, a.state, a.detail, clock_timestamp(), a.ending_key, a.ending_value,
           CASE WHEN a.ending_key IS NOT NULL THEN nextval('durability.records_seq_seq') END,
           CASE WHEN a.ending_key IS NOT NULL THEN clock_timestamp() END
    FROM asked AS a JOIN released AS r ON r.workflow = a.workflow
    ORDER BY a.workflow
    ON CONFLICT (workflow) DO UPDATE
        SET state = EXCLUDED.state, detail = EXCLUDED.detail, at = EXCLUDED.at,
-- include: checkpointer.sql placing
    RETURNING s.workflow, s.ending_key
),
ended AS (
    -- An ending the standing's row could not take, as finish_settled writes it.
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT a.workflow, a.ending_key, a.ending_value, clock_timestamp()
    FROM asked AS a JOIN stood AS t ON t.workflow = a.workflow
    WHERE a.ending_key IS NOT NULL AND t.ending_key IS DISTINCT FROM a.ending_key
    ORDER BY a.workflow
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING workflow
),
told AS (
    -- Rung for every standing that holds an ending (not only those written now: a join with
    -- `asked` to tell them apart costs more than the rare extra ring, which a waiter answers
    -- with one look).
    SELECT pg_notify(%(ended_channel)s, e.workflow)
    FROM (SELECT t.workflow FROM stood AS t WHERE t.ending_key IS NOT NULL
          UNION ALL SELECT workflow FROM ended) AS e
    WHERE (SELECT durability.watched(count(*)) FROM stood)  -- only while someone waits
)
SELECT (SELECT coalesce(array_agg(workflow), '{}') FROM stood), (SELECT count(*) FROM told),
       (SELECT count(*) FROM told_freed)

-- name: finish_many
-- `finish_settled` for several passes at once: the finishes a busy worker's passes ask for in
-- the same turn share one statement (PostgresDurable gathers them), so they pay for one
-- statement and one commit between them. Each is what finish_settled does alone: its queue row
-- deleted if it still holds the receipt, its claim released if it still holds the token, and
-- its standing written only if the release happened. The rows are locked by the DELETE and the
-- UPDATE themselves, as finish_settled locks its own (an explicit FOR UPDATE would write each
-- row twice): queue rows (by where they lie, which no other finish can want: each holds its
-- own receipt), then claim rows (through their primary key with `= ANY (ids)`, which walks
-- the index in id order), then standings in workflow order. The answer is one row: the
-- workflows whose standing was written.
-- include: durable.sql finishing_many
-- include: durable.sql holding_many
-- include: durable.sql released_many

-- name: finish_many_plain
-- `finish_many` for passes none of which holds a slot (the common path: no limits row read,
-- no CTE to run for one), as `finish_settled` is for one.
-- include: durable.sql finishing_many
-- include: durable.sql giving_nothing
-- include: durable.sql released_many
