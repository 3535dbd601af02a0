-- The timetable's statements (durability.schedules), loaded by `queries("timetable")`. A swap
-- compares the whole record it read: a write that changed it since makes the swap a no-op.

-- name: read
SELECT record FROM durability_schedules WHERE queue = :queue AND name = :name;

-- name: insert
INSERT INTO durability_schedules (queue, name, record, due_us)
VALUES (:queue, :name, :new, :due)
ON CONFLICT (queue, name) DO NOTHING;

-- name: update
UPDATE durability_schedules SET record = :new, due_us = :due
WHERE queue = :queue AND name = :name AND record = :old;

-- name: delete
DELETE FROM durability_schedules WHERE queue = :queue AND name = :name AND record = :old;

-- name: due
SELECT name, record FROM durability_schedules
WHERE queue = :queue AND due_us IS NOT NULL AND due_us <= :now
ORDER BY due_us LIMIT :limit;

-- name: earliest
SELECT min(due_us) FROM durability_schedules WHERE queue = :queue AND due_us IS NOT NULL;

-- name: entries
SELECT name, record FROM durability_schedules WHERE queue = :queue ORDER BY name;
