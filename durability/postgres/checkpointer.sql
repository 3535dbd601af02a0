-- The checkpointer's statements, one per operation, each a single statement so it is one round
-- trip and one implicit transaction. Every timing reads clock_timestamp() once, in the `now`
-- CTE, so a statement sees one instant (a volatile call per row would see several) and the
-- database, not the host, is the clock every worker shares.
--
-- A claim is live while now < until AND now < deadline. Tokens are
-- max(now in ms, previous + 1): a hybrid logical clock that rises on every claim and discard.

-- name: unrecorded
-- The condition a read of the standing's ending `s` ends with: not when `records` holds the
-- same key (an older version's ending there, which a finish did not look for: the record, the
-- first written, is read). Looked for only where a standing holds an ending.
                AND NOT EXISTS (SELECT FROM durability.records AS u
                                WHERE u.workflow = s.workflow AND u.key = s.ending_key)

-- name: checkpoint_rows
-- The workflow's checkpoint as rows `e` (key, value, at, seq) of a FROM list: its records, and
-- the ending its standing's row keeps (durable.sql's `settling`) with its number among them,
-- one of the records' sequence taken when it was written. Every read of a checkpoint reads it
-- so: claim, load, history (durable.sql's `found` reads the same for each workflow taken).
(SELECT r.key, r.value, r.at, r.seq FROM durability.records AS r
 WHERE r.workflow = %(workflow)s
 UNION ALL
 SELECT s.ending_key, s.ending, s.ending_at, s.ending_seq FROM durability.standings AS s
 WHERE s.workflow = %(workflow)s AND s.ending_key IS NOT NULL
-- include: checkpointer.sql unrecorded
) AS e

-- name: claim
-- Take the workflow unless a live claim holds it (the upsert's WHERE is the liveness test: a
-- live conflicting row makes it return nothing), and read the checkpoint in the same statement
-- so the pass starts without a `load`.
--
-- The records are read from the statement's snapshot, but the upsert works on the claim row's
-- LATEST version (read committed). A write of the previous pass that committed after our
-- snapshot (it holds the claim row's lock while it writes, and that pass can have lapsed a
-- moment later, at its deadline) would be missing from the snapshot. So the statement locks the
-- claim row first (`latest`, which follows the row to its newest version) and hands back the
-- records only if that version is the one the snapshot sees; otherwise records is NULL and the
-- pass loads them. A freshly inserted claim row had no pass before it, so its records (only
-- ever supplied from outside) are as good as a load's.
--
-- Committed without waiting for the WAL flush (`quick`, see the checkpointer module): losing
-- a claim in a server crash loses nothing a later write would not have flushed with it.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
latest AS MATERIALIZED (
    SELECT xmin::text AS version FROM durability.claims
    WHERE workflow = %(workflow)s
    FOR UPDATE
),
claimed AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline)
    SELECT %(workflow)s,
           floor(extract(epoch FROM now.t) * 1000)::bigint,
           least(now.t + %(alive)s, now.t + %(budget)s),
           now.t + %(budget)s
    FROM now, (SELECT count(*) FROM quick) AS q, (SELECT count(*) FROM latest) AS l
    ON CONFLICT (workflow) DO UPDATE
        SET token = greatest(EXCLUDED.token, c.token + 1),
            until = EXCLUDED.until,
            deadline = EXCLUDED.deadline
        WHERE NOT (c.until > (SELECT t FROM now) AND c.deadline > (SELECT t FROM now))
    RETURNING token, deadline, xmax::text = '0' AS inserted
)
SELECT claimed.token, claimed.deadline,
       CASE WHEN claimed.inserted
              OR (SELECT version FROM latest)
                 = (SELECT xmin::text FROM durability.claims WHERE workflow = %(workflow)s)
            THEN coalesce(
                (SELECT json_agg(json_build_array(e.key, e.value) ORDER BY e.seq)
                 FROM
-- include: checkpointer.sql checkpoint_rows
                 ),
                '[]'::json)
       END
FROM claimed

-- name: load
-- The records, the standing's ending in its place among them (`checkpoint_rows`).
SELECT e.key, e.value FROM
-- include: checkpointer.sql checkpoint_rows
ORDER BY e.seq

-- name: history
SELECT e.key, e.value, e.at FROM
-- include: checkpointer.sql checkpoint_rows
ORDER BY e.seq

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

