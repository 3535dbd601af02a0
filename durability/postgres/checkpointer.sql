-- The checkpointer's statements, one per operation, each a single statement so it is one round
-- trip and one implicit transaction. Every timing reads clock_timestamp() once, in the `now`
-- CTE, so a statement sees one instant (a volatile call per row would see several) and the
-- database, not the host, is the clock every worker shares.
--
-- A claim is live while now < until AND now < deadline. Tokens are
-- max(now in ms, previous + 1): a hybrid logical clock that rises on every claim and discard.

-- name: claim
-- Take the workflow unless a live claim holds it: the upsert's WHERE is the liveness test, and
-- a live conflicting row makes it return nothing.
WITH now AS (SELECT clock_timestamp() AS t)
INSERT INTO durability.claims AS c (workflow, token, until, deadline)
SELECT %(workflow)s,
       floor(extract(epoch FROM now.t) * 1000)::bigint,
       least(now.t + %(alive)s, now.t + %(budget)s),
       now.t + %(budget)s
FROM now
ON CONFLICT (workflow) DO UPDATE
    SET token = greatest(EXCLUDED.token, c.token + 1),
        until = EXCLUDED.until,
        deadline = EXCLUDED.deadline
    WHERE NOT (c.until > (SELECT t FROM now) AND c.deadline > (SELECT t FROM now))
RETURNING token, deadline

-- name: load
SELECT key, value FROM durability.records WHERE workflow = %(workflow)s ORDER BY seq

-- name: history
SELECT key, value, at FROM durability.records WHERE workflow = %(workflow)s ORDER BY seq

-- name: record
-- Fence, renew and write in one statement. The UPDATE both checks the claim and locks its row
-- until commit, so a newer claim cannot slip in between the check and the insert; the insert
-- runs only if the UPDATE matched (FROM live). held is read from the statement's snapshot, so
-- a key committed by a concurrent writer while we waited is invisible here: the caller retries.
WITH now AS (SELECT clock_timestamp() AS t),
live AS (
    UPDATE durability.claims AS c
    SET until = greatest(c.until, least(now.t + %(alive)s, c.deadline))
    FROM now
    WHERE c.workflow = %(workflow)s AND c.token = %(token)s
      AND now.t < c.until AND now.t < c.deadline
    RETURNING c.workflow
),
written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT live.workflow, %(key)s, %(value)s, now.t FROM live, now
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
)
SELECT EXISTS (SELECT 1 FROM live),
       (SELECT value FROM written),
       (SELECT value FROM durability.records WHERE workflow = %(workflow)s AND key = %(key)s)

-- name: reserve
-- The first statement of transact: fence and renew as record does, and reserve the key with a
-- placeholder row. The primary key makes any other writer of this key wait for our commit, so
-- the effect that follows cannot race a supply of the same key; nobody outside the
-- transaction ever sees the placeholder.
WITH now AS (SELECT clock_timestamp() AS t),
live AS (
    UPDATE durability.claims AS c
    SET until = greatest(c.until, least(now.t + %(alive)s, c.deadline))
    FROM now
    WHERE c.workflow = %(workflow)s AND c.token = %(token)s
      AND now.t < c.until AND now.t < c.deadline
    RETURNING c.workflow
),
reserved AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT live.workflow, %(key)s, '', now.t FROM live, now
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM live),
       EXISTS (SELECT 1 FROM reserved),
       (SELECT value FROM durability.records WHERE workflow = %(workflow)s AND key = %(key)s)

-- name: fill
UPDATE durability.records SET value = %(value)s WHERE workflow = %(workflow)s AND key = %(key)s

-- name: supply
WITH written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    VALUES (%(workflow)s, %(key)s, %(value)s, clock_timestamp())
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
)
SELECT (SELECT value FROM written),
       (SELECT value FROM durability.records WHERE workflow = %(workflow)s AND key = %(key)s)

-- name: append
-- The sequence lives on the claim row, which outlives discard, so an inbox key is never
-- reused. The upsert locks that row, so two appends to one workflow take distinct numbers.
WITH counted AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline, appended)
    VALUES (%(workflow)s, 0, '-infinity', '-infinity', 1)
    ON CONFLICT (workflow) DO UPDATE SET appended = c.appended + 1
    RETURNING appended
)
INSERT INTO durability.records (workflow, key, value, at)
SELECT %(workflow)s, %(prefix)s || lpad(counted.appended::text, %(width)s, '0'), %(value)s,
       clock_timestamp()
FROM counted
RETURNING key

-- name: extend
WITH now AS (SELECT clock_timestamp() AS t)
UPDATE durability.claims AS c
SET deadline = greatest(c.deadline, now.t + %(budget)s),
    until = greatest(c.until, least(now.t + %(alive)s, greatest(c.deadline, now.t + %(budget)s)))
FROM now
WHERE c.workflow = %(workflow)s AND c.token = %(token)s
  AND now.t < c.until AND now.t < c.deadline
RETURNING c.deadline

-- name: renew
WITH now AS (SELECT clock_timestamp() AS t)
UPDATE durability.claims AS c
SET until = greatest(c.until, least(now.t + %(alive)s, c.deadline))
FROM now
WHERE c.workflow = %(workflow)s AND c.token = %(token)s
  AND now.t < c.until AND now.t < c.deadline
RETURNING 1

-- name: discard
-- Forget the records and raise the fence in one statement. The claim row is kept (or made), its
-- token raised and its times cleared, so a running pass is refused at its next write.
WITH now AS (SELECT clock_timestamp() AS t),
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
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM fenced)

-- name: release
UPDATE durability.claims SET until = '-infinity'
WHERE workflow = %(workflow)s AND token = %(token)s
