-- The checkpointer's statements, one per `-- name:` block, loaded by `queries("checkpointer")`.
-- Each runs inside a write transaction the Python opened with BEGIN IMMEDIATE.
-- :now is host microseconds; :now_ms is the same instant in milliseconds (the token's unit).

-- name: claim
-- Take the workflow unless a live claim holds it; no row back means it was held. One upsert,
-- so the check and the take cannot be separated.
INSERT INTO durability_workflows (workflow, token, until_us, deadline_us)
VALUES (:workflow, :now_ms, :until, :deadline)
ON CONFLICT (workflow) DO UPDATE SET
    token = max(:now_ms, token + 1),
    until_us = :until,
    deadline_us = :deadline
WHERE NOT (:now < until_us AND :now < deadline_us)
RETURNING token

-- name: renew
-- A sign of life from the holder: keep the claim `alive` longer, never past the budget.
-- No row back means the pass is fenced (superseded or lapsed) and must write nothing.
UPDATE durability_workflows
SET until_us = max(until_us, min(:now + :alive, deadline_us))
WHERE workflow = :workflow AND token = :token AND :now < until_us AND :now < deadline_us
RETURNING deadline_us

-- name: extend
-- Stretch the budget to at least now + budget, then liveness within the new budget. SET sees
-- the old row, so the new deadline is spelled out again in `until_us`.
UPDATE durability_workflows
SET deadline_us = max(deadline_us, :now + :budget),
    until_us = max(until_us, min(:now + :alive, max(deadline_us, :now + :budget)))
WHERE workflow = :workflow AND token = :token AND :now < until_us AND :now < deadline_us
RETURNING deadline_us

-- name: holder
-- Who holds the workflow now: read only to say why a pass was fenced.
SELECT token, until_us, deadline_us FROM durability_workflows WHERE workflow = :workflow

-- name: insert
-- First writer wins: a row back means this write is the record.
INSERT INTO durability_records (workflow, key, value, written_us)
VALUES (:workflow, :key, :value, :now)
ON CONFLICT (workflow, key) DO NOTHING
RETURNING value

-- name: end
-- A workflow's ending, under the claim `settle` just checked: first writer wins, as `insert`,
-- with nothing read back (the pass does not need the text that won).
INSERT INTO durability_records (workflow, key, value, written_us)
VALUES (:workflow, :key, :value, :now)
ON CONFLICT (workflow, key) DO NOTHING

-- name: recorded
SELECT value FROM durability_records WHERE workflow = :workflow AND key = :key

-- name: mint
-- The next inbox sequence number of the workflow (1 on its first append); never reused.
INSERT INTO durability_workflows (workflow, token, until_us, deadline_us, appended)
VALUES (:workflow, 0, 0, 0, 1)
ON CONFLICT (workflow) DO UPDATE SET appended = appended + 1
RETURNING appended

-- name: forget
DELETE FROM durability_records WHERE workflow = :workflow

-- name: fence
-- Raise the token and clear the claim, so a pass still running is refused at its next write
-- and the next claim is stamped above every token handed out before.
INSERT INTO durability_workflows (workflow, token, until_us, deadline_us)
VALUES (:workflow, :now_ms, 0, 0)
ON CONFLICT (workflow) DO UPDATE SET
    token = max(:now_ms, token + 1),
    until_us = 0,
    deadline_us = 0

-- name: release
UPDATE durability_workflows SET until_us = 0 WHERE workflow = :workflow AND token = :token

-- name: load
SELECT key, value FROM durability_records WHERE workflow = :workflow ORDER BY seq

-- name: history
SELECT key, value, written_us FROM durability_records WHERE workflow = :workflow ORDER BY seq

-- name: settle
-- Written only under the workflow's current claim token: a newer claim, or a discard (which
-- raises the token), leaves it untouched.
INSERT INTO durability_standings (workflow, state, detail, at_us)
SELECT :workflow, :state, :detail, :now
WHERE EXISTS (
    SELECT 1 FROM durability_workflows WHERE workflow = :workflow AND token = :token
)
ON CONFLICT (workflow) DO UPDATE SET
    state = excluded.state,
    detail = excluded.detail,
    at_us = excluded.at_us

-- name: look
-- The standing, the claim and whether any record exists, in one statement.
SELECT s.state, s.detail, s.at_us, w.until_us, w.deadline_us,
       EXISTS (SELECT 1 FROM durability_records AS r WHERE r.workflow = :workflow)
FROM (SELECT :workflow AS workflow) AS k
LEFT JOIN durability_standings AS s ON s.workflow = k.workflow
LEFT JOIN durability_workflows AS w ON w.workflow = k.workflow

-- name: standings_in
-- A page of one state: a range of the (state, workflow) index. `after` and `prefix` are ''
-- when not given (every id is above '' and starts with it).
SELECT workflow, state, detail, at_us FROM durability_standings
WHERE state = :state AND workflow > :after AND workflow >= :prefix
  AND substr(workflow, 1, length(:prefix)) = :prefix
ORDER BY workflow LIMIT :limit

-- name: standings_all
SELECT workflow, state, detail, at_us FROM durability_standings
WHERE workflow > :after AND workflow >= :prefix
  AND substr(workflow, 1, length(:prefix)) = :prefix
ORDER BY workflow LIMIT :limit

-- name: unstand
DELETE FROM durability_standings WHERE workflow = :workflow

-- name: tally
-- How many workflows stand in each state, of those whose ids start with :prefix ('' for all).
SELECT state, count(*) FROM durability_standings
WHERE workflow >= :prefix AND substr(workflow, 1, length(:prefix)) = :prefix
GROUP BY state
