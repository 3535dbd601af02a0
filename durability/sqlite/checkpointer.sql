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