-- name: record_many
-- `record` for several passes at once, each of a different workflow: the records a busy
-- worker's passes ask for in the same turn share one statement, one commit and one WAL flush
-- (PostgresCheckpointer gathers them). Each is what `record` does alone: the claim fenced and
-- renewed under its token, the key written first-writer-wins only if that claim is live, and
-- the value held read from the statement's snapshot. A lock it would wait for past
-- `lock_timeout` (set here, before any lock is asked for) fails the statement, and its records
-- are sent one by one instead: one claim row held by another transaction does not hold back
-- every pass of the turn. Claim rows are locked in workflow order (`asked` is, and the index
-- is walked in id order); the answer is one row of arrays in the order asked.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
bounded AS MATERIALIZED (SELECT set_config('lock_timeout', %(lock_wait)s, true)),
asked AS MATERIALIZED (
    -- One JSON parameter, so the prepared statement keeps one generic plan (see finish_many).
    SELECT a.workflow, a.token, a.key, a.value, a.alive_us * interval '1 microsecond' AS alive,
           a.n
    FROM json_to_recordset(%(asked)s::json)
        AS a(workflow text, token bigint, key text, value text, alive_us bigint, n int)
),
live AS (
    UPDATE durability.claims AS c
    SET until = greatest(c.until, least(now.t + a.alive, c.deadline))
    FROM now, asked AS a, (SELECT count(*) FROM bounded) AS b
    WHERE c.workflow = ANY (ARRAY(SELECT workflow FROM asked))  -- by the primary key
      AND c.workflow = a.workflow AND c.token = a.token
      AND now.t < c.until AND now.t < c.deadline
    RETURNING c.workflow
),
written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT a.workflow, a.key, a.value, now.t
    FROM asked AS a JOIN live AS l ON l.workflow = a.workflow, now
    ORDER BY a.workflow
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING workflow, value
)
SELECT array_agg(EXISTS (SELECT FROM live WHERE live.workflow = a.workflow) ORDER BY a.n),
       array_agg((SELECT value FROM written WHERE written.workflow = a.workflow) ORDER BY a.n),
       -- A probe of the primary key per row, never a join a plan could answer with a scan.
       array_agg((SELECT r.value FROM durability.records AS r
                  WHERE r.workflow = a.workflow AND r.key = a.key) ORDER BY a.n)
FROM asked AS a

-- name: reserve
-- The first statement of transact: fence and renew as record does, and reserve the key with a
-- placeholder row. The primary key makes any other writer of this key wait for our commit, so
-- the effect that follows cannot race a supply of the same key; nobody outside the
-- transaction ever sees the placeholder. The effect that follows is the application's own SQL:
-- it is planned as the server would plan it anywhere (`planning.configure` turned sequential
-- scans and JIT compiling off and generic plans on for the store's own statements; `planner`
-- puts them back for this transaction, JIT and plan caching as the server had them when the
-- connection was configured).
WITH now AS (SELECT clock_timestamp() AS t),
planner AS MATERIALIZED (
    SELECT set_config('enable_seqscan', 'on', true),
           set_config('jit', coalesce(current_setting('durability.jit', true),
                                      current_setting('jit')), true),
           set_config('plan_cache_mode',
                      coalesce(current_setting('durability.plan_cache_mode', true),
                               current_setting('plan_cache_mode')), true)
),
live AS (
    UPDATE durability.claims AS c
    SET until = greatest(c.until, least(now.t + %(alive)s, c.deadline))
    FROM now, (SELECT count(*) FROM planner) AS p
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

-- name: placing
-- The SET of a standing's upsert that places an ending (EXCLUDED's, or none) in the standing's
-- row (`load`): only while the row holds none, so the first ending placed there keeps it. Its
-- users: `conclude`, and durable.sql's finishes (`settling`, `finish_many`).
            ending_key = coalesce(s.ending_key, EXCLUDED.ending_key),
            ending = CASE WHEN s.ending_key IS NULL THEN EXCLUDED.ending ELSE s.ending END,
            ending_seq = CASE WHEN s.ending_key IS NULL THEN EXCLUDED.ending_seq
                              ELSE s.ending_seq END,
            ending_at = CASE WHEN s.ending_key IS NULL THEN EXCLUDED.ending_at
                             ELSE s.ending_at END

