-- The moves that cross both halves, each ONE statement, so one implicit transaction: there is
-- no moment at which a value is recorded but nothing is queued to read it, or a workflow's
-- wakeups are gone but its records remain. The pieces are the checkpointer's and scheduler's
-- own statements (checkpointer.sql, scheduler.sql) joined as data-modifying CTEs; keep them in
-- step. As there, pg_notify is sent only if, and when, the whole statement commits.

-- name: arrive
-- supply, then make_ready (whether or not the supply won: the caller asked for a pass).
WITH written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    VALUES (%(workflow)s, %(key)s, %(value)s, clock_timestamp())
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
),
ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt)
    VALUES (%(queue)s, %(workflow)s, clock_timestamp(), nextval('durability.receipts'))
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT (SELECT value FROM written),
       (SELECT value FROM durability.records WHERE workflow = %(workflow)s AND key = %(key)s),
       (SELECT count(*) FROM told)

-- name: deliver
-- append, then make_ready.
WITH counted AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline, appended)
    VALUES (%(workflow)s, 0, '-infinity', '-infinity', 1)
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
ready AS (
    INSERT INTO durability.queue AS q (queue, workflow, visible_at, receipt)
    VALUES (%(queue)s, %(workflow)s, clock_timestamp(), nextval('durability.receipts'))
    ON CONFLICT (queue, workflow) DO UPDATE
        SET visible_at = least(q.visible_at, EXCLUDED.visible_at),
            receipt = EXCLUDED.receipt
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(queue)s) FROM ready)
SELECT (SELECT key FROM written), (SELECT count(*) FROM told)

-- name: delete
-- cancel, then discard: the queue row goes, the records go, the fence rises.
WITH now AS (SELECT clock_timestamp() AS t),
dequeued AS (
    DELETE FROM durability.queue WHERE queue = %(queue)s AND workflow = %(workflow)s
    RETURNING 1
),
gone AS (
    DELETE FROM durability.records WHERE workflow = %(workflow)s RETURNING 1
),
fenced AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline)
    SELECT %(workflow)s, floor(extract(epoch FROM now.t) * 1000)::bigint,
           '-infinity', '-infinity'
    FROM now
    ON CONFLICT (workflow) DO UPDATE
        SET token = greatest(EXCLUDED.token, c.token + 1),
            until = '-infinity',
            deadline = '-infinity'
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM dequeued),
       (SELECT count(*) FROM fenced)

-- name: finish
-- release, then done: free the claim if it is still this pass's (token), and compare-and-delete
-- the queue row on the receipt (a wakeup that landed mid-pass changed it, and survives). One
-- statement, so nobody can see the delivery gone and the claim still held. Committed without
-- waiting for the WAL flush: a finish lost in a server crash leaves a claim that lapses and a
-- queue row that becomes visible again, i.e. one extra, harmless pass.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
released AS (
    UPDATE durability.claims SET until = '-infinity'
    FROM quick
    WHERE workflow = %(workflow)s AND token = %(token)s
    RETURNING 1
),
done AS (
    DELETE FROM durability.queue
    WHERE queue = %(queue)s AND workflow = %(workflow)s AND receipt = %(receipt)s
    RETURNING 1
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM done), (SELECT count(*) FROM quick)
