-- The timetable's statements (durability.schedules). A swap compares the whole record it
-- read: under READ COMMITTED a concurrent swap's UPDATE waits for the first and then finds
-- the record changed, so of two workers that read one record only one advances it.

-- name: read
SELECT record FROM durability.schedules WHERE queue = %(queue)s AND name = %(name)s;

-- name: insert
INSERT INTO durability.schedules (queue, name, record, due)
VALUES (%(queue)s, %(name)s, %(new)s, %(due)s)
ON CONFLICT (queue, name) DO NOTHING
RETURNING 1;

-- name: update
UPDATE durability.schedules SET record = %(new)s, due = %(due)s
WHERE queue = %(queue)s AND name = %(name)s AND record = %(old)s
RETURNING 1;

-- name: delete
DELETE FROM durability.schedules
WHERE queue = %(queue)s AND name = %(name)s AND record = %(old)s
RETURNING 1;

-- name: due
SELECT name, record FROM durability.schedules
WHERE queue = %(queue)s AND due IS NOT NULL AND due <= %(now)s
ORDER BY due LIMIT %(limit)s;

-- name: earliest
SELECT min(due) FROM durability.schedules WHERE queue = %(queue)s AND due IS NOT NULL;

-- name: entries
SELECT name, record FROM durability.schedules WHERE queue = %(queue)s ORDER BY name;

-- name: announce
-- A schedule changed: every listener of the queue hears it, and its firer looks again (the
-- payload is the queue's with a line of its own, so no reader wakes for it).
SELECT pg_notify(%(channel)s, %(payload)s);