-- name: conclude
-- A workflow's ending from outside any pass: the claim row locked first (as a finish locks it
-- before writing its ending, so the two wait for each other rather than deadlock), the ending
-- written first-writer-wins, and only if it was, the fence raised (token up, times cleared),
-- the records kept; whoever waits for the ending told on commit.
--
-- Where a finish would write it (durable.sql's `settling`): in the standing's row if that holds
-- no ending (`placed`; the row made, standing `queued` as a workflow with records and no
-- standing reads, if there is none), else in `records` (`written`), so the unique key of the
-- one or the other decides who was first. The upsert always writes the row, even to leave it
-- as it was, so what it hands back is the row's newest version: an ending a finish placed
-- after this statement's snapshot is seen, not written over. Skipped when `records` already
-- holds this ending (an older writer's).
--
-- The snapshot caveat is claim's: every writer of an ending changes the claim row (a finish
-- releases it, a record renews it, a conclude that wins fences it), so if the row's newest
-- version, locked here, is not the one this statement's snapshot saw, an ending may have been
-- written that the snapshot misses: then nothing is written, the last column says so, and the
-- caller sends the statement again.
WITH now AS (SELECT clock_timestamp() AS t),
locked AS MATERIALIZED (
    SELECT xmin::text AS version FROM durability.claims WHERE workflow = %(workflow)s FOR UPDATE
),
seen AS MATERIALIZED (
    SELECT (SELECT version FROM locked) IS NOT DISTINCT FROM
           (SELECT xmin::text FROM durability.claims WHERE workflow = %(workflow)s) AS yes
),
minted AS MATERIALIZED (
    SELECT nextval('durability.records_seq_seq') AS seq FROM seen WHERE seen.yes
),
placed AS (
    INSERT INTO durability.standings AS s (workflow, state, detail, at,
                                           ending_key, ending, ending_seq, ending_at)
    SELECT %(workflow)s, 'queued', '{}', now.t, %(key)s, %(value)s, minted.seq, now.t
    FROM now, minted
    WHERE NOT EXISTS (SELECT FROM durability.records AS r
                      WHERE r.workflow = %(workflow)s AND r.key = %(key)s)
    ON CONFLICT (workflow) DO UPDATE
        SET state = s.state,
-- include: checkpointer.sql placing
    RETURNING s.ending_key, s.ending, s.ending_seq
),
written AS (
    INSERT INTO durability.records (workflow, key, value, at)
    SELECT %(workflow)s, %(key)s, %(value)s, now.t
    FROM now, seen
    WHERE seen.yes AND NOT EXISTS (SELECT FROM placed WHERE placed.ending_key = %(key)s)
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
),
won AS (
    SELECT placed.ending AS value FROM placed, minted
    WHERE placed.ending_key = %(key)s AND placed.ending_seq = minted.seq
    UNION ALL
    SELECT value FROM written
),
fenced AS (
    INSERT INTO durability.claims AS c (workflow, token, until, deadline)
    SELECT %(workflow)s, floor(extract(epoch FROM now.t) * 1000)::bigint,
           '-infinity', '-infinity'
    FROM now WHERE EXISTS (SELECT 1 FROM won)
    ON CONFLICT (workflow) DO UPDATE
        SET token = greatest(EXCLUDED.token, c.token + 1),
            until = '-infinity',
            deadline = '-infinity'
    RETURNING 1
),
told AS (SELECT pg_notify(%(channel)s, %(workflow)s) FROM won)
SELECT (SELECT value FROM won),
       coalesce((SELECT value FROM durability.records
                 WHERE workflow = %(workflow)s AND key = %(key)s),
                (SELECT ending FROM placed WHERE placed.ending_key = %(key)s)),
       (SELECT count(*) FROM fenced), (SELECT count(*) FROM told), (SELECT yes FROM seen)

-- name: watch
-- A waiter for the workflow's ending (`result`) says so (`watchers` in schema.sql): its row
-- committed while it holds the claim row FOR SHARE, so a finish in flight (which holds that row
-- from its release to its commit) is waited for and its ending found by the look that follows,
-- and any later finish sees the row and notifies. No claim row: no pass holds it, none ends.
WITH joined AS (
    INSERT INTO durability.watchers (workflow, watcher) VALUES (%(workflow)s, %(watcher)s)
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM (SELECT FROM durability.claims WHERE workflow = %(workflow)s FOR SHARE) AS c

-- name: unwatch
-- A waiter's row, after its `result` returned; and any row unmarked for three minutes (a dead
-- process's: watching.py marks live ones). Not in `watch`, which holds a claim row while it
-- runs: a delete there, waiting on another's row, would hold a finish up behind it.
-- Committed without waiting for the WAL flush: a delete a crash loses leaves a row that goes
-- stale and is deleted later.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM durability.watchers
WHERE ((workflow = %(workflow)s AND watcher = %(watcher)s)
       OR at < clock_timestamp() - interval '3 minutes')
  AND (SELECT count(*) FROM quick) = 1

-- name: keep
-- A process's waiters still wait (watching.py's `KEEP`): their rows are not stale.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
UPDATE durability.watchers SET at = clock_timestamp()
WHERE watcher = ANY (%(watchers)s) AND (SELECT count(*) FROM quick) = 1

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
-- extend and renew commit without waiting for the WAL flush: a lost one shortens a claim.
WITH now AS (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
UPDATE durability.claims AS c
SET deadline = greatest(c.deadline, now.t + %(budget)s),
    until = greatest(c.until, least(now.t + %(alive)s, greatest(c.deadline, now.t + %(budget)s)))
FROM now, quick
WHERE c.workflow = %(workflow)s AND c.token = %(token)s
  AND now.t < c.until AND now.t < c.deadline
RETURNING c.deadline

-- name: renew
WITH now AS (SELECT clock_timestamp() AS t),
quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
UPDATE durability.claims AS c
SET until = greatest(c.until, least(now.t + %(alive)s, c.deadline))
FROM now, quick
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
unstood AS (
    DELETE FROM durability.standings WHERE workflow = %(workflow)s RETURNING ending_key
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
-- The records forgotten count the ending the standing kept (`load`).
SELECT (SELECT count(*) FROM gone) + (SELECT count(ending_key) FROM unstood),
       (SELECT count(*) FROM fenced),
       (SELECT count(*) FROM unstood)

-- name: release
-- Committed without waiting for the WAL flush: a lost release leaves the claim to lapse.
WITH quick AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
UPDATE durability.claims SET until = '-infinity'
FROM quick
WHERE workflow = %(workflow)s AND token = %(token)s

-- name: settle
-- Written only under the workflow's current claim token: a newer claim, or a discard (which
-- raises the token), leaves it untouched. The claim row is locked (FOR SHARE) so a claim or
-- discard cannot commit between the check and the write.
WITH holder AS (
    SELECT 1 FROM durability.claims
    WHERE workflow = %(workflow)s AND token = %(token)s
    FOR SHARE
)
INSERT INTO durability.standings AS s (workflow, state, detail, at)
SELECT %(workflow)s, %(state)s, %(detail)s, clock_timestamp() FROM holder
ON CONFLICT (workflow) DO UPDATE
    SET state = EXCLUDED.state, detail = EXCLUDED.detail, at = EXCLUDED.at
RETURNING 1

-- name: look
-- The standing, whether a live claim holds the workflow, and whether it has records: one trip.
WITH now AS (SELECT clock_timestamp() AS t)
SELECT s.state, s.detail, s.at,
       coalesce((SELECT now.t < c.until AND now.t < c.deadline
                 FROM durability.claims AS c WHERE c.workflow = %(workflow)s), false),
       EXISTS (SELECT 1 FROM durability.records AS r WHERE r.workflow = %(workflow)s)
FROM now
LEFT JOIN durability.standings AS s ON s.workflow = %(workflow)s

-- name: standings_in
-- A page of one state: a range of the (state, workflow) index, from low (inclusive; the cursor
-- itself left out) to high (exclusive: the least id above every one with the prefix). Stated
-- as row comparisons, which only that index can answer, because a plan of the workflow key
-- (which a generic plan picks when it guesses a state is common) reads every id past the
-- cursor to find a rare state: 35 ms for 100 failed among 100,000.
SELECT workflow, state, detail, at FROM durability.standings
WHERE (state, workflow) >= (%(state)s, %(low)s) AND (state, workflow) < (%(state)s, %(high)s)
  AND workflow <> %(after)s
ORDER BY state, workflow LIMIT %(limit)s

-- name: standings_all
SELECT workflow, state, detail, at FROM durability.standings
WHERE workflow >= %(low)s AND workflow < %(high)s AND workflow <> %(after)s
ORDER BY workflow LIMIT %(limit)s

-- name: tally
-- How many workflows stand in each state, of the ids in [low, high): a count over the
-- (state, workflow) index, no standing read.
SELECT state, count(*) FROM durability.standings
WHERE workflow >= %(low)s AND workflow < %(high)s
GROUP BY state
